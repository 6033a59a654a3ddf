"""What both compilers (Raptor: raptor.compiler, the PIMCOMP baseline: raptor.pimcomp) return:
the program with its compile report, the report fields they share and the per-pass timer."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from raptor.arch import Arch
from raptor.isa.pimdir import PimProgram
from raptor.isa.table import opcode_counts
from raptor.options import CompileOptions


@dataclass
class CompileResult:
    program: PimProgram
    report: dict[str, Any]


@dataclass
class PassTimer:
    """Wall time per pass name in seconds (a pass that runs again adds to its time), in the order
    the passes first ran."""

    times: dict[str, float] = field(default_factory=dict)

    def __call__(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*args)
        self.times[name] = round(self.times.get(name, 0.0) + time.perf_counter() - t0, 4)
        return out


def program_counts(arch: Arch, prog: PimProgram) -> dict[str, Any]:
    """Report fields of the program's resources: cores and crossbars used, array groups, weight
    matrices."""
    return {
        "cores_used": sum(1 for s in prog.cores if len(s)),
        "crossbars_used": int(sum(sum(a) for a in prog.array_group_map)),
        "crossbars_available": arch.total_crossbars,
        "array_groups": int(sum(len(a) for a in prog.array_group_map)),
        "weight_matrices": len(prog.weight_matrices),
    }


def instruction_counts(prog: PimProgram) -> dict[str, Any]:
    """Report fields of the program's instructions: total, per core and per opcode."""
    per_core = [int(len(s)) for s in prog.cores]
    by_op: dict[str, int] = {}
    for s in prog.cores:
        for k, v in opcode_counts(s).items():
            by_op[k] = by_op.get(k, 0) + v
    return {
        "instructions_total": int(sum(per_core)),
        "instructions_per_core": per_core,
        "instructions_by_opcode": dict(sorted(by_op.items())),
    }


def timing_fields(opts: CompileOptions, times: dict[str, float]) -> dict[str, Any]:
    """The report's closing fields: time per pass, total compile time and the options."""
    return {
        "pass_time_s": times,
        "compile_time_s": round(sum(times.values()), 4),
        "options": asdict(opts),
    }
