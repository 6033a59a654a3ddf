"""The suite runner hands cases out longest first and prepares each model just before its first
case, so that workers run prepared models' cases while the next model is built."""

from __future__ import annotations

import io

from rich.console import Console

from raptor.errors import ModelError
from raptor.suite import runner
from raptor.suite.cases import CaseSpec


def _spec(tmp_path, model: str, arch: str = "arch-a", mode: str = "latency", sub: str = ""):
    pipeline = 1 if mode == "latency" else 4
    return CaseSpec(model, arch, mode, pipeline, str(tmp_path), artifact_subdir=sub, input_size=16)


def _log(spec: CaseSpec, wall: float) -> None:
    spec.case_dir.mkdir(parents=True, exist_ok=True)
    (spec.case_dir / "case.log").write_text(f"case {spec.key}\nwall time {wall:.2f} s\n")


def test_never_run_cases_rank_by_their_models_other_cases(tmp_path):
    """The throughput cases never ran; their models' latency cases did (resnet34 longest)."""
    for model, wall in (("vgg8", 2.0), ("resnet18", 5.0), ("resnet34", 9.0)):
        _log(_spec(tmp_path, model, sub="ablation/baseline"), wall)
    specs = [_spec(tmp_path, m, mode="throughput") for m in ("vgg8", "resnet18", "resnet34")]
    assert runner.previous_wall(specs[2]) == 9.0
    assert [s.model for s in runner.longest_first(specs)] == ["resnet34", "resnet18", "vgg8"]
    # a case's own record wins over its model's other cases
    _log(specs[0], 20.0)
    assert [s.model for s in runner.longest_first(specs)][0] == "vgg8"
    # nothing recorded for a model: the given order, after the recorded ones
    fresh = [_spec(tmp_path, "googlenet", mode="throughput"), *specs]
    assert runner.longest_first(fresh)[-1].model == "googlenet"


def test_models_are_prepared_lazily_and_a_failure_ends_the_cases(tmp_path, monkeypatch):
    calls: list[tuple[str, int]] = []

    def fake(s, n_inputs, console):
        calls.append((s.model, n_inputs))
        if s.model == "resnet18":
            raise ModelError(f"{s.model_path}: not an ONNX model (no graph)")

    monkeypatch.setattr(runner, "prepare_model", fake)
    specs = [
        _spec(tmp_path, "vgg8"),
        _spec(tmp_path, "vgg8", mode="throughput"),
        _spec(tmp_path, "resnet18"),
        _spec(tmp_path, "googlenet"),
    ]
    failure: list[Exception] = []
    gen = runner.prepared_cases(specs, None, failure)
    assert next(gen) is specs[0] and calls == [("vgg8", 4)]  # the most inputs of its cases
    assert next(gen) is specs[1] and calls == [("vgg8", 4)]  # prepared once
    assert list(gen) == [] and [m for m, _ in calls] == ["vgg8", "resnet18"]
    assert [str(e) for e in failure] == [f"{specs[2].model_path}: not an ONNX model (no graph)"]


def test_a_model_that_fails_to_prepare_exits_2_with_one_line(tmp_path, capsys):
    """A damaged model file whose key matches is found when its turn comes; the run ends with
    the gate's one-line error and exit 2, and writes no results CSV."""
    bad = _spec(tmp_path, "resnet18")
    bad.model_dir.mkdir(parents=True)
    bad.model_path.write_bytes(b"\x08\x07")
    runner._write_model_key(bad)
    argv = ["--models", "vgg8", "resnet18", "--archs", "arch-a", "--mode", "latency"]
    argv += ["--input-size", "16", "--out-dir", str(tmp_path), "--raptor-only", "--jobs", "1"]
    assert runner.main(argv) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert f"run_pimcomp_models.py: error: {bad.model_path}: not an ONNX model (no graph)" in out
    assert not (tmp_path / "results_comparison.csv").exists()


def test_prepare_models_logs_each_model(tmp_path):
    buf = io.StringIO()
    runner.prepare_models([_spec(tmp_path, "vgg8")], Console(file=buf, width=200))
    assert "vgg8: model and reference data ready" in buf.getvalue()
    assert _spec(tmp_path, "vgg8").model_path.is_file()
