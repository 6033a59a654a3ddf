"""End to end: compile toy graphs for arch-tiny, simulate, compare with onnxruntime."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "pim"))
from toy import ARCH_TINY, max_rel_err, reference, toy_convnet, toy_inception, toy_resnet  # noqa: E402

from raptor.arch import load_arch
from raptor.compiler import CompileResult, compile_model, compile_to_dir
from raptor.frontend import load_graph
from raptor.isa.pimdir import PimProgram
from raptor.options import CompileOptions
from raptor.sim import simulate

ARCH = load_arch(str(ARCH_TINY))


def _run(model, opts, hw=8, seed=1):
    res = compile_model(model, ARCH, opts)
    rng = np.random.default_rng(seed)
    ins = [
        {"x": rng.standard_normal((1, 3, hw, hw)).astype(np.float32)} for _ in range(opts.pipeline)
    ]
    rep = simulate(res.program, ARCH, opts.mode, opts.pipeline, ins)
    ref = reference(model, ins)
    errs = [
        max_rel_err(next(iter(o.values())), next(iter(r.values())))
        for o, r in zip(rep.outputs, ref)
    ]
    return res, rep, errs


@pytest.mark.parametrize("model", [toy_convnet, toy_resnet, toy_inception])
@pytest.mark.parametrize("plan", [True, False])
@pytest.mark.parametrize("mode,pipeline", [("latency", 1), ("throughput", 3)])
def test_values_match_onnxruntime(model, plan, mode, pipeline):
    opts = CompileOptions(mode=mode, pipeline=pipeline, disable_spatial_planning=not plan)
    _, _, errs = _run(model(), opts)
    assert max(errs) < 1e-3


def test_16x16_and_graph_input():
    m = toy_resnet(hw=16)
    res, _, errs = _run(m, CompileOptions(), hw=16)
    assert max(errs) < 1e-3
    res2 = compile_model(load_graph(m), ARCH, CompileOptions())
    assert res2.report["instructions_total"] == res.report["instructions_total"]


def test_missing_sync_reads_stale_buffer():
    """With activations in host memory (the dataflow before the NoC pass) the tokens are what
    orders a consumer after its producer: without them a consumer reads a stale buffer. (Over
    the NoC the rendezvous orders them: tests/spatial/test_noc.py.)"""
    host = {"disable_noc_dataflow": True}
    synced = CompileOptions(mode="throughput", pipeline=3, **host)
    unsynced = CompileOptions(mode="throughput", pipeline=3, disable_synchronization=True, **host)
    res, _, ok = _run(toy_resnet(), synced)
    assert res.report["cores_used"] > 1 and max(ok) < 1e-3
    _, _, bad = _run(toy_resnet(), unsynced)
    assert max(bad) > 1e-2  # a consumer raced its producer


def test_planning_beats_plain_latency():
    _, fast, _ = _run(toy_resnet(hw=16), CompileOptions(), hw=16)
    _, slow, _ = _run(toy_resnet(hw=16), CompileOptions(disable_spatial_planning=True), hw=16)
    assert fast.latency_ns < slow.latency_ns


def test_compile_to_dir_writes_pim_and_report(tmp_path):
    rep = compile_to_dir(toy_convnet(), ARCH, CompileOptions(), tmp_path, emit_json=True)
    pim = tmp_path / "pim"
    assert (pim / "config.json").is_file() and (pim / "core_0.json").is_file()
    assert len(list(pim.glob("core_*"))) == ARCH.core_count
    saved = json.loads((tmp_path / "compile_report.json").read_text())
    for key in (
        "cores_used",
        "crossbars_used",
        "array_groups",
        "replication",
        "nodes_per_core",
        "instructions_total",
        "instructions_per_core",
        "instructions_by_opcode",
        "local_memory_peak_bytes",
        "host_memory_bytes",
        "noc_hop_bytes_estimate",
        "estimated_layer_ns",
        "pass_time_s",
        "options",
    ):
        assert key in saved
    assert (
        saved["instructions_total"]
        == rep["instructions_total"]
        == sum(saved["instructions_per_core"])
    )
    cfg = json.loads((pim / "config.json").read_text())
    assert cfg["raptor"]["compiler"] == "raptor" and cfg["core_cnt"] == ARCH.core_count


def test_pimcomp_is_delegated(monkeypatch):
    import types

    called = {}
    fake = types.ModuleType("raptor.pimcomp")

    def fake_compile(g, a, o):
        called["yes"] = (g.name, o.compiler)
        return CompileResult(
            program=PimProgram(cores=[], array_group_map=[]), report={"compiler": "pimcomp"}
        )

    fake.compile_model = fake_compile
    monkeypatch.setitem(sys.modules, "raptor.pimcomp", fake)
    import raptor

    monkeypatch.setattr(raptor, "pimcomp", fake, raising=False)
    res = compile_model(toy_convnet(), ARCH, CompileOptions(compiler="pimcomp"))
    assert called["yes"][1] == "pimcomp"
    assert res.report["compiler"] == "pimcomp" and "latency_lb_budget_ns" in res.report["bounds"]
    # the delegated compiler's program records its target too
    assert (res.program.target.compiler, res.program.target.arch) == ("pimcomp", ARCH.name)


@pytest.mark.parametrize("plan", [True, False])
@pytest.mark.parametrize("mode,pipeline", [("latency", 1), ("throughput", 3)])
def test_row_group_reduction_tree_values(plan, mode, pipeline):
    """c=64 convs have 576-row windows = 5 row tiles; arch-tiny fits 2 per core, so each replica
    is 3 row groups whose partial sums meet over the NoC (send/recv), never via host memory."""
    opts = CompileOptions(mode=mode, pipeline=pipeline, disable_spatial_planning=not plan)
    res, _, errs = _run(toy_convnet(c=64), opts)
    assert max(errs) < 1e-3
    ops = res.report["instructions_by_opcode"]
    assert ops.get("send", 0) > 0 and ops["send"] == ops["recv"]


def test_throughput_pipeline_overlaps_its_rounds():
    """End-of-round credits let round r+1 of a producer overlap round r of its consumers: a p4
    program completes a round every period, shorter than its own first round (here 73.3 vs
    74.6 us; the rounds would follow one another without credits). Both compiles pack by total
    load. Until mixed nodes copied their own core's rows locally, the latency compile of this toy
    took 100 us and the p4 throughput beat 1/latency; the latency plan now ends in 69 us, below
    the p4 period, and the p4 throughput stays within 10 % of 1/latency."""
    packing = {"disable_window_packing": True}
    one = {"crossbar_shares": (1.0,), "fill_shares": ()}
    _, lat, _ = _run(toy_resnet(), CompileOptions(**packing, **one))
    _, thr, errs = _run(toy_resnet(), CompileOptions(mode="throughput", pipeline=4, **packing))
    assert max(errs) < 1e-3
    d = thr.deadlines_ns
    assert max(b - a for a, b in zip(d, d[1:])) < d[0]
    assert thr.throughput_per_s >= 0.9e9 / lat.latency_ns


def test_residual_add_is_fused_into_the_conv():
    res, _, errs = _run(toy_resnet(), CompileOptions())
    assert max(errs) < 1e-3
    names = res.report["estimated_layer_ns"]
    assert not any("add" in k.lower() for k in names)  # the Add became the conv's epilogue
