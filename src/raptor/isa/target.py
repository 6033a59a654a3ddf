"""The checks that keep a program off a chip, mode or pipeline it was not compiled for, from its
target record (raptor.isa.target_record).

Both compilers attach a `TargetRecord` to the program they emit and `write_pimdir` writes it as
`target.json` (pimsim-nn reads only `config.json` and `core_<i>.*`, so it never sees this file):

* `arch`: the architecture's name; `arch_params`: its full parameters (the architecture file's
  JSON object, so a custom file need not be at hand later); `arch_sha256`: sha256 of those
  parameters without `name` and `description` (two files with the same chip hash the same);
* `mode`, `pipeline`: what the program was compiled for;
* `compiler` (`raptor` | `pimcomp`), `compiler_version`, `options` (every `CompileOptions` field);
* `local_memory_peak_bytes` and `local_memory_peak_core`: the largest local-memory footprint of
  any core, which the loader cannot recover from the instructions.

`resolve_target` turns a program plus the caller's (optional) arch, mode and pipeline into what
runs: missing values come from the record; a value that contradicts the record raises
`TargetMismatchError` naming both, unless `force` is set, in which case the contradiction is
returned in `RunTarget.overrides` for the report to print. `check_fits` rejects a program that
needs more cores, crossbars per core or local memory than the chip has, or (recorded programs)
an array group with fewer crossbars than its weight matrix needs on the chip, with the numbers;
no override exists for that. A directory without a record (written by another
tool) runs with explicit values: `arch` is then required, mode defaults to latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raptor.arch.loader import Arch
from raptor.errors import TargetMismatchError
from raptor.isa.target_record import OVERRIDE_HINT, TARGET_FILE, TargetRecord, arch_sha256

if TYPE_CHECKING:
    from raptor.isa.pimdir import PimProgram


@dataclass
class RunTarget:
    """What a program runs as: the chip, mode and pipeline, the record they were checked
    against (None: no record) and the contradictions a forced run overrode."""

    arch: Arch
    mode: str
    pipeline: int
    record: TargetRecord | None = None
    overrides: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "arch": self.arch.name,
            "arch_sha256": arch_sha256(self.arch),
            "mode": self.mode,
            "pipeline": self.pipeline,
            "compiled_for": None
            if self.record is None
            else {
                "arch": self.record.arch,
                "arch_sha256": self.record.arch_sha256,
                "mode": self.record.mode,
                "pipeline": self.record.pipeline,
                "compiler": self.record.compiler,
            },
        }

    def override_lines(self) -> list[str]:
        """The loud warning a report prints when a forced run contradicted the record."""
        if not self.overrides:
            return []
        return [
            "WARNING: TARGET OVERRIDE (--force-target): "
            + "; ".join(self.overrides)
            + ". These figures are not those of the program's own target."
        ]


def resolve_target(
    prog: PimProgram,
    arch: Arch | None = None,
    mode: str | None = None,
    pipeline: int | None = None,
    force: bool = False,
) -> RunTarget:
    """Fill arch/mode/pipeline from the program's record and refuse contradictions (see the
    module docstring); then check that the program fits the chip."""
    if mode is not None and mode not in ("latency", "throughput"):
        raise TargetMismatchError(f"unknown mode {mode!r} (latency or throughput)")
    if pipeline is not None and int(pipeline) < 1:
        raise TargetMismatchError(f"pipeline must be >= 1, got {pipeline}")
    if mode == "latency" and pipeline is not None and int(pipeline) != 1:
        raise TargetMismatchError(
            f"latency mode runs one input: pipeline {pipeline} needs throughput mode"
        )
    rec = prog.target
    if rec is None:
        if arch is None:
            raise TargetMismatchError(
                f"the program has no target record ({TARGET_FILE}): pass --arch "
                "(and --mode/--pipeline) for a directory written by another tool"
            )
        mode = mode or "latency"
        if mode == "latency" and pipeline not in (None, 1):
            raise TargetMismatchError(
                f"latency mode runs one input: pipeline {pipeline} needs throughput mode"
            )
        if mode == "latency":
            pipeline = 1
        elif pipeline is None:
            pipeline = int(prog.meta.get("pipeline", 4))
        rt = RunTarget(arch, mode, int(pipeline))
        check_fits(prog, rt)
        return rt

    wrong: list[str] = []
    run_arch = rec.load_arch() if arch is None else arch
    if arch is not None and arch_sha256(arch) != rec.arch_sha256:
        wrong.append(
            f"compiled for {rec.arch} (parameters sha256 {rec.arch_sha256[:12]}), "
            f"asked for {arch.name} (sha256 {arch_sha256(arch)[:12]})"
        )
    run_mode = mode or rec.mode
    if run_mode != rec.mode:
        wrong.append(f"compiled for {rec.mode} mode, asked for {run_mode}")
    if pipeline is not None:
        run_pipeline = int(pipeline)
    elif run_mode == rec.mode:
        run_pipeline = rec.pipeline
    else:  # a forced mode change: latency runs one input, throughput the usual 4
        run_pipeline = 1 if run_mode == "latency" else max(rec.pipeline, 4)
    if run_pipeline != rec.pipeline and (pipeline is not None or run_mode == rec.mode):
        wrong.append(f"compiled for pipeline {rec.pipeline}, asked for {run_pipeline}")
    if run_mode == "latency":
        run_pipeline = 1
    if wrong and not force:
        raise TargetMismatchError("target mismatch: " + "; ".join(wrong) + f"; {OVERRIDE_HINT}")
    rt = RunTarget(run_arch, run_mode, run_pipeline, rec, wrong)
    check_fits(prog, rt)
    return rt


def _matrix_shapes(prog: PimProgram) -> list[tuple[int, int]]:
    if prog.weight_matrices:
        return [(int(m.shape[0]), int(m.shape[1])) for m in prog.weight_matrices]
    table = prog.meta.get("weights", {}).get("matrices", [])
    return [(int(r), int(c)) for _, r, c in table]


def fit_figures(prog: PimProgram, arch: Arch, record: TargetRecord | None) -> dict[str, Any]:
    """What the program needs next to what the chip has (for checks and `raptor inspect`)."""
    xbars = [int(sum(a)) for a in prog.array_group_map]
    worst = max(range(len(xbars)), key=xbars.__getitem__, default=None)
    f: dict[str, Any] = {
        "arch": arch.name,
        "cores": prog.core_cnt,
        "cores_with_instructions": sum(1 for s in prog.cores if len(s)),
        "chip_cores": arch.core_count,
        "crossbars_per_core_max": xbars[worst] if worst is not None else 0,
        "crossbars_per_core_max_core": worst,
        "chip_crossbars_per_core": arch.crossbars_per_core,
        "local_memory_peak_bytes": None if record is None else record.local_memory_peak_bytes,
        "local_memory_peak_core": None if record is None else record.local_memory_peak_core,
        "chip_local_memory_bytes": arch.core.local_memory.memory_size,
        "array_group_short": None,
    }
    # Compiled programs size every array group for its matrix on their chip; hand-written ones
    # (no record, e.g. pimsim-nn micro-programs) may pair any matrix with any group, so the
    # per-group check needs the record.
    shapes = _matrix_shapes(prog) if record is not None else []
    if shapes and prog.array_group_weights:
        needs: dict[tuple[int, int], int] = {}  # crossbars per matrix shape
        for core, (ags, mats) in enumerate(zip(prog.array_group_map, prog.array_group_weights)):
            for g, (have, m) in enumerate(zip(ags, mats)):
                if not 0 <= m < len(shapes):
                    continue
                rows, cols = shapes[m]
                need = needs.get(shapes[m])
                if need is None:
                    need = needs[shapes[m]] = arch.crossbars_for(rows, cols)
                if need > have:
                    f["array_group_short"] = {
                        "core": core,
                        "group": g,
                        "rows": rows,
                        "cols": cols,
                        "needs": need,
                        "has": int(have),
                    }
                    return f
    return f


def check_fits(prog: PimProgram, rt: RunTarget) -> None:
    """Refuse a program that needs more of anything than the chip has; one line, all numbers."""
    f = fit_figures(prog, rt.arch, rt.record)
    a = rt.arch
    short: list[str] = []
    if f["cores"] > f["chip_cores"]:
        short.append(
            f"it has {f['cores']} cores ({f['cores_with_instructions']} with instructions), "
            f"the chip has {f['chip_cores']}"
        )
    if f["crossbars_per_core_max"] > f["chip_crossbars_per_core"]:
        short.append(
            f"core {f['crossbars_per_core_max_core']} uses {f['crossbars_per_core_max']} "
            f"crossbars, the chip has {f['chip_crossbars_per_core']} per core"
        )
    ag = f["array_group_short"]
    if ag is not None:
        short.append(
            f"array group {ag['group']} of core {ag['core']} holds a {ag['rows']}x{ag['cols']} "
            f"weight matrix, which needs {ag['needs']} crossbars of "
            f"{a.matrix.rows}x{a.matrix.cols} at {a.weight_bits}-bit weights, the group has "
            f"{ag['has']}"
        )
    peak = f["local_memory_peak_bytes"]
    if peak is not None and peak > f["chip_local_memory_bytes"]:
        short.append(
            f"core {f['local_memory_peak_core']} needs {peak} bytes of local memory, the chip "
            f"has {f['chip_local_memory_bytes']}"
        )
    if short:
        raise TargetMismatchError(
            f"the program does not fit {a.name}: " + "; ".join(short) + " (not run)"
        )
