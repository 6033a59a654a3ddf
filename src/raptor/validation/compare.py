"""Functional validation: compare simulator outputs with onnxruntime's.

Metric. For every input (round) and every network output we report the max-abs error
max|sim - ref| and the relative error max|sim - ref| / max|ref|. A case PASSes iff every
relative error is <= RTOL = 1e-3 (and shapes match, and nothing is NaN or missing).

Why 1e-3. Both sides compute in float32 (the simulator's crossbars are ideal float32
matrix-vector products), but they sum in different orders: onnxruntime's MLAS GEMM/conv kernels
block and vectorise their reductions, while the simulator sums a layer as per-crossbar partial
products (x @ W on 128-row tiles) added by vector instructions in the order the compiler chose.
Each float32 addition has relative rounding error u = 2^-24 ~ 6e-8, so a dot product of K
terms differs between two orders by at most ~K*u*sum|x_i w_i| and typically by ~sqrt(K)*u*that
sum. With K up to ~4.6k (3x3x512 convs) and ~40-70 layers in series whose errors add (ReLU and
pooling do not amplify them; normalised activations keep sum|x_i w_i| within a small factor of
max|y|), the expected relative deviation is ~1e-6..1e-5 and the worst case about 1e-4. 1e-3
leaves a 10x margin over that worst case, yet is far below the effect of any real bug (a wrong,
stale, or overwritten buffer changes outputs by O(1) relative to max|ref|, and the model suite's
input sensitivity is kept far above 1e-3). Normalising by max|ref| rather than elementwise
avoids dividing by near-zero outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RTOL = 1e-3


@dataclass
class OutputError:
    round: int
    name: str
    max_abs: float
    max_ref: float
    rel: float
    passed: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "name": self.name,
            "max_abs": self.max_abs,
            "max_ref": self.max_ref,
            "rel": self.rel,
            "passed": self.passed,
            "note": self.note,
        }


@dataclass
class Verdict:
    """The result of comparing every output of every input against the reference."""

    errors: list[OutputError] = field(default_factory=list)
    rtol: float = RTOL
    sim: dict[str, Any] | None = None  # the SimReport's to_dict(), when validate_dir ran it

    @property
    def passed(self) -> bool:
        return bool(self.errors) and all(e.passed for e in self.errors)

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "FAIL"

    @property
    def max_rel(self) -> float:
        return max((e.rel for e in self.errors), default=float("inf"))

    @property
    def max_abs(self) -> float:
        return max((e.max_abs for e in self.errors), default=float("inf"))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "status": self.status,
            "passed": self.passed,
            "rtol": self.rtol,
            "max_abs_error": self.max_abs,
            "max_rel_error": self.max_rel,
            "outputs": [e.to_dict() for e in self.errors],
        }
        if self.sim is not None:
            d["simulation"] = self.sim
        return d

    def format(self) -> str:
        lines = [
            *(self.sim or {}).get("target_override", []),
            f"functional validation: {self.status} (max rel error {self.max_rel:.3g}, tolerance {self.rtol:g})",
        ]
        for e in self.errors:
            mark = "ok " if e.passed else "BAD"
            note = f"  {e.note}" if e.note else ""
            lines.append(
                f"  {mark} input {e.round} {e.name}: max-abs {e.max_abs:.3g}, rel {e.rel:.3g}{note}"
            )
        if not self.errors:
            lines.append("  no outputs compared")
        return "\n".join(lines)


def compare_outputs(
    sim_outputs: list[dict[str, np.ndarray]],
    ref_outputs: list[dict[str, np.ndarray]],
    rtol: float = RTOL,
) -> Verdict:
    """Compare per input and per output; see the module docstring for the metric."""
    v = Verdict(rtol=rtol)
    if len(sim_outputs) != len(ref_outputs):
        v.errors.append(
            OutputError(
                -1,
                "*",
                float("inf"),
                0.0,
                float("inf"),
                False,
                f"{len(sim_outputs)} simulated inputs vs {len(ref_outputs)} reference inputs",
            )
        )
    for r, (sim, ref) in enumerate(zip(sim_outputs, ref_outputs)):
        for name, y in ref.items():
            y = np.asarray(y, dtype=np.float64)
            max_ref = float(np.max(np.abs(y))) if y.size else 0.0
            if name not in sim:
                v.errors.append(
                    OutputError(
                        r, name, float("inf"), max_ref, float("inf"), False, "missing in simulation"
                    )
                )
                continue
            x = np.asarray(sim[name], dtype=np.float64)
            if x.shape != y.shape:
                note = f"shape {list(x.shape)} vs {list(y.shape)}"
                v.errors.append(
                    OutputError(r, name, float("inf"), max_ref, float("inf"), False, note)
                )
                continue
            if not np.all(np.isfinite(x)):
                v.errors.append(
                    OutputError(
                        r, name, float("inf"), max_ref, float("inf"), False, "non-finite values"
                    )
                )
                continue
            max_abs = float(np.max(np.abs(x - y))) if y.size else 0.0
            rel = max_abs / max_ref if max_ref > 0 else (0.0 if max_abs == 0 else float("inf"))
            v.errors.append(OutputError(r, name, max_abs, max_ref, rel, rel <= rtol))
    return v


def default_common_dir(pim_parent: Path) -> Path:
    """<model>/artifacts/common when the directory lies under an `artifacts` folder, else a
    `reference` folder beside the pim/ directory."""
    for p in [pim_parent, *pim_parent.parents]:
        if p.name == "artifacts":
            return p / "common"
    return pim_parent / "reference"


def validate_dir(
    dir: str | Path,
    model_path: str | Path,
    arch=None,
    mode: str | None = None,
    pipeline: int | None = None,
    seed: int = 0,
    common_dir: str | Path | None = None,
    force_target: bool = False,
) -> Verdict:
    """Simulate a pim/ directory on the reference inputs of `model_path` and compare. arch, mode
    and pipeline default to the directory's target record and must not contradict it
    (raptor.isa.target.resolve_target; force_target overrides, and the verdict says so)."""
    from raptor.frontend.gate import check_model
    from raptor.isa.pimdir import read_pimdir
    from raptor.isa.target import resolve_target
    from raptor.sim import find_pimdir, simulate
    from raptor.validation.reference import ensure_reference

    check_model(model_path)  # before anything is read or a reference directory is made
    pimdir = find_pimdir(dir)
    prog = read_pimdir(pimdir)
    target = resolve_target(prog, arch, mode, pipeline, force=force_target)
    arch, mode = target.arch, target.mode
    rounds = target.pipeline if mode == "throughput" else 1
    common = (
        Path(common_dir) if common_dir is not None else default_common_dir(pimdir.parent.resolve())
    )
    ref = ensure_reference(model_path, common, rounds, seed)
    report = simulate(
        prog,
        arch,
        mode=mode,
        pipeline=rounds,
        inputs=list(ref.inputs)[:rounds],
        force_target=force_target,
    )
    verdict = compare_outputs(report.outputs, list(ref.outputs)[:rounds])
    verdict.sim = report.to_dict()
    return verdict
