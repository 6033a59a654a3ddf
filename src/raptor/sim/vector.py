"""Vector unit (pimsim-nn `VectorUnit`): one serial FSM.

Latency = local read of one or two vectors (len x input bytes each, queued on the local port)
+ ceil(len / vector_width) x vector_latency_cycle (added as ns, as pimsim-nn does) + local write
(len x input or output bytes; one element for vvdmul/vavg). Energy per `raptor.arch.timing`.
Values: float32 element-wise ops on the core's local memory (docs/pim-format.md).
"""

from __future__ import annotations

import numpy as np

from raptor.arch.loader import Arch
from raptor.arch.timing import vector_compute_ns, vector_energy_pj
from raptor.isa.opcodes import Opcode
from raptor.sim.memory import MemoryTiming

TWO_OPERANDS = frozenset(
    int(o)
    for o in (
        Opcode.VVADD,
        Opcode.VVSUB,
        Opcode.VVMUL,
        Opcode.VVDMUL,
        Opcode.VVMAX,
        Opcode.VVSLL,
        Opcode.VVSRA,
    )
)
USE_OUTPUT_BYTES = frozenset(
    int(o)
    for o in (
        Opcode.VVMUL,
        Opcode.VVSLL,
        Opcode.VVSRA,
        Opcode.VTANH,
        Opcode.VSIGM,
        Opcode.VRSU,
        Opcode.VRSL,
    )
)
SCALAR_RESULT = frozenset((int(Opcode.VVDMUL), int(Opcode.VAVG)))
# Ops with no float32 meaning (bit shifts): the functional simulator rejects them.
UNSUPPORTED = frozenset(int(o) for o in (Opcode.VVSLL, Opcode.VVSRA, Opcode.VRSU, Opcode.VRSL))
STRIDED = frozenset((int(Opcode.VMV), int(Opcode.VAVG)))


class VectorUnit:
    """Cost cache of vector instructions; `apply` computes their values."""

    def __init__(self, arch: Arch) -> None:
        self.arch = arch
        self._cache: dict[tuple[int, int, int, int], tuple[float, float, float]] = {}

    def cost(
        self, op: int, length: int, ibytes: int, obytes: int, local: MemoryTiming
    ) -> tuple[float, float, float]:
        """(total latency ns, vector energy pJ, local-memory energy pJ)."""
        key = (op, length, ibytes, obytes)
        c = self._cache.get(key)
        if c is None:
            rd, erd = local.cost(ibytes * length, False)
            reads = 2 if op in TWO_OPERANDS else 1
            wb = (
                obytes
                if op in SCALAR_RESULT
                else (obytes if op in USE_OUTPUT_BYTES else ibytes) * length
            )
            wr, ewr = local.cost(wb, True)
            lat = reads * rd + vector_compute_ns(self.arch, length) + wr
            c = (lat, vector_energy_pj(self.arch, length), reads * erd + ewr)
            self._cache[key] = c
        return c

    def parts(
        self, op: int, length: int, ibytes: int, obytes: int, local: MemoryTiming
    ) -> tuple[float, float, float]:
        """(local read ns, compute ns, local write ns): the phases of `cost`'s latency."""
        rd = local.cost(ibytes * length, False)[0] * (2 if op in TWO_OPERANDS else 1)
        wb = (
            obytes
            if op in SCALAR_RESULT
            else (obytes if op in USE_OUTPUT_BYTES else ibytes) * length
        )
        wr = local.cost(wb, True)[0]
        return rd, vector_compute_ns(self.arch, length), wr


def apply(op: int, mem: np.ndarray, d: int, a: int, b: int, n: int) -> None:
    """Execute vector op `op` on local memory `mem` (element indices; b is rs2's element index, or
    the element stride for vmv/vavg)."""
    if op == Opcode.VVADD:
        np.add(mem[a : a + n], mem[b : b + n], out=mem[d : d + n])
    elif op == Opcode.VVSUB:
        np.subtract(mem[a : a + n], mem[b : b + n], out=mem[d : d + n])
    elif op == Opcode.VVMUL:
        np.multiply(mem[a : a + n], mem[b : b + n], out=mem[d : d + n])
    elif op == Opcode.VVMAX:
        np.maximum(mem[a : a + n], mem[b : b + n], out=mem[d : d + n])
    elif op == Opcode.VVDMUL:
        mem[d] = np.dot(mem[a : a + n], mem[b : b + n])
    elif op == Opcode.VRELU:
        np.maximum(mem[a : a + n], 0, out=mem[d : d + n])
    elif op == Opcode.VSIGM:
        x = mem[a : a + n].astype(np.float32)
        with np.errstate(over="ignore"):  # exp(-x) = inf for x << 0 gives exactly the limit 0
            mem[d : d + n] = 1.0 / (1.0 + np.exp(-x))
    elif op == Opcode.VTANH:
        mem[d : d + n] = np.tanh(mem[a : a + n])
    elif op == Opcode.VMV:
        mem[d : d + n] = mem[a : a + n * b : b] if b > 0 else mem[a]
    elif op == Opcode.VAVG:
        mem[d] = np.mean(mem[a : a + n * b : b], dtype=np.float32) if b > 0 else mem[a]
    elif op == Opcode.VSOFTMAX:
        x = mem[a : a + n].astype(np.float32)
        e = np.exp(x - x.max())
        mem[d : d + n] = e / e.sum()
    else:  # pragma: no cover - guarded by UNSUPPORTED in the engine
        raise ValueError(f"unsupported vector op {op}")
