"""Values of the compiled engine: element-wise vector ops, moves and host-memory streams on flat
float32 arrays, each giving the bits numpy gives for the Python engine's expression
(raptor.sim.vector.apply, raptor.sim.memory.HostMemory): IEEE float32 arithmetic, numpy's
`maximum` rule (the first operand if it is greater or NaN, else the second) and copy semantics
when source and destination overlap.

Loops write through a view of the destination (`D[i]`, not `L[d + i]`), which lets LLVM
vectorise them, and an in-place operand is read through that same view, since a loop that reads
one view of an array while writing another is vectorised only when the two do not overlap.
Copies are memmoves."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

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


@njit(cache=True, nogil=True, inline="always")
def _binary(op: int, D: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    """D = x op y element-wise (vvadd, vvsub, vvmul, vvmax); D may be x or y itself."""
    n = D.size
    if op == OP_VVADD:
        for i in range(n):
            D[i] = x[i] + y[i]
    elif op == OP_VVSUB:
        for i in range(n):
            D[i] = x[i] - y[i]
    elif op == OP_VVMUL:
        for i in range(n):
            D[i] = x[i] * y[i]
    else:  # OP_VVMAX
        for i in range(n):
            D[i] = _fmax(x[i], y[i])


@njit(cache=True, nogil=True, inline="always")
def _relu(D: np.ndarray, x: np.ndarray) -> None:
    """D = maximum(x, 0) element-wise (NaN kept); D may be x itself."""
    for i in range(D.size):
        D[i] = _fmax(x[i], np.float32(0.0))


@njit(cache=True, nogil=True)
def vector_inline(op: int, L: np.ndarray, d: int, a: int, b: int, n: int) -> None:
    """The INLINE_VECTOR ops (b: rs2's element index, or vmv's element stride)."""
    D = L[d : d + n]
    if op == OP_VMV:
        if b == 1:
            move(L, d, L, a, n)
        elif b <= 0:
            D[:] = L[a]
        elif _overlap(d, d + n, a, a + (n - 1) * b + 1):
            src = np.empty(n, np.float32)
            for i in range(n):
                src[i] = L[a + i * b]
            move(D, 0, src, 0, n)
        else:
            for i in range(n):
                D[i] = L[a + i * b]
        return
    if op == OP_VRELU:
        if d == a:
            _relu(D, D)
        elif _overlap(d, d + n, a, a + n):
            _relu(D, L[a : a + n].copy())
        else:
            _relu(D, L[a : a + n])
        return
    x = L[a : a + n]
    y = L[b : b + n]
    if (d != a and _overlap(d, d + n, a, a + n)) or (d != b and _overlap(d, d + n, b, b + n)):
        _binary(op, D, x.copy(), y.copy())
    elif d == a and d == b:
        _binary(op, D, D, D)
    elif d == a:
        _binary(op, D, D, y)
    elif d == b:
        _binary(op, D, x, D)
    else:
        _binary(op, D, x, y)


@intrinsic
def _memmove(typingctx, dst, d, src, a, m):
    """LLVM's memmove of m float32 elements from src[a] to dst[d] (1-D C-contiguous arrays)."""
    for arr in (dst, src):
        if not (isinstance(arr, types.Array) and arr.dtype == types.float32 and arr.ndim == 1):
            return None
        if arr.layout != "C":
            return None
    sig = types.void(dst, types.int64, src, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        dst_v, d_v, src_v, a_v, m_v = args
        dary = context.make_array(signature.args[0])(context, builder, dst_v)
        sary = context.make_array(signature.args[2])(context, builder, src_v)
        i8p = ir.IntType(8).as_pointer()
        i64 = ir.IntType(64)
        dp = builder.bitcast(builder.gep(dary.data, [d_v]), i8p)
        sp = builder.bitcast(builder.gep(sary.data, [a_v]), i8p)
        size = builder.mul(m_v, ir.Constant(i64, 4))
        fn = builder.module.declare_intrinsic("llvm.memmove", [i8p, i8p, i64])
        builder.call(fn, [dp, sp, size, ir.Constant(ir.IntType(1), 0)])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def move(dst: np.ndarray, d: int, src: np.ndarray, a: int, m: int) -> None:
    """dst[d:d+m] = src[a:a+m] (float32 arrays), with memmove semantics when they are the same
    array."""
    if m > 0:
        _memmove(dst, d, src, a, m)


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
    move(L, la, hdata, ha, m)
    for k in range(inreg.shape[0]):
        s, e, na, off = inreg[k, 0], inreg[k, 1], inreg[k, 2], inreg[k, 3]
        lo = ha if ha > s else s
        hi = ha + m if ha + m < e else e
        if lo < hi:
            move(L, la + lo - ha, inbuf, off + (rnd % na) * (e - s) + lo - s, hi - lo)


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
    move(hdata, ha, L, la, m)
    if hwritten.size:
        hwritten[ha : ha + m] = 1
    for k in range(outreg.shape[0]):
        s, e, na, off = outreg[k, 0], outreg[k, 1], outreg[k, 2], outreg[k, 3]
        lo = ha if ha > s else s
        hi = ha + m if ha + m < e else e
        if lo < hi and rnd < na:
            move(outbuf, off + rnd * (e - s) + lo - s, L, la + lo - ha, hi - lo)


@njit(cache=True, nogil=True)
def mvm_store(L: np.ndarray, d: int, y: np.ndarray, cols: int, relu: int) -> None:
    """L[d:d+cols] = an MVM's result y[:cols], through relu when the mvmul asks for it (numpy's
    `maximum(y, 0)`: NaN kept)."""
    if relu:
        _relu(L[d : d + cols], y[:cols])
    else:
        move(L, d, y, 0, cols)


@njit(cache=True, nogil=True)
def fill(L: np.ndarray, d: int, m: int, imm: int) -> None:
    """lldi: L[d:d+m] = float32(imm)."""
    L[d : d + m] = np.float32(imm)
