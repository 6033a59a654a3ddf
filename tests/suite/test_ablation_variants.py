"""Each ablation variant on a second model (resnet18 at 32x32 on arch-b; test_suite_e2e.py runs
vgg8 on arch-a), through the ablation tool as a user runs it: run_ablation.py, which runs the
suite runner once per variant and mode. One run serves the module; each test reads its variant's
rows and artifacts and checks the outcome README.md states for it."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raptor.suite.ablation import VARIANTS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "validation/tools/pim/ablation/run_ablation.py"
MODEL, ARCH, SIZE = "resnet18", "arch-b", 32
MODES = {("latency", "1"): "latency", ("throughput", "4"): "throughput/pipeline4"}
METRICS = ("latency", "throughput", "power", "energy")


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    out = tmp_path_factory.mktemp("ablation-resnet18")
    argv = [sys.executable, str(SCRIPT), "--out-dir", str(out), "--models", MODEL]
    argv += ["--archs", ARCH, "--input-size", str(SIZE), "--jobs", "2"]
    run = subprocess.run(
        argv, capture_output=True, text=True, timeout=900, cwd=ROOT, env=dict(os.environ)
    )
    csv_path = out / "results_ablation.csv"
    assert csv_path.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    return out, run, rows


def _variant(ablation, variant: str) -> tuple[list[dict[str, str]], list[Path]]:
    """The variant's CSV rows (one per mode) and its Raptor case directories."""
    out, _, rows = ablation
    mine = [r for r in rows if r["variant"] == variant]
    assert {(r["model"], r["arch"]) for r in mine} == {(MODEL, ARCH)}
    assert {(r["mode"], r["pipeline"]) for r in mine} == set(MODES)
    cases = [
        out / MODEL / "artifacts" / ARCH / d / "ablation" / variant / "raptor"
        for d in MODES.values()
    ]
    for case in cases:
        # the variant's options reached the compiler
        opts = json.loads((case / "compile_report.json").read_text())["options"]
        flags = VARIANTS[variant]
        assert opts["disable_synchronization"] is ("--pim-disable-synchronization" in flags)
        assert opts["disable_spatial_planning"] is ("--pim-disable-spatial-planning" in flags)
    return mine, cases


def _validation(case: Path) -> dict:
    return json.loads((case / "validation.json").read_text())


def _opcodes(case: Path) -> dict[str, int]:
    return json.loads((case / "compile_report.json").read_text())["instructions_by_opcode"]


def test_baseline_passes_and_is_the_reference(ablation):
    rows, cases = _variant(ablation, "baseline")
    for row, case in zip(rows, cases):
        assert row["functional_validation"] == "PASS"
        assert all(row[m] == "+0.00%" for m in METRICS)
        assert _validation(case)["max_rel_error"] <= 1e-3
        # every activation edge between cores travels over the NoC (residuals, 1x1 stride-2
        # shortcuts and the classifier included), and what a consumer reads from its own core's
        # producer is copied locally (the latency plan, kept with a fill share, has 2 such
        # residual readers): no activation stays in host memory and no token is left
        noc = json.loads((case / "compile_report.json").read_text())["noc_dataflow"]
        assert noc["demoted_units"] == {}
        assert noc["host_activation_buffers"] == []
        assert "sync" not in _opcodes(case)


def test_no_plan_passes_and_costs_latency_and_throughput(ablation):
    rows, cases = _variant(ablation, "no-plan")
    for row, case in zip(rows, cases):
        # README: baseline and no-plan must pass numerical validation
        assert row["functional_validation"] == "PASS"
        assert _validation(case)["max_rel_error"] <= 1e-3
        # README: switching planning off costs latency and throughput (several-fold)
        assert float(row["latency"].rstrip("%")) > 100
        assert float(row["throughput"].rstrip("%")) < -50


@pytest.mark.parametrize("variant", ["no-sync", "no-sync-no-plan"])
def test_no_sync_variants_pass_when_no_token_guards_a_cross_core_buffer(ablation, variant):
    """README: the tokens guard host buffers only. resnet18 at 32x32 planned keeps no activation
    in host memory (and no token), and unplanned its host-memory edges join layers on one core
    (program order), so removing synchronization removes nothing the program needs: every
    case PASSes, with the baseline's (or no-plan's) figures, and the wrapper exits 0. (A
    host-memory dataflow without tokens does read stale buffers: tests/test_compiler.py.)"""
    _, run, _ = ablation
    rows, cases = _variant(ablation, variant)
    twin = {"no-sync": "baseline", "no-sync-no-plan": "no-plan"}[variant]
    ref = {(r["mode"], r["pipeline"]): r for r in _variant(ablation, twin)[0]}
    for row, case in zip(rows, cases):
        assert row["functional_validation"] == "PASS"
        assert _validation(case)["max_rel_error"] <= 1e-3
        ops = _opcodes(case)
        assert "sync" not in ops and "wait" not in ops
        same = ref[row["mode"], row["pipeline"]]
        assert all(row[m] == same[m] for m in METRICS)
    assert run.returncode == 0, run.stdout[-2000:]


def test_every_variant_has_a_test():
    tested = {"baseline", "no-plan", "no-sync", "no-sync-no-plan"}
    assert set(VARIANTS) == tested
