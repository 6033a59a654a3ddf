"""The critical path of a traced run: hand-built traces with a known path, and real runs whose
path must cover the run's end exactly."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raptor.arch import load_arch
from raptor.compiler import compile_to_dir
from raptor.isa.pimdir import read_pimdir
from raptor.models import save_model
from raptor.options import CompileOptions
from raptor.sim import simulate
from raptor.sim.critical_path import CATEGORIES, critical_path
from raptor.sim.layers import format_layer_rows, layer_rows
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
