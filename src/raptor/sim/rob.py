"""Reorder-buffer timing of the Python engine for rob_size > 1 (pimcomp.md §3.2, pimsim-nn
`ReorderBuffer`; the rules are in raptor.sim.engine's docstring)."""

from __future__ import annotations

import bisect


class Rob:
    """Reorder-buffer state of one core (rob_size > 1 only)."""

    __slots__ = ("size", "inflight", "port", "floor")

    def __init__(self, size: int) -> None:
        self.size = size
        # (release ns, unit, read ranges, write ranges); unit: array group >= 0, UNIT_V, UNIT_T
        self.inflight: list[tuple] = []
        self.port: list[tuple[float, float]] = []  # busy intervals of the local-memory port
        self.floor = 0.0  # next dispatch no earlier (a blocking instruction's completion)


UNIT_V, UNIT_T = -1, -2


def _overlap(xs: tuple, ys: tuple) -> bool:
    for a, b in xs:
        for c, d in ys:
            if a < d and c < b:
                return True
    return False


class RobMixin:
    """Dispatch slots and local-memory port of a core's reorder buffer (Engine methods)."""

    def _rob_slot(self, c, base: float, unit: int, reads: tuple, writes: tuple) -> float:
        """Dispatch time (>= base) of the next instruction in order: after every in-flight
        instruction on the same unit or with a RAW/WAR/WAW local-range conflict has retired, and
        once the ROB has a free entry."""
        rb = c.rob
        s = base if base > rb.floor else rb.floor
        live = [e for e in rb.inflight if e[0] > s]
        for rel, u, rr, ww in live:
            if rel > s and (
                u == unit or _overlap(writes, rr) or _overlap(writes, ww) or _overlap(reads, ww)
            ):
                s = rel
        while True:
            later = [e[0] for e in live if e[0] > s]
            if len(later) < rb.size:
                break
            s = min(later)
        rb.inflight = [e for e in live if e[0] > s]
        rb.port = [iv for iv in rb.port if iv[1] > s]
        return s

    def _rob_issue(
        self, c, s: float, unit: int, reads: tuple, writes: tuple, phases, retire: float
    ) -> float:
        """Run an instruction dispatched at s through its phases ((True, ns) on the local-memory
        port, which serves one transaction at a time, or (False, ns) inside the unit); record it
        in flight until end + retire. Returns its end."""
        rb = c.rob
        port = rb.port
        t = s
        for on_port, dur in phases:
            if not on_port:
                t += dur
                continue
            if dur <= 0:
                continue
            x = t
            for a, b in port:
                if b <= x:
                    continue
                if a >= x + dur:
                    break
                x = b
            bisect.insort(port, (x, x + dur))
            t = x + dur
        rb.inflight.append((t + retire, unit, reads, writes))
        return t
