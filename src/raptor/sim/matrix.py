"""Matrix unit (pimsim-nn `MatrixUnit`/`ArrayGroup`/`XbarArray`): one MVM on an array group.

Latency = local read (xbar rows x input bytes x 8, pimsim's "compare with mnsim" factor)
+ crossbar compute (`raptor.arch.timing.mvm_cost`) + local write of
(cols x cell_precision / mbiw) x output bytes x crossbars. Energy = per-crossbar MVM energy x the
array group's crossbar count. Values: y = x @ W (float32), relu if flagged.
"""

from __future__ import annotations

import numpy as np

from raptor.arch.loader import Arch
from raptor.arch.timing import mvm_cost, mvm_local_read_bytes, mvm_local_write_bytes
from raptor.sim.memory import MemoryTiming


class MatrixUnit:
    """Cost cache for MVMs plus the weight matrices of every array group of one core."""

    def __init__(self, arch: Arch, crossbars: list[int], weights: list[np.ndarray | None]) -> None:
        self.arch = arch
        self.crossbars = crossbars
        self.weights = weights
        self._cache: dict[tuple[int, int, int, int], tuple[float, ...]] = {}

    def cost(
        self, group: int, ibiw: int, obiw: int, mbiw: int, local: MemoryTiming
    ) -> tuple[float, ...]:
        """(read ns, compute ns, write ns, matrix energy pJ, local-memory energy pJ) of one MVM."""
        key = (group, ibiw, obiw, mbiw)
        c = self._cache.get(key)
        if c is None:
            xb = self.crossbars[group]
            mc = mvm_cost(self.arch, ibiw)
            rd, erd = local.cost(
                mvm_local_read_bytes(self.arch, self.arch.matrix.rows, ibiw), False
            )
            wr, ewr = local.cost(mvm_local_write_bytes(self.arch, xb, mbiw, obiw), True)
            c = (rd, mc.latency_ns, wr, mc.energy_per_crossbar_pj * xb, erd + ewr)
            self._cache[key] = c
        return c
