"""The two scripts end to end on a small case (vgg8 at 16x16 on arch-a), through real processes."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "validation/tools/pim/pimcomp/compare/run_pimcomp_models.py"
ABLATION = ROOT / "validation/tools/pim/ablation/run_ablation.py"
SMALL = ["--models", "vgg8", "--archs", "arch-a", "--input-size", "16"]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _run(script: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


@pytest.fixture(scope="module")
def ablation_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    r = _run(ABLATION, "--out-dir", str(out), *SMALL, "--jobs", "2")
    return out, r


def test_ablation_writes_every_csv_and_chart(ablation_run):
    out, r = ablation_run
    assert (out / "results_ablation.csv").is_file(), r.stdout[-3000:] + r.stderr[-3000:]
    rows = _rows(out / "results_ablation.csv")
    assert list(rows[0]) == [
        "variant",
        "model",
        "arch",
        "mode",
        "pipeline",
        "functional_validation",
        "latency",
        "throughput",
        "power",
        "energy",
    ]
    assert len(rows) == 4 * 2
    cases = {(r["mode"], r["pipeline"]) for r in rows}
    assert cases == {("latency", "1"), ("throughput", "4")}
    for row in rows:
        if row["variant"] == "baseline":
            assert row["functional_validation"] == "PASS"
            assert all(row[m] == "+0.00%" for m in ("latency", "throughput", "power", "energy"))
        else:
            assert all(
                row[m].endswith("%") and row[m][0] in "+-"
                for m in ("latency", "throughput", "power", "energy")
            )
        if row["variant"] == "no-plan":
            assert row["functional_validation"] == "PASS"
    assert (out / "results_ablation.png").stat().st_size > 10_000
    for v in ("baseline", "no-sync", "no-plan", "no-sync-no-plan"):
        summary = _rows(out / "ablation" / v / "results_comparison.csv")
        assert len(summary) == 2 and all(
            s["pimcomp_functional_validation"] == "SKIPPED" for s in summary
        )
        assert not (out / "ablation" / v / "parts").exists()
        for mode in ("latency", "throughput/pipeline4"):
            case = out / "vgg8" / "artifacts" / "arch-a" / mode / "ablation" / v
            assert (case / "raptor" / "pim" / "config.json").is_file()
            assert (case / "case.log").is_file()
    assert (out / "vgg8" / "artifacts" / "common").is_dir()
    # exit status follows the rows: non-zero exactly when some variant failed validation
    any_fail = any(row["functional_validation"] != "PASS" for row in rows)
    assert (r.returncode != 0) == any_fail, r.stdout[-2000:]


def test_no_sync_really_removes_tokens(ablation_run):
    out, _ = ablation_run
    from raptor.isa.inspect import inspect_pimdir

    base = inspect_pimdir(
        out / "vgg8/artifacts/arch-a/throughput/pipeline4/ablation/baseline/raptor/pim"
    )
    nosync = inspect_pimdir(
        out / "vgg8/artifacts/arch-a/throughput/pipeline4/ablation/no-sync/raptor/pim"
    )
    assert "wait" not in nosync["by_opcode"] and "sync" not in nosync["by_opcode"]
    # every cross-core edge of vgg8 travels over the NoC, so the baseline has no token to remove
    # either: the two programs are the same instruction for instruction
    assert "wait" not in base["by_opcode"] and "sync" not in base["by_opcode"]
    assert base["by_opcode"] == nosync["by_opcode"]


def test_runner_comparison_csv_and_reuse(tmp_path):
    out = tmp_path / "suite"
    r = _run(RUNNER, "--out-dir", str(out), *SMALL, "--mode", "latency", "--only", "raptor")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = _rows(out / "results_comparison.csv")
    assert len(rows) == 1 and rows[0]["raptor_functional_validation"] == "PASS"
    assert rows[0]["pimcomp_functional_validation"] == "SKIPPED"
    assert float(rows[0]["raptor_latency_ms"]) > 0 and float(rows[0]["raptor_energy_uj"]) > 0
    assert (out / "results_comparison.png").is_file()
    ref = out / "vgg8" / "artifacts" / "common"
    stamp = {p.name: p.stat().st_mtime_ns for p in ref.iterdir()}
    case = out / "vgg8/artifacts/arch-a/latency/raptor"
    assert not (case / "trace.json").exists()  # tracing only when asked
    r2 = _run(
        RUNNER, "--out-dir", str(out), *SMALL, "--mode", "latency", "--only", "raptor", "--trace"
    )
    assert r2.returncode == 0
    assert {p.name: p.stat().st_mtime_ns for p in ref.iterdir()} == stamp  # reference data reused
    assert "cached artifacts reused" in (out / "vgg8/artifacts/arch-a/latency/case.log").read_text()
    # --trace: the timeline, its heat map and the per-layer table beside sim_report.json
    doc = json.loads((case / "trace.json").read_text())
    assert any(e["ph"] == "X" for e in doc["traceEvents"])
    assert (case / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    layers = json.loads((case / "layers.json").read_text())["layers"]
    assert [r["layer"] for r in layers][:2] == ["features.conv0", "features.conv1"]
    # inspect --layers prints that table, and recomputes the same figures without it
    shown = subprocess.run(
        [sys.executable, "-m", "raptor.cli", "inspect", str(case), "--layers", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(shown.stdout) == layers
    (case / "layers.json").unlink()
    again = subprocess.run(
        [sys.executable, "-m", "raptor.cli", "inspect", str(case), "--layers", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(again.stdout) == layers and (case / "layers.json").is_file()


def test_bad_extra_arg_is_an_error_row(tmp_path):
    out = tmp_path / "suite"
    r = _run(
        RUNNER,
        "--out-dir",
        str(out),
        *SMALL,
        "--mode",
        "latency",
        "--raptor-only",
        "--raptor-extra-arg=--pim-no-such-flag",
    )
    assert r.returncode == 1
    row = _rows(out / "results_comparison.csv")[0]
    assert row["raptor_functional_validation"] == "ERROR" and "pim-no-such-flag" in row["error"]


def _descendants(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,sid="], capture_output=True, text=True).stdout
    rows = [tuple(map(int, ln.split())) for ln in out.strip().splitlines()]
    kids, frontier = set(), {pid}
    while frontier:
        nxt = {p for p, pp, _ in rows if pp in frontier} - kids
        kids |= nxt
        frontier = nxt
    return kids


def test_ctrl_c_ends_every_worker_and_writes_no_csv(tmp_path):
    out = tmp_path / "suite"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ABLATION),
            "--out-dir",
            str(out),
            "--models",
            "vgg8",
            "resnet18",
            "resnet34",  # enough work that the run cannot end before the signal arrives
            "googlenet",
            "--archs",
            "arch-a",
            "--input-size",
            "32",
            "--jobs",
            "2",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: set[int] = set()
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until the runner's pool workers exist
        seen |= _descendants(proc.pid)
        if len(seen) >= 3:
            break
        time.sleep(0.2)
    assert len(seen) >= 3, "suite runner workers never started"
    time.sleep(1.0)
    seen |= _descendants(proc.pid)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output[-2000:]
    assert "interrupted" in output
    time.sleep(0.5)
    alive = [p for p in seen if os.path.exists(f"/proc/{p}") and "zombie" not in _state(p)]
    assert not alive, f"orphan processes survived Ctrl+C: {alive}"
    assert not (out / "results_ablation.csv").exists()
    for path in out.rglob("*.csv"):  # whatever CSV exists was written whole (temp file + rename)
        rows = _rows(path)
        assert rows and all(None not in r.values() for r in rows)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "gone"
