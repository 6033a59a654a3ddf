"""Energy accounting as pimsim-nn does it (`EnergyCounter`): dynamic energy per unit in pJ plus
static power in mW times the run time (mW x ns = pJ).

pimsim-nn charges static power only for memories: 1 mW per instantiated core's local memory
(every core that has a program file, idle or not) and 1 mW for the global memory; crossbar, ADC
and DAC static power is never added (pimsim-nn.md §5, §9.10).
"""

from __future__ import annotations

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
