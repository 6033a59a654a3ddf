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

Ill-conditioned outputs. The argument above assumes rounding errors add up; an op whose output
moves by much more than its inputs' rounding (a Softmax of logits in the hundreds: its absolute
error is about |logit| x the logits' relative error) amplifies them, and onnxruntime's own float32
result is then itself further than 1e-3 from the exact one (yolo11n with realistic activations:
README, "Validation and tolerances"). An output that misses RTOL against onnxruntime is therefore
measured against exact arithmetic too (a float64 evaluation of the same graph,
raptor.frontend.evaluate): it PASSes iff the simulator is within RTOL of float64, or no further
from float64 than onnxruntime's float32 result is, while that float32 error stays below FLOOR_CAP
(far below the O(1) error of a real defect). Nothing else changes: an output within RTOL of
onnxruntime passes as before, and a defect fails against both references.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RTOL = 1e-3
# the largest float32 error of onnxruntime itself (vs float64, relative to max|ref|) under which
# "no further from float64 than onnxruntime" is accepted: 10x RTOL, 100x below a defect's O(1)
FLOOR_CAP = 1e-2


@dataclass
class OutputError:
    round: int
    name: str
    max_abs: float
    max_ref: float
    rel: float
    passed: bool
    note: str = ""
    # set when the output was also measured against float64 (it missed RTOL vs onnxruntime)
    exact_rel: float | None = None  # max|sim - float64| / max|float64|
    floor_rel: float | None = None  # max|onnxruntime - float64| / max|float64|

    def to_dict(self) -> dict[str, Any]:
        d = {
            "round": self.round,
            "name": self.name,
            "max_abs": self.max_abs,
            "max_ref": self.max_ref,
            "rel": self.rel,
            "passed": self.passed,
            "note": self.note,
        }
        if self.exact_rel is not None:
            d["rel_vs_float64"] = self.exact_rel
            d["onnxruntime_rel_vs_float64"] = self.floor_rel
        return d


@dataclass
class TensorError:
    """One intermediate tensor: the simulator's value vs onnxruntime's (and float64's)."""

    name: str
    op: str
    inputs: list[str]
    max_abs: float
    rel: float  # relative to the tensor's own max|ref|
    exact_rel: float | None = None
    floor_rel: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "op": self.op,
            "inputs": self.inputs,
            "max_abs": self.max_abs,
            "rel": self.rel,
            "rel_vs_float64": self.exact_rel,
            "onnxruntime_rel_vs_float64": self.floor_rel,
        }


@dataclass
class Verdict:
    """The result of comparing every output of every input against the reference."""

    errors: list[OutputError] = field(default_factory=list)
    rtol: float = RTOL
    sim: dict[str, Any] | None = None  # the SimReport's to_dict(), when validate_dir ran it
    # per-tensor comparison of one input's intermediates (validate_dir(intermediates=True))
    tensors: list[TensorError] | None = None
    tensors_round: int = 0
    tensors_total: int = 0  # intermediates onnxruntime computed (the program stores a subset)

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
        if self.tensors is not None:
            first = self.first_bad_tensor
            d["intermediates"] = {
                "round": self.tensors_round,
                "compared": len(self.tensors),
                "total": self.tensors_total,
                "first_over_tolerance": first.name if first else None,
                "tensors": [t.to_dict() for t in self.tensors],
            }
        if self.sim is not None:
            d["simulation"] = self.sim
        return d

    @property
    def first_bad_tensor(self) -> TensorError | None:
        """The first intermediate, in graph order, whose error exceeds the tolerance."""
        return next((t for t in self.tensors or [] if not t.rel <= self.rtol), None)

    def format(self) -> str:
        n_exact = sum(e.exact_rel is not None for e in self.errors)
        exact = f"; {n_exact} judged against float64, see below" if n_exact else ""
        lines = [
            *(self.sim or {}).get("target_override", []),
            f"functional validation: {self.status} (max rel error {self.max_rel:.3g}, tolerance "
            f"{self.rtol:g}{exact})",
        ]
        for e in self.errors:
            mark = "ok " if e.passed else "BAD"
            note = f"  {e.note}" if e.note else ""
            exact = ""
            if e.exact_rel is not None:
                exact = (
                    f"; vs float64 {e.exact_rel:.3g} (onnxruntime's own float32 error "
                    f"{e.floor_rel:.3g})"
                )
            lines.append(
                f"  {mark} input {e.round} {e.name}: max-abs {e.max_abs:.3g}, rel {e.rel:.3g}"
                f"{exact}{note}"
            )
        if not self.errors:
            lines.append("  no outputs compared")
        if self.tensors is not None:
            lines.extend(self._format_tensors())
        return "\n".join(lines)

    def _format_tensors(self) -> list[str]:
        bad = [t for t in self.tensors if not t.rel <= self.rtol]
        lines = [
            f"intermediates of input {self.tensors_round}: {len(self.tensors)} of "
            f"{self.tensors_total} tensors stored by the program compared, {len(bad)} over "
            f"tolerance {self.rtol:g} (relative to each tensor's max|ref|)"
        ]
        if len(self.tensors) < self.tensors_total:
            lines.append(
                "  (tensors the program keeps in local memory or sends core to core are not "
                "compared; `raptor compile --pim-disable-noc-dataflow` stores every activation)"
            )
        first = self.first_bad_tensor
        if first is None:
            return lines + ["  no tensor over tolerance"]
        by_name = {t.name: t for t in self.tensors}
        ins = ", ".join(
            f"{i} rel {by_name[i].rel:.3g}" if i in by_name else f"{i} (not stored)"
            for i in first.inputs
        )
        lines.append(
            f"  first over tolerance: {first.name} ({first.op}): max-abs {first.max_abs:.3g}, "
            f"rel {first.rel:.3g}; inputs: {ins or 'none'}"
        )
        if first.exact_rel is not None:
            floors = ", ".join(
                f"{i} {by_name[i].floor_rel:.3g}"
                for i in first.inputs
                if i in by_name and by_name[i].floor_rel is not None
            )
            lines.append(
                f"  vs float64 at {first.name}: simulator {first.exact_rel:.3g}, onnxruntime "
                f"{first.floor_rel:.3g}"
                + (f" (onnxruntime at its inputs: {floors})" if floors else "")
            )
        return lines


def _rel(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(max|x - y|, that / max|y|) in float64; 0/0 is 0 and e/0 is inf."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if not y.size:
        return 0.0, 0.0
    max_abs = float(np.max(np.abs(x - y)))
    max_ref = float(np.max(np.abs(y)))
    rel = max_abs / max_ref if max_ref > 0 else (0.0 if max_abs == 0 else float("inf"))
    return max_abs, rel


def compare_outputs(
    sim_outputs: list[dict[str, np.ndarray]],
    ref_outputs: list[dict[str, np.ndarray]],
    rtol: float = RTOL,
    exact_outputs: list[dict[str, np.ndarray]] | None = None,
) -> Verdict:
    """Compare per input and per output; see the module docstring for the metric. With
    `exact_outputs` (float64 values of the same inputs), an output that misses `rtol` against
    the reference is judged against float64 as the module docstring says."""
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
            max_abs, rel = _rel(x, y)
            e = OutputError(r, name, max_abs, max_ref, rel, rel <= rtol)
            if not e.passed and exact_outputs is not None and name in exact_outputs[r]:
                z = exact_outputs[r][name]
                e.exact_rel = _rel(x, z)[1]
                e.floor_rel = _rel(y, z)[1]
                e.passed = e.exact_rel <= rtol or e.exact_rel <= e.floor_rel <= FLOOR_CAP
            v.errors.append(e)
    return v


def judge_outputs(
    sim_outputs: list[dict[str, np.ndarray]],
    ref,
    model_path: str | Path,
    rtol: float = RTOL,
) -> Verdict:
    """compare_outputs against the reference data `ref` (a ReferenceData); when an output
    misses `rtol` with a finite error, evaluate the model in float64 on the same inputs and judge
    again (module docstring)."""
    outs = list(ref.outputs)[: len(sim_outputs)]
    v = compare_outputs(sim_outputs, outs, rtol)
    # float64 can only rescue errors below about rtol + 2 x FLOOR_CAP (triangle inequality): a
    # verdict with a larger or a non-numeric failure stands without evaluating the model again
    bad = [e.rel for e in v.errors if not e.passed]
    if not bad or max(bad) > rtol + 2.5 * FLOOR_CAP:
        return v
    from raptor.validation.reference import exact_values

    exact = exact_values(model_path, list(ref.inputs)[: len(outs)])
    return compare_outputs(sim_outputs, outs, rtol, exact)


def compare_tensors(
    sim: dict[str, np.ndarray],
    ref: dict[str, np.ndarray],
    model_path: str | Path,
    exact: dict[str, np.ndarray] | None = None,
) -> list[TensorError]:
    """Every intermediate the simulator stored that onnxruntime also computed, in graph order."""
    import onnx

    producer = {}
    for n in onnx.load(str(model_path), load_external_data=False).graph.node:
        for o in n.output:
            producer[o] = n
    out = []
    for name, y in ref.items():
        x = sim.get(name)
        if x is None or np.shape(x) != np.shape(y) or name not in producer:
            continue
        n = producer[name]
        max_abs, rel = _rel(x, y)
        t = TensorError(name, n.op_type, [i for i in n.input if i in ref], max_abs, rel)
        if exact is not None and name in exact and np.shape(exact[name]) == np.shape(y):
            t.exact_rel = _rel(x, exact[name])[1]
            t.floor_rel = _rel(y, exact[name])[1]
        out.append(t)
    return out


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
    intermediates: bool = False,
) -> Verdict:
    """Simulate a pim/ directory on the reference inputs of `model_path` and compare. arch, mode
    and pipeline default to the directory's target record and must not contradict it
    (raptor.isa.target.resolve_target; force_target overrides, and the verdict says so).
    intermediates: also compare every intermediate the program stores in host memory (the last
    input's) with onnxruntime's and float64's, in graph order (`Verdict.tensors`)."""
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
    kw = {"intermediates": True} if intermediates else {}
    ref = ensure_reference(model_path, common, rounds, seed, **kw)
    report = simulate(
        prog,
        arch,
        mode=mode,
        pipeline=rounds,
        inputs=list(ref.inputs)[:rounds],
        force_target=force_target,
        tensors=intermediates,
    )
    verdict = judge_outputs(report.outputs, ref, model_path)
    verdict.sim = report.to_dict()
    if intermediates:
        from raptor.validation.reference import exact_values

        last = rounds - 1
        exact = exact_values(model_path, [ref.inputs[last]], keep_all=True)[0]
        verdict.tensors = compare_tensors(
            report.tensors, ref.intermediates[last], model_path, exact
        )
        verdict.tensors_round = last
        verdict.tensors_total = len(ref.intermediates[last])
    return verdict
