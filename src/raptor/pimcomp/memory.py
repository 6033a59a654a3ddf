"""Local memory of the LL schedule with lifetimes (PIMCOMP's pixel-level runtime management).

Time is measured in half instruction groups: `2*t` is the compute stage of IG t, `2*t + 1` its
transfer stage (received pixels are written there), `PROLOGUE` the loads before IG 0. Every
buffer of a core is a block with a closed lifetime [t0, t1]; `TimedAllocator` places it at the
lowest 32-byte aligned address not used by any block whose lifetime overlaps (first fit in
address x time), so buffers of finished layers, partial sums and staging buffers are reused.
Program order on a core follows the half-steps, and a core runs its instructions in order, so a
block may take an address whose previous owner's last access was at an earlier half-step.

Input pixels of a layer live in `Site`s: one per receiving core (and part of a split vector
layer), a pool of row slots (row = `width` pixels x `channels` elements; only rows with a pixel
read on the core get one). `row_slots` assigns rows to slots by interval
coloring over row lifetimes (first arrival .. last window that reads the row), a free list of
slots in arrival order: a slot is reused as soon as the row in it is no longer needed, so the
site holds only the live rows (a line buffer for a sliding window).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from raptor.errors import PassFailedError

ALIGN_BYTES = 32
PROLOGUE = -2


def row_slots(arrive: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, int]:
    """Slot per row for rows live over [arrive, last] (half-steps): greedy interval coloring
    in arrival order, lowest free slot first (optimal: #slots = max rows live at once)."""
    n = len(arrive)
    slot = np.empty(n, np.int64)
    busy: list[tuple[int, int]] = []
    free: list[int] = []
    top = 0
    for r in np.lexsort((np.arange(n), arrive)).tolist():
        a = int(arrive[r])
        while busy and busy[0][0] < a:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            s = heapq.heappop(free)
        else:
            s, top = top, top + 1
        slot[r] = s
        heapq.heappush(busy, (int(last[r]), s))
    return slot, top


@dataclass
class Site:
    """A core's buffer of the input pixels [base, base + rows*width) of a view it reads."""

    addr: int
    base: int
    rows: int
    width: int
    channels: int
    slot: np.ndarray  # per row of the site: its slot
    slots: int
    read: np.ndarray  # per pixel: read (and so received) here

    @property
    def pixels(self) -> int:
        return self.rows * self.width

    def elem(self, off) -> np.ndarray:
        """Element offset in the buffer of element `off` of the site's dense pixel range."""
        off = np.asarray(off, np.int64)
        c, w = self.channels, self.width
        pix = off // c
        row = pix // w
        return (self.slot[row] * w + (pix - row * w)) * c + (off - pix * c)

    def byte(self, off, eb: int) -> np.ndarray:
        return self.addr + self.elem(off) * eb


class TimedAllocator:
    """First fit in address x time for one core's blocks; overflow names core and bytes."""

    def __init__(self, capacity: int, core: int, what: str):
        self.capacity, self.core, self.what = capacity, core, what
        self.blocks: list[tuple[int, int, int, int, str]] = []  # (t0, t1, addr, size, label)
        self.top = 0

    def alloc(self, size: int, t0: int, t1: int, label: str) -> int:
        size = max(ALIGN_BYTES, -(-size // ALIGN_BYTES) * ALIGN_BYTES)
        busy = sorted((a, a + s) for b0, b1, a, s, _ in self.blocks if b0 <= t1 and t0 <= b1)
        addr = 0
        for a0, a1 in busy:
            if a0 - addr >= size:
                break
            addr = max(addr, a1)
        end = addr + size
        self.blocks.append((t0, t1, addr, size, label))
        self.top = max(self.top, end)
        if end > self.capacity:
            live = sorted(
                ((s, lbl) for b0, b1, _, s, lbl in self.blocks if b0 <= t1 and t0 <= b1),
                reverse=True,
            )
            total = sum(s for s, _ in live)
            parts = ", ".join(f"{lbl} {s}" for s, lbl in live[:8])
            more = f", ... {len(live) - 8} more" if len(live) > 8 else ""
            ig = max(t0, 0) // 2
            raise PassFailedError(
                f"local memory overflow on core {self.core}: {self.what} needs {end} bytes "
                f"around IG {ig} ({total} bytes live: {parts}{more}), "
                f"core has {self.capacity} bytes"
            )
        return addr

    def live_peak(self) -> int:
        """Max over time of the bytes of live blocks (the peak without fragmentation)."""
        if not self.blocks:
            return 0
        t = np.array([[b[0], b[1] + 1] for b in self.blocks], np.int64)
        s = np.array([b[3] for b in self.blocks], np.int64)
        times = np.concatenate([t[:, 0], t[:, 1]])
        delta = np.concatenate([s, -s])
        order = np.lexsort((delta, times))  # frees before allocations at the same time
        return int(np.cumsum(delta[order]).max())
