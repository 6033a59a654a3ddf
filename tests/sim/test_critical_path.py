"""The critical path of a traced run: hand-built traces with a known path, and real runs whose
path must cover the run's end exactly."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

import raptor.sim
from raptor.arch import load_arch
from raptor.cli import main
from raptor.compiler import compile_to_dir
from raptor.isa.pimdir import read_pimdir
from raptor.models import save_model
from raptor.options import CompileOptions
from raptor.sim import simulate
from raptor.sim.critical_path import CATEGORIES, critical_path, format_segments
from raptor.sim.layers import LAYERS_FORMAT, format_layer_rows, layer_rows
from raptor.sim.trace import (
    FLOW_SEND,
    FLOW_SYNC,
    MVMUL,
    RECV,
    SEND,
    STALL_MEMORY,
    STALL_RECV,
    STALL_SYNC,
    SYNC,
    TRACK_STRIDE,
    VECTOR,
    WAIT,
    TraceRecorder,
)

META = {"layer_spans": {"layers": ["conv", "fc"], "cores": {"core0": [[0, 0]], "core1": [[0, 1]]}}}


def _run(slices, flows=()):
    """A fake traced report: slices (track, kind, start, end, pc), flows (kind, src, src_ns, dst,
    dst_ns)."""
    rec = TraceRecorder()
    for track, kind, a, b, pc in slices:
        if kind in (STALL_RECV, STALL_SYNC, STALL_MEMORY):
            rec.stall(track, kind, a, b, pc)
        else:
            rec.add(track, kind, a, b, b - a, pc)
    for f in flows:
        rec.flow(*f)
    rec.finish()
    return SimpleNamespace(trace=rec)


def _seg(core, layer, a, b, **cats):
    return {
        "core": core,
        "layer": layer,
        "start_ns": a,
        "end_ns": b,
        "by_category": {k.replace("_", " "): v for k, v in cats.items()},
    }


def test_a_recv_stall_hands_the_path_to_the_sender():
    # core 0 computes 0-250 and sends 250-300; core 1 waits for it, receives, adds, ends at 350
    rep = _run(
        [
            (0, MVMUL, 0, 250, 1),
            (0, SEND, 250, 300, 2),
            (1, STALL_RECV, 0, 300, 1),
            (1, RECV, 300, 310, 1),
            (1, VECTOR, 310, 350, 2),
        ],
        [(FLOW_SEND, 0, 260, 1, 305)],
    )
    p = critical_path(rep, META)
    assert p["length_ns"] == 350
    assert p["by_layer"] == {
        "conv": {"matrix": 250.0, "send": 50.0},
        "fc": {"recv": 10.0, "vector": 40.0},
    }
    assert p["core_changes"] == 1 and p["cores"] == 2
    assert set(p["by_category"]) == set(CATEGORIES)
    assert sum(p["by_category"].values()) == 350
    assert p["segments"] == [  # core 0's work, then core 1's
        _seg(0, "conv", 0.0, 300.0, matrix=250.0, send=50.0),
        _seg(1, "fc", 300.0, 350.0, recv=10.0, vector=40.0),
    ]


def test_a_send_to_a_waiting_receiver_is_send_wait_not_a_jump_back():
    # core 0's send stalls 250-280 although core 1 has waited at its recv since 0: the rendezvous
    # flits; the walk must not go back to core 1 (which only waited) but stay on core 0
    rep = _run(
        [
            (0, MVMUL, 0, 250, 1),
            (0, STALL_RECV, 250, 280, 2),
            (0, SEND, 280, 300, 2),
            (1, STALL_RECV, 0, 300, 1),
            (1, RECV, 300, 310, 1),
        ],
        [(FLOW_SEND, 0, 290, 1, 305)],
    )
    p = critical_path(rep, META)
    assert p["by_layer"]["conv"] == {"matrix": 250.0, "send wait": 30.0, "send": 20.0}
    assert p["by_layer"]["fc"] == {"recv": 10.0}
    assert p["core_changes"] == 1
    assert p["segments"] == [  # send wait stays on the sender
        _seg(0, "conv", 0.0, 300.0, matrix=250.0, send=20.0, send_wait=30.0),
        _seg(1, "fc", 300.0, 310.0, recv=10.0),
    ]


def test_a_send_stalled_on_a_busy_receiver_follows_the_receiver():
    # core 1 computes until 300 before its recv: core 0's send waited for core 1's work
    rep = _run(
        [
            (0, MVMUL, 0, 100, 1),
            (0, STALL_RECV, 100, 300, 2),
            (0, SEND, 300, 320, 2),
            (1, MVMUL, 0, 300, 1),
            (1, RECV, 300, 330, 2),
        ],
        [(FLOW_SEND, 0, 310, 1, 315)],
    )
    p = critical_path(rep, META)
    assert p["by_layer"] == {"fc": {"matrix": 300.0, "recv": 30.0}}  # core 0 is off the path
    assert p["core_changes"] == 0  # the run ends on core 1, which never waited


def test_a_send_waits_for_its_receiver_until_the_receiver_reaches_the_recv():
    # core 1 computes until 290, then waits 10 ns at its recv for the rendezvous flits; core 0's
    # send stalled from 100: 100-290 is core 1's work, only 290-300 is the send's own wait
    rep = _run(
        [
            (0, MVMUL, 0, 100, 1),
            (0, STALL_RECV, 100, 300, 2),
            (0, SEND, 300, 320, 2),
            (1, MVMUL, 0, 290, 1),
            (1, STALL_RECV, 290, 300, 2),
            (1, RECV, 300, 330, 2),
        ],
        [(FLOW_SEND, 0, 310, 1, 315)],
    )
    p = critical_path(rep, META)
    assert p["by_layer"] == {
        "conv": {"send wait": 10.0},
        "fc": {"matrix": 290.0, "recv": 30.0},
    }
    assert sum(p["by_category"].values()) == 330


def test_a_receiver_blocked_on_a_third_core_holds_the_sender_up():
    # core 1 receives from core 2 first (its program's order), which sends at 490-500; core 0's
    # send to core 1, ready at 100, waits for all of that: the path runs through core 2's work
    meta = {
        "layer_spans": {
            "layers": ["conv", "fc", "pool"],
            "cores": {"core0": [[0, 0]], "core1": [[0, 1]], "core2": [[0, 2]]},
        }
    }
    rep = _run(
        [
            (0, MVMUL, 0, 100, 1),
            (0, STALL_RECV, 100, 512, 2),
            (0, SEND, 512, 515, 2),
            (1, STALL_RECV, 0, 500, 1),
            (1, RECV, 500, 510, 1),
            (1, STALL_RECV, 510, 512, 2),
            (1, RECV, 512, 520, 2),
            (2, MVMUL, 0, 490, 1),
            (2, SEND, 490, 500, 2),
        ],
        [(FLOW_SEND, 2, 495, 1, 505), (FLOW_SEND, 0, 513, 1, 515)],
    )
    p = critical_path(rep, meta)
    assert p["by_layer"] == {
        "pool": {"matrix": 490.0, "send": 10.0},
        "fc": {"recv": 18.0},
        "conv": {"send wait": 2.0},
    }
    assert [s["core"] for s in p["segments"]] == [2, 1, 0, 1]


def test_sync_stalls_follow_the_sync_and_memory_stalls_stay():
    rep = _run(
        [
            (0, STALL_MEMORY, 0, 40, 1),
            (0, MVMUL, 40, 200, 2),
            (0, SYNC, 200, 201, 3),
            (1, STALL_SYNC, 0, 201, 1),
            (1, WAIT, 201, 202, 1),
            (1, VECTOR, 202, 260, 2),
        ],
        [(FLOW_SYNC, 0, 200, 1, 100)],  # the engine ends the flow inside the stall
    )
    p = critical_path(rep, META)
    # from the sync's time (200) on: the 1 ns the sync flit took is the waiting layer's
    assert p["by_layer"]["conv"] == {"memory stall": 40.0, "matrix": 160.0}
    assert p["by_layer"]["fc"] == {"local": 2.0, "vector": 58.0}
    assert p["core_changes"] == 1
    assert p["segments"] == [  # the releasing core up to its sync, the flit on the waiting core
        _seg(0, "conv", 0.0, 200.0, matrix=160.0, memory_stall=40.0),
        _seg(1, "fc", 200.0, 260.0, local=2.0, vector=58.0),
    ]


def test_untraced_runs_and_several_tracks_per_core_have_no_path():
    assert critical_path(SimpleNamespace(trace=None), META) is None
    rep = _run([(0, MVMUL, 0, 10, 1), (TRACK_STRIDE + 0, VECTOR, 0, 5, 2)])
    assert critical_path(rep, META) is None


@pytest.fixture(scope="module")
def vgg8_latency(tmp_path_factory):
    """vgg8 at 16x16, a planned latency compile for arch-a (the NoC dataflow), traced."""
    d = tmp_path_factory.mktemp("vgg8cp")
    model = save_model("vgg8", d / "vgg8.onnx", input_size=16)
    opts = CompileOptions(mode="latency", crossbar_shares=(1.0,), fill_shares=())
    arch = load_arch("arch-a")
    report = compile_to_dir(model, arch, opts, d / "out")
    prog = read_pimdir(d / "out" / "pim")
    return prog, report, simulate(prog, arch, trace=True)


def test_the_path_of_a_real_run_covers_its_latency(vgg8_latency):
    prog, report, rep = vgg8_latency
    p = critical_path(rep, prog.meta)
    assert p["length_ns"] == pytest.approx(rep.latency_ns, abs=10.0)  # but the last retire cycles
    assert sum(p["by_category"].values()) == pytest.approx(p["length_ns"], rel=1e-9)
    total = sum(sum(c.values()) for c in p["by_layer"].values())
    assert total == pytest.approx(p["length_ns"], rel=1e-9)
    # the path runs through the layers in order, over several cores, and is mostly work
    assert p["core_changes"] > 0 and p["cores"] > 1
    assert p["by_category"]["other"] < 0.01 * p["length_ns"]
    assert p["by_category"]["matrix"] > 0.2 * p["length_ns"]
    # no layer holds more of the path than the run took, nor more matrix time than its mvmuls
    rows = {r["layer"]: r for r in layer_rows(rep, prog.meta, report)}
    for name, cats in p["by_layer"].items():
        if name in rows:
            assert rows[name]["path_ns"] == pytest.approx(sum(cats.values()))
            assert cats.get("matrix", 0.0) <= rows[name]["busy_ns"]
    text = format_layer_rows(list(rows.values()), "t", p).splitlines()
    assert text[-1].startswith(
        f"critical path {p['length_ns'] / 1e3:.1f} us over {p['cores']} cores"
    )
    assert "matrix" in text[-1]


def test_throughput_runs_report_the_path_per_inference(vgg8_tp):
    _, _, prog, rep = vgg8_tp
    p = critical_path(rep, prog.meta)
    assert p["length_ns"] == pytest.approx(max(float(s) for s in rep.trace.arrays()["end"]))
    rows = layer_rows(rep, prog.meta, {})
    on_path = sum(r["path_ns"] for r in rows)
    outside = sum(p["by_layer"].get("-", {}).values())
    assert on_path * rep.pipeline + outside == pytest.approx(p["length_ns"], rel=1e-9)
    # its host-memory dataflow orders rows by sync/wait: the walk follows every released wait
    assert p["by_category"]["other"] < 0.01 * p["length_ns"]


def test_segments_hold_the_idle_start_and_gaps_and_revisits():
    # one core starting late: idle outside any layer, then its slices and the gap between them
    p = critical_path(_run([(0, MVMUL, 20, 100, 1), (0, VECTOR, 105, 150, 2)]), META)
    assert p["segments"] == [
        _seg(0, "-", 0.0, 20.0, other=20.0),
        _seg(0, "conv", 20.0, 150.0, matrix=80.0, other=5.0, vector=45.0),
    ]
    # core 0 sends to core 1 and waits for its answer: the path leaves core 0 and comes back
    rep = _run(
        [
            (0, MVMUL, 0, 100, 1),
            (0, SEND, 100, 110, 2),
            (0, STALL_RECV, 110, 130, 3),
            (0, RECV, 130, 140, 3),
            (0, VECTOR, 140, 200, 4),
            (1, STALL_RECV, 0, 110, 1),
            (1, RECV, 110, 120, 1),
            (1, SEND, 120, 130, 2),
        ],
        [(FLOW_SEND, 0, 105, 1, 115), (FLOW_SEND, 1, 125, 0, 135)],
    )
    p = critical_path(rep, META)
    assert p["segments"] == [
        _seg(0, "conv", 0.0, 110.0, matrix=100.0, send=10.0),
        _seg(1, "fc", 110.0, 130.0, send=10.0, recv=10.0),
        _seg(0, "conv", 130.0, 200.0, recv=10.0, vector=60.0),
    ]
    assert p["core_changes"] == 2 and p["cores"] == 2


@pytest.mark.parametrize("case", ["vgg8_latency", "vgg8_tp"])
def test_the_segments_of_a_real_run_tile_its_path(case, request):
    run = request.getfixturevalue(case)
    prog, rep = run[0 if case == "vgg8_latency" else 2], run[-1]
    p = critical_path(rep, prog.meta)
    segs = p["segments"]
    assert segs[0]["start_ns"] == pytest.approx(0.0, abs=1e-6)
    assert segs[-1]["end_ns"] == p["length_ns"]
    for prev, g in zip(segs, segs[1:]):
        assert g["start_ns"] == pytest.approx(prev["end_ns"], abs=1e-6)
        assert (g["core"], g["layer"]) != (prev["core"], prev["layer"])  # runs are merged
    for g in segs:
        assert g["end_ns"] > g["start_ns"]
        assert sum(g["by_category"].values()) == pytest.approx(g["end_ns"] - g["start_ns"])
        assert g["layer"] == "-" or g["layer"] in prog.meta["layer_spans"]["layers"]
    for cat, ns in p["by_category"].items():
        got = sum(g["by_category"].get(cat, 0.0) for g in segs)
        assert got == pytest.approx(ns, rel=1e-9, abs=1e-9), cat
    for name, cats in p["by_layer"].items():  # and per layer
        on = sum(sum(g["by_category"].values()) for g in segs if g["layer"] == name)
        assert on == pytest.approx(sum(cats.values()), rel=1e-9)
    assert len({g["core"] for g in segs}) == p["cores"] > 1
    moves = sum(a["core"] != b["core"] for a, b in zip(segs, segs[1:]))
    assert 0 < moves <= p["core_changes"]
    assert segs[-1]["core"] == int(rep.trace.arrays()["track"][rep.trace.arrays()["end"].argmax()])


def test_format_segments_folds_the_short_ones():
    segs = [
        _seg(3, "conv", 0.0, 5e3, other=5e3),
        _seg(7, "conv", 5e3, 60e3, matrix=40e3, vector=10e3, recv=5e3),
        _seg(2, "fc", 60e3, 62e3, recv=2e3),
        _seg(2, "a.very.long.layer.name.that.does.not.fit.anywhere", 62e3, 90e3, send_wait=28e3),
    ]
    path = {"length_ns": 90e3, "segments": segs}
    lines = format_segments(path).splitlines()
    assert lines[0].split()[:7] == ["core", "layer", "start", "us", "end", "us", "us"]
    assert len(lines) == 1 + 4 + 1 and all(len(ln) < 100 for ln in lines)
    assert lines[2].split() == [
        "7",
        "conv",
        "5.0",
        "60.0",
        "55.0",
        "matrix",
        "40.0",
        "vector",
        "10.0",
    ]
    assert lines[4].split()[5:] == ["send", "wait", "28.0"]  # one category only
    assert lines[4].split()[1].startswith("..") and lines[4].split()[1].endswith("anywhere")
    assert lines[-1].startswith("0 of 4 segments folded")
    lines = format_segments(path, min_ns=10e3).splitlines()
    assert [ln.split()[0] for ln in lines[1:-1]] == ["7", "2"]
    assert lines[-1] == (
        "2 of 4 segments folded (shorter than 10 us): 7.0 us of the path's 90.0 us"
    )
    lines = format_segments(path, limit=1).splitlines()  # the longest one, then the rest folded
    assert [ln.split()[0] for ln in lines[1:-1]] == ["7"]
    assert lines[-1].startswith("3 of 4 segments folded") and ": 35.0 us of" in lines[-1]


def test_inspect_path_prints_the_segments_and_caches_them(vgg8_tp, capsys, monkeypatch):
    d, _, prog, rep = vgg8_tp
    out_dir = d / "out"
    (out_dir / "layers.json").unlink(missing_ok=True)
    assert main(["inspect", str(out_dir), "--path", "--path-min-us", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    p = critical_path(rep, prog.meta)
    segs = p["segments"]
    assert lines[0].split()[:2] == ["core", "layer"]
    assert len(lines) == len(segs) + 2
    for ln, g in zip(lines[1:-1], segs):
        assert ln.split()[:3] == [str(g["core"]), g["layer"], f"{g['start_ns'] / 1e3:.1f}"]
    assert lines[-1].startswith(f"0 of {len(segs)} segments folded")
    saved = json.loads((out_dir / "layers.json").read_text())
    assert saved["format"] == LAYERS_FORMAT and saved["critical_path"] == p
    # with --layers too, from layers.json: no second simulation
    monkeypatch.setattr(raptor.sim, "simulate", lambda *a, **k: pytest.fail("simulated again"))
    assert main(["inspect", str(out_dir), "--layers", "--path"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("per-layer plan and measurement")
    table = out.split("\n\n")[-1].splitlines()
    assert table[0].split()[:2] == ["core", "layer"]
    short = [g for g in segs if g["end_ns"] - g["start_ns"] < 10e3]  # --path-min-us 10
    assert len(table) == len(segs) - len(short) + 2
    assert table[-1].startswith(f"{len(short)} of {len(segs)} segments folded (shorter than 10 us)")
    assert main(["inspect", str(out_dir), "--path", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == p


def test_inspect_path_without_a_path_is_one_error_line(vgg8_tp, tmp_path, capsys):
    assert main(["inspect", str(tmp_path), "--path"]) == 2
    assert capsys.readouterr().err == (
        f"raptor: error: {tmp_path}: --path needs a compiled case directory "
        "(pim/ and compile_report.json)\n"
    )
    # a run with several tracks per core (rob_size > 1) leaves layers.json without a path
    d, _, _, _ = vgg8_tp
    case = tmp_path / "case"
    shutil.copytree(d / "out" / "pim", case / "pim")
    shutil.copy(d / "out" / "compile_report.json", case)
    sim = {"arch": "arch-a", "mode": "throughput", "pipeline": 2, "latency_ns": 1.0}
    data = {"format": LAYERS_FORMAT, "simulation": sim, "layers": [], "critical_path": None}
    (case / "layers.json").write_text(json.dumps(data))
    assert main(["inspect", str(case), "--path"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"raptor: error: {case}: --path: the run has no critical path: its trace has more than "
        "one track per core (core.rob_size > 1 keeps several instructions of a core in flight)\n"
    )
