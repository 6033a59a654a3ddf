"""Values of the compiled engine: element-wise vector ops, moves and host-memory streams on flat
float32 arrays, each giving the bits numpy gives for the Python engine's expression
(raptor.sim.vector.apply, raptor.sim.memory.HostMemory): IEEE float32 arithmetic, numpy's
`maximum` rule (the first operand if it is greater or NaN, else the second) and copy semantics
when source and destination overlap."""

from __future__ import annotations

import numpy as np
from numba import njit

from raptor.sim.kernel_state import OP_VMV, OP_VRELU, OP_VVADD, OP_VVMAX, OP_VVMUL, OP_VVSUB

# vector ops computed here; the others (vvdmul, vavg, vtanh, vsigm, vsoftmax) go back to numpy
INLINE_VECTOR = (OP_VVADD, OP_VVSUB, OP_VVMUL, OP_VVMAX, OP_VRELU, OP_VMV)


@njit(cache=True, nogil=True, inline="always")
def _fmax(x, y):
    return x if (x > y or x != x) else y


@njit(cache=True, nogil=True)
def _overlap(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 < b1 and b0 < a1


@njit(cache=True, nogil=True)
def is_inline(op: int) -> bool:
    """Whether vector op `op` is one of INLINE_VECTOR."""
    return (
        op == OP_VVADD
        or op == OP_VVSUB
        or op == OP_VVMUL
        or op == OP_VVMAX
        or op == OP_VRELU
        or op == OP_VMV
    )


@njit(cache=True, nogil=True)
def vector_inline(op: int, L: np.ndarray, d: int, a: int, b: int, n: int) -> None:
    """The INLINE_VECTOR ops (b: rs2's element index, or vmv's element stride)."""
    if op == OP_VMV:
        span = (n - 1) * b + 1 if b > 0 else 1
        if _overlap(d, d + n, a, a + span):
            src = np.empty(n, np.float32)
            for i in range(n):
                src[i] = L[a + i * b] if b > 0 else L[a]
            for i in range(n):
                L[d + i] = src[i]
        elif b > 0:
            for i in range(n):
                L[d + i] = L[a + i * b]
        else:
            v = L[a]
            for i in range(n):
                L[d + i] = v
        return
    if op == OP_VRELU:
        if d != a and _overlap(d, d + n, a, a + n):
            src = L[a : a + n].copy()
            for i in range(n):
                L[d + i] = _fmax(src[i], np.float32(0.0))
        else:
            for i in range(n):
                L[d + i] = _fmax(L[a + i], np.float32(0.0))
        return
    x = L[a : a + n]
    y = L[b : b + n]
    if (d != a and _overlap(d, d + n, a, a + n)) or (d != b and _overlap(d, d + n, b, b + n)):
        x = x.copy()
        y = y.copy()
    if op == OP_VVADD:
        for i in range(n):
            L[d + i] = x[i] + y[i]
    elif op == OP_VVSUB:
        for i in range(n):
            L[d + i] = x[i] - y[i]
    elif op == OP_VVMUL:
        for i in range(n):
            L[d + i] = x[i] * y[i]
    else:  # OP_VVMAX
        for i in range(n):
            L[d + i] = _fmax(x[i], y[i])


@njit(cache=True, nogil=True)
def move(dst: np.ndarray, d: int, src: np.ndarray, a: int, m: int) -> None:
    """dst[d:d+m] = src[a:a+m] with memmove semantics when they are the same array."""
    if d <= a:
        for i in range(m):
            dst[d + i] = src[a + i]
    else:
        for i in range(m - 1, -1, -1):
            dst[d + i] = src[a + i]


@njit(cache=True, nogil=True)
def host_read(
    L: np.ndarray,
    la: int,
    hdata: np.ndarray,
    ha: int,
    m: int,
    rnd: int,
    inreg: np.ndarray,
    inbuf: np.ndarray,
) -> None:
    """L[la:la+m] = host[ha:ha+m] as round rnd sees it (network inputs streamed per round);
    inreg rows: (start, end, number of round arrays, offset in inbuf)."""
    for i in range(m):
        L[la + i] = hdata[ha + i]
    for k in range(inreg.shape[0]):
        s, e, na, off = inreg[k, 0], inreg[k, 1], inreg[k, 2], inreg[k, 3]
        lo = ha if ha > s else s
        hi = ha + m if ha + m < e else e
        if lo < hi:
            base = off + (rnd % na) * (e - s)
            for j in range(lo, hi):
                L[la + j - ha] = inbuf[base + j - s]


@njit(cache=True, nogil=True)
def host_write(
    L: np.ndarray,
    la: int,
    hdata: np.ndarray,
    hwritten: np.ndarray,
    ha: int,
    m: int,
    rnd: int,
    outreg: np.ndarray,
    outbuf: np.ndarray,
) -> None:
    """host[ha:ha+m] = L[la:la+m] in round rnd (network outputs kept per round; hwritten, when
    not empty, marks stored elements)."""
    for i in range(m):
        hdata[ha + i] = L[la + i]
    if hwritten.size:
        for i in range(m):
            hwritten[ha + i] = 1
    for k in range(outreg.shape[0]):
        s, e, na, off = outreg[k, 0], outreg[k, 1], outreg[k, 2], outreg[k, 3]
        lo = ha if ha > s else s
        hi = ha + m if ha + m < e else e
        if lo < hi and rnd < na:
            base = off + rnd * (e - s)
            for j in range(lo, hi):
                outbuf[base + j - s] = L[la + j - ha]


@njit(cache=True, nogil=True)
def mvm_store(L: np.ndarray, d: int, y: np.ndarray, cols: int, relu: int) -> None:
    """L[d:d+cols] = an MVM's result y[:cols], through relu when the mvmul asks for it (numpy's
    `maximum(y, 0)`: NaN kept)."""
    if relu:
        for j in range(cols):
            v = y[j]
            L[d + j] = v if (v > 0 or v != v) else np.float32(0.0)
    else:
        for j in range(cols):
            L[d + j] = y[j]


@njit(cache=True, nogil=True)
def fill(L: np.ndarray, d: int, m: int, imm: int) -> None:
    """lldi: L[d:d+m] = float32(imm)."""
    v = np.float32(imm)
    for j in range(m):
        L[d + j] = v
