"""Per-layer figures: the plan joined with what the traced simulation measured per layer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from raptor.cli import main
from raptor.compiler import compile_to_dir
from raptor.errors import SimulationError
from raptor.isa.pimdir import read_pimdir
from raptor.options import CompileOptions
from raptor.sim import simulate
from raptor.sim.layers import (
    LAYERS_FORMAT,
    format_layer_rows,
    format_progress,
    layer_rows,
    progress_times,
)
from raptor.sim.trace import KIND_COUNTER, MVMUL, SYNC, slice_layers

BUSY = ("matrix_busy_ns", "vector_busy_ns", "transfer_busy_ns")


def _report(d):
    return json.loads((d / "out" / "compile_report.json").read_text())


def test_layer_busy_time_adds_up_to_the_cores_busy_time(vgg8_tp):
    d, _, prog, rep = vgg8_tp
    rows = layer_rows(rep, prog.meta, _report(d))
    assert [r["layer"] for r in rows] == prog.meta["layer_spans"]["layers"]
    s = rep.trace.arrays()
    lay = slice_layers(s, prog.meta, prog.core_cnt)
    busy = np.array([KIND_COUNTER[k] in BUSY for k in s["kind"]])
    outside = float(s["busy"][busy & (lay < 0)].sum())  # start/end-of-round tokens
    total = sum(getattr(c, k) for c in rep.per_core for k in BUSY)
    assert sum(r["busy_ns"] for r in rows) * rep.pipeline + outside == pytest.approx(total, 1e-12)
    stalls = sum(c.stall_ns for c in rep.per_core)
    assert sum(r["stall_ns"] for r in rows) * rep.pipeline <= stalls
    for r in rows:
        assert 0 < r["busy_max_node_ns"] <= r["busy_max_core_ns"] <= r["busy_ns"]
        assert 0 <= r["start_ns"] < r["end_ns"] <= rep.deadlines_ns[-1]


def test_layer_rows_join_the_plan(vgg8_tp):
    d, _, prog, rep = vgg8_tp
    plan = _report(d)
    rows = {r["layer"]: r for r in layer_rows(rep, prog.meta, plan)}
    for name, n in plan["replication"].items():
        assert rows[name]["replicas"] == n
    for name, cores in plan["layer_cores"].items():
        assert rows[name]["cores"] == len(cores)
    for name, est in plan["estimated_layer_ns"].items():
        assert rows[name]["estimated_ns"] == est
    # a conv's measured time on its busiest core is close to the planner's estimate of its node
    for name in plan["replication"]:
        conv = rows[name]
        assert 0.8 < conv["busy_max_node_ns"] / conv["estimated_ns"] < 1.25, name


def test_table_marks_the_bottleneck():
    rows = [
        dict(layer="a", replicas=2, cores=2, estimated_ns=1e3, busy_max_node_ns=1e3,
             busy_max_core_ns=2e3, busy_ns=4e3, stall_ns=0.0, start_ns=0.0, end_ns=3e3),
        dict(layer="b", replicas=None, cores=1, estimated_ns=None, busy_max_node_ns=5e3,
             busy_max_core_ns=5e3, busy_ns=5e3, stall_ns=1e3, start_ns=1e3, end_ns=9e3),
    ]  # fmt: skip
    lines = format_layer_rows(rows).splitlines()
    assert lines[1].split() == ["a", "2", "2", "1.0", "1.0", "2.0", "4.0", "0.0", "-", "0.0..3.0"]
    row_b = ["b", "-", "1", "-", "5.0", "5.0", "5.0", "1.0", "-", "1.0..9.0", "<-", "bottleneck"]
    assert lines[2].split() == row_b


def test_programs_without_layer_spans_are_refused(vgg8_tp, tmp_path, capsys):
    _, _, prog, rep = vgg8_tp
    meta = {k: v for k, v in prog.meta.items() if k != "layer_spans"} | {"compiler": "pimcomp"}
    with pytest.raises(SimulationError, match="compiled by pimcomp"):
        layer_rows(rep, meta, {})
    assert main(["inspect", str(tmp_path), "--layers"]) == 2
    assert capsys.readouterr().err == (
        f"raptor: error: {tmp_path}: --layers needs a compiled case directory "
        "(pim/ and compile_report.json)\n"
    )


def test_inspect_layers_prints_the_table_and_writes_layers_json(vgg8_tp, capsys):
    d, _, prog, rep = vgg8_tp
    (d / "out" / "layers.json").unlink(missing_ok=True)
    assert main(["inspect", str(d / "out" / "pim"), "--layers"]) == 0  # the pim/ dir also works
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("per-layer plan and measurement (arch-a, throughput, pipeline 2;")
    rows = layer_rows(rep, prog.meta, _report(d))
    assert [ln.split()[0] for ln in out[2 : 2 + len(rows)]] == [r["layer"] for r in rows]
    saved = json.loads((d / "out" / "layers.json").read_text())
    assert saved["layers"] == rows and saved["simulation"]["latency_ns"] == rep.latency_ns


def test_pimcomp_throughput_programs_carry_layer_spans(vgg8_tp):
    d, arch, _, _ = vgg8_tp
    opts = CompileOptions(mode="throughput", pipeline=2, compiler="pimcomp")
    plan = compile_to_dir(d / "vgg8.onnx", arch, opts, d / "pimcomp")
    prog = read_pimdir(d / "pimcomp" / "pim")
    rep = simulate(prog, arch, mode="throughput", pipeline=2, trace=True)
    rows = {r["layer"]: r for r in layer_rows(rep, prog.meta, plan)}
    s = rep.trace.arrays()
    names = prog.meta["layer_spans"]["layers"]
    lay = slice_layers(s, prog.meta, prog.core_cnt)
    mv = {names[i] for i in lay[s["kind"] == MVMUL]}
    assert mv == set(plan["replication"])  # every mvmul lies in a GEMM layer's span
    busy = np.array([KIND_COUNTER[k] in BUSY for k in s["kind"]])
    head = busy & (lay < 0)
    assert set(s["kind"][head].tolist()) <= {SYNC}  # only the start-of-round credit syncs
    total = sum(getattr(c, k) for c in rep.per_core for k in BUSY)
    measured = sum(r["busy_ns"] for r in rows.values()) * 2 + float(s["busy"][head].sum())
    assert measured == pytest.approx(total, rel=1e-12)
    assert all(r["cores"] and r["estimated_ns"] is None for r in rows.values())


def test_inspect_layers_recomputes_a_layers_json_of_another_format(vgg8_tp, capsys):
    d, _, _, _ = vgg8_tp
    (d / "out" / "layers.json").write_text('{"simulation": {}, "layers": [{"layer": "stale"}]}\n')
    assert main(["inspect", str(d / "out"), "--layers", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["layer"] == "features.conv0" and "busy_max_node_ns" in rows[0]
    assert json.loads((d / "out" / "layers.json").read_text())["format"] == LAYERS_FORMAT == 5


def test_progress_times_are_where_the_cumulative_busy_time_reaches_each_share():
    # layer 0: slices ending at 10, 20, 30, 40 with busy 1, 1, 1, 5 (total 8); layer 2 has none
    layer = np.array([0, 1, 0, 0, 0, 1])
    end = np.array([20.0, 7.0, 10.0, 40.0, 30.0, 5.0])
    busy = np.array([1.0, 3.0, 1.0, 5.0, 1.0, 1.0])
    t = progress_times(layer, end, busy, 3)
    # 25 % of 8 = 2 after the slice ending at 20; 50 % = 4 and 75 % = 6 only with the last slice
    assert t[0].tolist() == [20.0, 40.0, 40.0, 40.0]
    # layer 1: 1 at 5, then 4 at 7: 25 % (1) at 5, the rest at 7
    assert t[1].tolist() == [5.0, 7.0, 7.0, 7.0]
    assert np.isnan(t[2]).all()


def test_progress_follows_the_pipeline(vgg8_tp, capsys):
    d, _, prog, rep = vgg8_tp
    rows = layer_rows(rep, prog.meta, _report(d))
    for r in rows:
        p = r["progress_ns"]
        assert r["start_ns"] < p[0] <= p[1] <= p[2] <= p[3] == r["end_ns"], r["layer"]
    # the first conv does its first quarter before the classifier has done anything
    assert rows[0]["progress_ns"][0] < rows[-1]["start_ns"]
    assert main(["inspect", str(d / "out"), "--progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("per-layer plan and measurement")
    assert out[1].split()[:3] == ["layer", "replicas", "25"]
    first = out[2].split()
    assert first[0] == rows[0]["layer"]
    q = [v / 1e3 for v in rows[0]["progress_ns"]]
    assert [float(x) for x in first[2:]] == pytest.approx([*q, q[3] - q[2]], abs=0.051)
    idle = format_progress([dict(layer="x", replicas=None, progress_ns=None)])
    assert idle.splitlines()[1].split() == ["x", "-", "not", "run"]
