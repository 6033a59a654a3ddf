"""The simulation report: latency, deadlines, throughput, energy, power, outputs, per-core stats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raptor.sim.energy import EnergyCounter, EnergyTimeline


@dataclass
class CoreStats:
    """Per-core counters (summable): instructions, busy ns per unit, stall ns, finish times."""

    core: int
    instructions: int = 0
    matrix_busy_ns: float = 0.0
    vector_busy_ns: float = 0.0
    transfer_busy_ns: float = 0.0
    stall_sync_ns: float = 0.0
    stall_recv_ns: float = 0.0
    stall_memory_ns: float = 0.0
    finish_ns: list[float] = field(default_factory=list)

    @property
    def stall_ns(self) -> float:
        return self.stall_sync_ns + self.stall_recv_ns + self.stall_memory_ns

    def to_dict(self) -> dict[str, Any]:
        return {
            "core": self.core,
            "instructions": self.instructions,
            "matrix_busy_ns": self.matrix_busy_ns,
            "vector_busy_ns": self.vector_busy_ns,
            "transfer_busy_ns": self.transfer_busy_ns,
            "stall_sync_ns": self.stall_sync_ns,
            "stall_recv_ns": self.stall_recv_ns,
            "stall_memory_ns": self.stall_memory_ns,
            "stall_ns": self.stall_ns,
            "finish_ns": list(self.finish_ns),
        }


@dataclass
class SimReport:
    mode: str
    pipeline: int
    latency_ns: float
    deadlines_ns: list[float]
    throughput_per_s: float
    energy_pj: float
    energy_per_inference_uj: float
    power_mw: float
    energy: EnergyCounter
    outputs: list[dict[str, np.ndarray]]
    per_core: list[CoreStats]
    instructions_executed: int
    wall_time_s: float
    cores_used: int = 0
    inter_chip_bytes: int = 0  # NoC bytes that crossed chips (core<->core and core<->global memory)
    inter_chip_energy_pj: float = 0.0  # the inter-chip link share of the NoC energy
    host_bytes_per_inference: float = 0.0  # global memory ld + st bytes / inputs
    noc_bytes_per_inference: float = 0.0  # core-to-core send/recv bytes / inputs
    target: dict[str, Any] = field(default_factory=dict)  # raptor.isa.target.RunTarget.to_dict
    target_override: list[str] = field(default_factory=list)  # a forced run's loud warning
    trace: Any = None  # traced runs: the raptor.sim.trace.TraceRecorder (not in to_dict)
    # intermediates read back from host memory after the run (simulate(tensors=True)), last round
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    # dynamic energy over simulated time and the static power (not in to_dict)
    energy_timeline: EnergyTimeline | None = None

    def energy_until_pj(self, t_ns: float) -> float:
        """Energy (dynamic + static, pJ) spent from time 0 to t_ns, e.g. up to another
        simulator's stop time; a bin's share pro rata (resolution: EnergyTimeline)."""
        if self.energy_timeline is None:
            raise ValueError("this report has no energy timeline")
        return self.energy_timeline.energy_until_pj(t_ns)

    @property
    def instructions_per_s(self) -> float:
        return self.instructions_executed / self.wall_time_s if self.wall_time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "pipeline": self.pipeline,
            "latency_ns": self.latency_ns,
            "deadlines_ns": list(self.deadlines_ns),
            "throughput_per_s": self.throughput_per_s,
            "energy_pj": self.energy_pj,
            "energy_per_inference_uj": self.energy_per_inference_uj,
            "power_mw": self.power_mw,
            "energy_breakdown_pj": self.energy.to_dict(),
            "instructions_executed": self.instructions_executed,
            "cores_used": self.cores_used,
            "inter_chip_bytes": self.inter_chip_bytes,
            "inter_chip_energy_pj": self.inter_chip_energy_pj,
            "host_bytes_per_inference": self.host_bytes_per_inference,
            "noc_bytes_per_inference": self.noc_bytes_per_inference,
            "wall_time_s": self.wall_time_s,
            "instructions_per_s": self.instructions_per_s,
            "outputs": [{k: list(v.shape) for k, v in o.items()} for o in self.outputs],
            "per_core": [c.to_dict() for c in self.per_core if c.instructions],
            "target": dict(self.target),
            "target_override": list(self.target_override),
        }

    def format(self) -> str:
        lines = [
            *self.target_override,
            f"simulation ({self.mode}, pipeline {self.pipeline}, {self.cores_used} cores used"
            + (f", on {self.target['arch']})" if self.target else ")"),
            f"  latency              {self.latency_ns / 1e3:14.3f} us",
            f"  throughput           {self.throughput_per_s:14.2f} inferences/s",
            f"  energy               {self.energy_pj / 1e6:14.3f} uJ total, {self.energy_per_inference_uj:.3f} uJ/inference",
            f"  power                {self.power_mw:14.3f} mW",
            f"  instructions         {self.instructions_executed:14d} ({self.instructions_per_s:,.0f}/s, {self.wall_time_s:.2f} s wall)",
        ]
        lines.append(
            f"  traffic/inference    host ld+st {self.host_bytes_per_inference / 1e6:.3f} MB, "
            f"NoC send/recv {self.noc_bytes_per_inference / 1e6:.3f} MB"
        )
        if len(self.deadlines_ns) > 1:
            lines.append(
                "  deadlines (us)       " + " ".join(f"{d / 1e3:.3f}" for d in self.deadlines_ns)
            )
        e = self.energy
        lines.append(
            f"  energy breakdown uJ  matrix {e.matrix_pj / 1e6:.3f}  vector {e.vector_pj / 1e6:.3f}  "
            f"local {e.local_memory_pj / 1e6:.3f}  global {e.global_memory_pj / 1e6:.3f}  "
            f"noc {e.noc_pj / 1e6:.3f}  static {e.static_pj / 1e6:.3f}"
        )
        used = [c for c in self.per_core if c.instructions]
        if used:
            lines.append(
                f"  {'core':>5} {'insts':>9} {'matrix us':>10} {'vector us':>10} {'xfer us':>10} {'stall us':>10} {'finish us':>10}"
            )
            for c in used[:64]:
                fin = c.finish_ns[-1] if c.finish_ns else 0.0
                lines.append(
                    f"  {c.core:>5} {c.instructions:>9} {c.matrix_busy_ns / 1e3:>10.2f} {c.vector_busy_ns / 1e3:>10.2f} "
                    f"{c.transfer_busy_ns / 1e3:>10.2f} {c.stall_ns / 1e3:>10.2f} {fin / 1e3:>10.2f}"
                )
            if len(used) > 64:
                lines.append(f"  ... {len(used) - 64} more cores")
        return "\n".join(lines)
