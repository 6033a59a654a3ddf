"""Energy accounting as pimsim-nn does it (`EnergyCounter`): dynamic energy per unit in pJ plus
static power in mW times the run time (mW x ns = pJ).

pimsim-nn charges static power only for memories: 1 mW per instantiated core's local memory
(every core that has a program file, idle or not) and 1 mW for the global memory; crossbar, ADC
and DAC static power is never added (pimsim-nn.md §5, §9.10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from raptor.arch.loader import Arch


@dataclass
class EnergyCounter:
    """Summable dynamic energy per unit (pJ)."""

    matrix_pj: float = 0.0
    vector_pj: float = 0.0
    local_memory_pj: float = 0.0
    global_memory_pj: float = 0.0
    noc_pj: float = 0.0
    static_pj: float = 0.0

    def __iadd__(self, other: EnergyCounter) -> EnergyCounter:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    @property
    def dynamic_pj(self) -> float:
        return (
            self.matrix_pj
            + self.vector_pj
            + self.local_memory_pj
            + self.global_memory_pj
            + self.noc_pj
        )

    @property
    def total_pj(self) -> float:
        return self.dynamic_pj + self.static_pj

    def to_dict(self) -> dict[str, float]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["total_pj"] = self.total_pj
        return d


def static_power_mw(arch: Arch, instantiated_cores: int) -> float:
    """Static power pimsim-nn charges: local memory of each instantiated core + global memory."""
    return (
        arch.core.local_memory.static_power * instantiated_cores + arch.global_memory.static_power
    )


def with_static(
    e: EnergyCounter, arch: Arch, cores: int, gmem_pj: float, noc_pj: float, run_time_ns: float
) -> EnergyCounter:
    """A run's counter completed with global-memory and NoC energy and static energy over
    run_time_ns."""
    e.global_memory_pj = gmem_pj
    e.noc_pj = noc_pj
    e.static_pj = static_power_mw(arch, cores) * run_time_ns
    return e


TIMELINE_BINS = 1024  # bins of the energy-vs-time record (a power of two)
TIMELINE_WIDTH0_NS = 1.0  # their first width; it doubles whenever a charge falls past the last


class EnergyTimeline:
    """Dynamic energy charged over simulated time, in TIMELINE_BINS bins of equal width: every
    charge (an instruction's unit and local-memory energy at its dispatch, a NoC message's at its
    start on the switch, a global-memory request's when the queue serves it, a load's local write
    when it completes) adds to the bin of its time; a charge past the last bin first merges bins
    pairwise and doubles the width, so the record stays TIMELINE_BINS floats for any run and its
    resolution is 1/512 to 1/1024 of the run. Both engines make the same charges in the same
    order, so their records are equal bit for bit. `static_mw` is the static power."""

    __slots__ = ("bins", "width_ns", "static_mw")

    def __init__(self, static_mw: float = 0.0) -> None:
        self.bins = [0.0] * TIMELINE_BINS
        self.width_ns = TIMELINE_WIDTH0_NS
        self.static_mw = static_mw

    def add(self, t: float, e: float) -> None:
        k = int(t / self.width_ns)
        while k >= TIMELINE_BINS:
            b = self.bins
            for j in range(TIMELINE_BINS // 2):
                b[j] = b[2 * j] + b[2 * j + 1]
            for j in range(TIMELINE_BINS // 2, TIMELINE_BINS):
                b[j] = 0.0
            self.width_ns *= 2.0
            k = int(t / self.width_ns)
        self.bins[k] += e

    def energy_until_pj(self, t_ns: float) -> float:
        """Energy (dynamic + static) spent from 0 to t_ns; the bin holding t_ns counts
        pro rata."""
        if t_ns <= 0:
            return 0.0
        x = t_ns / self.width_ns
        k = min(int(x), TIMELINE_BINS)
        dyn = math.fsum(self.bins[:k])
        if k < TIMELINE_BINS:
            dyn += self.bins[k] * (x - k)
        return dyn + self.static_mw * t_ns
