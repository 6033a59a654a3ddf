"""Local and global memory timing (pimsim-nn `Memory`): a transaction of `size` bytes costs
ceil(size / data_width) x (read or write) latency cycles; one request queue serialises requests.

`HostMemory` also holds the functional host image, with the network inputs and outputs streamed
per round (an ld from an input buffer in round r reads input r; a st into an output buffer in
round r writes output r).
"""

from __future__ import annotations

import numpy as np

from raptor.arch.loader import MemoryConfig
from raptor.arch.timing import memory_energy_pj, memory_latency_ns


class MemoryTiming:
    """Cached latency/energy of one memory; `busy_until` is the end of its request queue."""

    __slots__ = ("cfg", "_cache", "busy_until", "energy_pj", "busy_ns", "requests", "bytes")

    def __init__(self, cfg: MemoryConfig) -> None:
        self.cfg = cfg
        self._cache: dict[tuple[int, bool], tuple[float, float]] = {}
        self.busy_until = 0.0
        self.energy_pj = 0.0
        self.busy_ns = 0.0
        self.requests = 0
        self.bytes = 0  # bytes moved through the request queue (ld and st)

    def cost(self, size_bytes: int, write: bool) -> tuple[float, float]:
        """(latency ns, dynamic energy pJ) of one transaction."""
        key = (size_bytes, write)
        c = self._cache.get(key)
        if c is None:
            c = (
                memory_latency_ns(self.cfg, size_bytes, write),
                memory_energy_pj(self.cfg, size_bytes, write),
            )
            self._cache[key] = c
        return c

    def reserve(self, t: float, size_bytes: int, write: bool) -> tuple[float, float]:
        """Queue a request arriving at t; returns (start, end) in ns."""
        lat, e = self.cost(size_bytes, write)
        start = t if t > self.busy_until else self.busy_until
        end = start + lat
        self.busy_until = end
        self.energy_pj += e
        self.busy_ns += lat
        self.requests += 1
        self.bytes += size_bytes
        return start, end


class HostMemory:
    """Shared host memory (float32 per element slot) with per-round input/output streams."""

    def __init__(
        self, image: np.ndarray, element_bytes: int, inputs: list, outputs: list, rounds: int
    ) -> None:
        self.data = np.array(image, dtype=np.float32, copy=True)
        self.eb = element_bytes
        # (start_elem, end_elem, name, [flat host-layout array per round])
        self.inputs = inputs
        self.outputs = outputs
        self.rounds = rounds
        self.written: np.ndarray | None = None  # a mask of stored elements, when tracked

    @property
    def size(self) -> int:
        return self.data.size

    def read(self, a: int, n: int, rnd: int) -> np.ndarray:
        out = self.data[a : a + n].copy()
        for s, e, _name, arrs in self.inputs:
            lo, hi = max(a, s), min(a + n, e)
            if lo < hi:
                out[lo - a : hi - a] = arrs[rnd % len(arrs)][lo - s : hi - s]
        return out

    def write(self, a: int, values: np.ndarray, rnd: int) -> None:
        n = values.size
        self.data[a : a + n] = values
        if self.written is not None:
            self.written[a : a + n] = True
        for s, e, _name, arrs in self.outputs:
            lo, hi = max(a, s), min(a + n, e)
            if lo < hi and rnd < len(arrs):
                arrs[rnd][lo - s : hi - s] = values[lo - a : hi - a]
