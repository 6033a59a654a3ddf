"""Simulation traces: the Chrome trace-event JSON follows the format, its slices add up to the
engine's per-core figures exactly, tracing does not change the simulation, the heat map's bins."""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import pytest
from simprog import arch_with, mvmul, program, setbw, sldi

from raptor.cli import main
from raptor.isa.pimdir import read_config
from raptor.sim import simulate
from raptor.sim import trace as trace_mod
from raptor.sim.report import CoreStats
from raptor.sim.timeline import CLASSES, occupancy, path_line, timeline_png
from raptor.sim.trace import (
    KIND_COUNTER,
    SLICE_DTYPE,
    TRACK_STRIDE,
    chrome_trace_events,
    track_of_tid,
    write_chrome_trace,
)

COUNTERS = (
    "matrix_busy_ns",
    "vector_busy_ns",
    "transfer_busy_ns",
    "stall_sync_ns",
    "stall_recv_ns",
    "stall_memory_ns",
)
STALLS = {"sync stall": "stall_sync_ns", "recv stall": "stall_recv_ns"}
STALLS["memory stall"] = "stall_memory_ns"


def validate_trace_events(doc: dict) -> list[dict]:
    """The trace-event format rules we rely on; returns the events."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit") in ("ns", "ms")
    events = doc["traceEvents"]
    owner: dict[int, int] = {}
    for e in events:
        ph = e["ph"]
        assert ph in ("X", "B", "E", "i", "C", "s", "f", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        # ids 0 are the idle task's in Linux-based viewers; a thread id names one thread
        assert e["pid"] > 0 and e["tid"] > 0 and owner.setdefault(e["tid"], e["pid"]) == e["pid"]
        assert isinstance(e["name"], str) and e["name"], e
        if ph == "M":
            assert e["name"] in (
                "process_name",
                "process_sort_index",
                "thread_name",
                "thread_sort_index",
            )
            assert isinstance(e["args"], dict)
            continue
        assert isinstance(e["ts"], (int, float)) and math.isfinite(e["ts"]) and e["ts"] >= 0, e
        if ph == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            assert isinstance(e.get("cat", ""), str)
        elif ph == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
        elif ph == "i":
            assert e["s"] in ("g", "p", "t"), e
        elif ph in ("s", "f"):
            assert isinstance(e["id"], int) and e["id"] > 0 and e["cat"], e
            if ph == "f":
                assert e["bp"] == "e", e
    return events


def _ns(us: float) -> int:
    return round(us * 1000)


def _load(report, meta) -> tuple[dict, list[dict]]:
    lines, _ = chrome_trace_events(report, meta)
    doc = json.loads('{"displayTimeUnit":"ns","traceEvents":[' + ",".join(lines) + "]}")
    return doc, validate_trace_events(doc)


def test_written_file_is_trace_event_json(vgg8_tp, tmp_path):
    _, _, prog, rep = vgg8_tp
    s = write_chrome_trace(rep, prog.meta, tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text())
    events = validate_trace_events(doc)
    assert s["events"] == len(events) and s["bytes"] == (tmp_path / "t.json").stat().st_size
    assert doc["otherData"]["deadlines_ns"] == rep.deadlines_ns
    assert not list(tmp_path.glob(".*"))  # written through a temporary file, then renamed
    phases = {e["ph"] for e in events}
    assert {"X", "C", "s", "f", "i", "M"} <= phases
    names = {e["name"] for e in events if e["ph"] in ("s", "f")}
    assert names == {"send->recv", "sync->wait"}
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"global memory queue", "NoC bytes in flight"}
    rounds = [e for e in events if e["ph"] == "i" and e["s"] == "g"]
    assert [_ns(e["ts"]) for e in rounds] == [round(d) for d in rep.deadlines_ns]


def test_slices_add_up_to_the_engine_per_core_figures(vgg8_tp):
    _, _, prog, rep = vgg8_tp
    _, events = _load(rep, prog.meta)
    got: dict[int, dict[str, float]] = defaultdict(lambda: dict.fromkeys(COUNTERS, 0.0))
    stall_dur: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for e in events:
        if e["ph"] != "X":
            continue
        core = track_of_tid(e["tid"]) % TRACK_STRIDE
        for k in COUNTERS:
            got[core][k] += e["args"].get(k, 0.0)
        if e["name"] in STALLS:
            stall_dur[core][STALLS[e["name"]]] += _ns(e["dur"])
    used = [c for c in rep.per_core if c.instructions]
    assert len(got) == len(used)
    for c in used:
        for k in COUNTERS:
            assert got[c.core][k] == getattr(c, k), (c.core, k)
        for k in STALLS.values():  # stall slices last exactly the stall (integer ns here)
            assert stall_dur[c.core][k] == getattr(c, k), (c.core, k)
    assert sum(c.stall_recv_ns for c in used) > 0 and sum(c.stall_sync_ns for c in used) > 0


def test_slices_never_overlap_and_flows_bind_to_slices(vgg8_tp):
    _, _, prog, rep = vgg8_tp
    _, events = _load(rep, prog.meta)
    by_tid: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_tid[e["tid"]].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    for spans in by_tid.values():
        spans.sort()
        for (_, e0), (s1, _) in zip(spans, spans[1:]):
            assert e0 <= s1
    finish = {c.core: c.finish_ns[-1] for c in rep.per_core if c.instructions}
    for tid, spans in by_tid.items():
        assert spans[-1][1] <= finish[track_of_tid(tid) % TRACK_STRIDE]

    def inside(tid: int, t: int) -> bool:
        spans = by_tid[tid]
        i = np.searchsorted([s for s, _ in spans], t, side="right") - 1
        return i >= 0 and spans[i][0] <= t < spans[i][1]  # never on a slice's end

    ends = {}
    for e in events:
        if e["ph"] in ("s", "f"):
            assert inside(e["tid"], _ns(e["ts"])), e
            ends.setdefault(e["id"], []).append(e["ph"])
    assert all(sorted(v) == ["f", "s"] for v in ends.values())


def test_slices_carry_their_layer(vgg8_tp):
    _, _, prog, rep = vgg8_tp
    _, events = _load(rep, prog.meta)
    layers = set(prog.meta["layer_spans"]["layers"])
    named = {e["args"]["layer"] for e in events if e["ph"] == "X" and "layer" in e["args"]}
    mv = {e["args"]["layer"] for e in events if e["ph"] == "X" and e["name"].startswith("mvmul")}
    assert named <= layers and len(mv) == 8  # six convs and two FC layers multiply


def test_tracing_does_not_change_the_simulation(vgg8_tp):
    _, arch, prog, traced = vgg8_tp
    plain = simulate(prog, arch, mode="throughput", pipeline=2)
    assert plain.trace is None
    assert plain.deadlines_ns == traced.deadlines_ns and plain.energy_pj == traced.energy_pj
    assert [c.to_dict() for c in plain.per_core] == [c.to_dict() for c in traced.per_core]
    for a, b in zip(plain.outputs, traced.outputs):
        for k in a:
            assert np.array_equal(a[k], b[k])


def test_runs_of_identical_instructions_become_one_slice(vgg8_tp):
    _, _, prog, rep = vgg8_tp
    s = rep.trace.arrays()
    for kind, op in ((trace_mod.MVMUL, 9), (trace_mod.ST, 26), (trace_mod.SEND, 29)):
        per_round = sum(int((x["opcode"] == op).sum()) for x in prog.cores)
        assert s["count"][s["kind"] == kind].sum() == 2 * per_round > 0
    assert (s["count"] > 1).any() and len(s) < s["count"].sum()


def test_cap_merges_core_private_runs_and_keeps_figures(vgg8_tp, monkeypatch):
    _, _, prog, rep = vgg8_tp
    n = len(rep.trace.arrays())
    monkeypatch.setattr(trace_mod, "MAX_SLICES", n // 2)
    lines, summary = chrome_trace_events(rep, prog.meta)
    assert summary["capped"] and summary["slices"] < n
    doc = json.loads('{"displayTimeUnit":"ns","traceEvents":[' + ",".join(lines) + "]}")
    events = validate_trace_events(doc)
    assert any(e["ph"] == "X" and e["cat"] == "compute" for e in events)
    tot = dict.fromkeys(COUNTERS, 0.0)
    for e in events:
        if e["ph"] == "X":
            for k in COUNTERS:
                tot[k] += e["args"].get(k, 0.0)
    for k in COUNTERS:
        assert tot[k] == pytest.approx(sum(getattr(c, k) for c in rep.per_core), rel=1e-12)


def test_cap_merges_whole_layers_when_compute_runs_are_not_enough(vgg8_tp, monkeypatch):
    _, _, prog, rep = vgg8_tp
    monkeypatch.setattr(trace_mod, "MAX_SLICES", 10)
    lines, summary = chrome_trace_events(rep, prog.meta)
    doc = json.loads('{"displayTimeUnit":"ns","traceEvents":[' + ",".join(lines) + "]}")
    x = [e for e in validate_trace_events(doc) if e["ph"] == "X"]
    assert len(x) == summary["slices"] and any(e["cat"] == "merged" for e in x)
    # at most one slice per (core, layer run, round) remains; figures stay exact per core
    per_core = defaultdict(lambda: dict.fromkeys(COUNTERS, 0.0))
    for e in x:
        for k in COUNTERS:
            per_core[track_of_tid(e["tid"])][k] += e["args"].get(k, 0.0)
    for c in rep.per_core:
        if c.instructions:
            for k in COUNTERS:
                assert per_core[c.core][k] == pytest.approx(getattr(c, k), rel=1e-12, abs=1e-9)


W = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)


def test_slices_packed_in_chunks_are_the_same(vgg8_tp, monkeypatch):
    _, arch, prog, rep = vgg8_tp
    monkeypatch.setattr(trace_mod, "CHUNK", 1000)
    again = simulate(prog, arch, mode="throughput", pipeline=2, trace=True)
    assert len(again.trace._chunks) > 1
    assert np.array_equal(again.trace.arrays(), rep.trace.arrays())


def test_rob_8_puts_array_groups_on_their_own_tracks():
    body = [setbw(), sldi(1, 0), sldi(2, 4096), sldi(3, 8192), sldi(4, 12288)]
    body += [mvmul(3, 1, group=0), mvmul(4, 2, group=1)]
    prog = program([body], agm=[[1, 1]], weights=[W, W], agw=[[0, 1]])
    rep = simulate(prog, arch_with(rob_size=8), trace=True)
    s = rep.trace.arrays()
    assert sorted(s["track"].tolist()) == [3 * TRACK_STRIDE, 4 * TRACK_STRIDE]  # AG 0 and AG 1
    a, b = sorted(s, key=lambda r: r["start"])
    assert b["start"] < a["end"]  # the two MVMs overlap in time
    assert s["busy"].sum() == rep.per_core[0].matrix_busy_ns
    _, events = _load(rep, prog.meta)
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {"core 0", "core 0 AG 0", "core 0 AG 1"}


def test_occupancy_bins():
    s = np.zeros(3, SLICE_DTYPE)
    s["track"] = [0, 0, 1]
    s["kind"] = [0, 9, 1]  # mvmul, sync stall, vector
    s["start"] = [0.0, 150.0, 20.0]
    s["end"] = [150.0, 210.0, 40.0]
    occ, width = occupancy(s, [0, 1], 300.0, 3)
    assert width == 100.0
    m, v, st, idle = (CLASSES.index(k) for k in ("matrix", "vector", "sync stall", "idle"))
    assert occ[0, :, m].tolist() == [100.0, 50.0, 0.0]
    assert occ[0, :, st].tolist() == [0.0, 50.0, 10.0]
    assert occ[0, :, idle].tolist() == [0.0, 0.0, 90.0]
    assert occ[1, :, v].tolist() == [20.0, 0.0, 0.0] and occ[1, 0, idle] == 80.0


def test_path_line_runs_along_cores_and_steps_between_them():
    segs = [
        {"core": 5, "start_ns": 0.0, "end_ns": 2e6},
        {"core": 9, "start_ns": 2e6, "end_ns": 3e6},  # no program: no row
        {"core": 7, "start_ns": 3e6, "end_ns": 4.5e6},
        {"core": 5, "start_ns": 4.5e6, "end_ns": 5e6},
    ]
    xs, ys = path_line(segs, [5, 7])
    assert xs.tolist() == [0.0, 2.0, 3.0, 4.5, 4.5, 5.0]
    assert ys.tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]


def test_heat_map_draws_the_critical_path(vgg8_tp, tmp_path):
    from raptor.sim.critical_path import critical_path

    d, _, _, rep = vgg8_tp
    meta = read_config(d / "out" / "pim")["raptor"]
    crit = critical_path(rep, meta)
    cores = [c.core for c in rep.per_core if c.instructions]
    xs, ys = path_line(crit["segments"], cores)
    # the line spans the run and every vertex sits on a core row inside the map
    assert xs[0] == 0.0 and xs[-1] == pytest.approx(crit["length_ns"] / 1e6)
    assert np.all(np.diff(xs) >= -1e-12) and set(ys) <= set(range(len(cores)))
    plain = timeline_png(rep, tmp_path / "plain.png").read_bytes()
    drawn = timeline_png(rep, tmp_path / "path.png", crit=crit).read_bytes()
    assert drawn[:8] == b"\x89PNG\r\n\x1a\n" and drawn != plain


def test_counter_step_function_and_resampling(monkeypatch):
    t, v = trace_mod._step_counter(np.array([0.0, 5.0, 5.0, 9.0]), np.array([1, 1, -1, -1.0]))
    assert t.tolist() == [0.0, 5.0, 9.0] and v.tolist() == [1.0, 1.0, 0.0]
    monkeypatch.setattr(trace_mod, "MAX_COUNTER_POINTS", 2)
    t, v = trace_mod._step_counter(np.array([0.0, 1.0, 2.0, 10.0]), np.array([1, 1, -1, -1.0]))
    assert t.tolist() == [0.0, 5.0] and v.tolist() == [2.0, 0.0]


def test_counter_fields_are_core_stats_fields():
    assert set(KIND_COUNTER) == set(COUNTERS) <= set(CoreStats(0).to_dict())


def test_cli_trace_writes_json_and_png(vgg8_tp, tmp_path, capsys):
    d, _, _, _ = vgg8_tp
    out = tmp_path / "sub" / "t.json"
    argv = ["simulate", str(d / "out"), "--arch", "arch-a", "--mode", "throughput"]
    assert main(argv + ["--pipeline", "2", "--trace", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"trace: {out}" in printed
    assert printed.splitlines()[-1].startswith("critical path ") and " us: matrix " in printed
    validate_trace_events(json.loads(out.read_text()))
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert read_config(d / "out" / "pim")["raptor"]["layer_spans"]["layers"]


def test_cli_trace_bad_arguments(vgg8_tp, tmp_path, capsys):
    d, _, _, _ = vgg8_tp
    argv = ["simulate", str(d / "out"), "--arch", "arch-a", "--trace"]
    assert main(argv + [str(tmp_path / "t.txt")]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"raptor: error: --trace {tmp_path / 't.txt'}: the trace file name must end in .json\n"
    )
    assert main(argv + [str(tmp_path / "t.json"), "--engine", "pimsim-nn"]) == 2
    assert capsys.readouterr().err == "raptor: error: --trace needs our simulator (--engine ours)\n"
    assert not list(tmp_path.iterdir())
