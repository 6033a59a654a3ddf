"""Crossbar shares (`--pim-crossbar-shares`, raptor.options.CROSSBAR_SHARES_LATENCY) and fill
shares (`--pim-fill-shares`, FILL_SHARES): a latency compile plans once per share of the chip's
crossbars that replication may buy, and a compile in either mode once per fill share (the rest of
the crossbars then buying replicas of the slowest layer), and keeps the plan whose message order
ends first."""

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))
from toy import max_rel_err, reference  # noqa: E402

from raptor.arch import load_arch
from raptor.compiler import compile_model
from raptor.errors import RaptorError
from raptor.models import build_model
from raptor.options import CROSSBAR_SHARES_LATENCY, FILL_SHARES, CompileOptions
from raptor.sim import simulate

ARCH = load_arch("arch-a")


def _run(model, opts: CompileOptions):
    res = compile_model(model, ARCH, opts)
    name = model.graph.input[0].name
    ins = [{name: np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)}]
    rep = simulate(res.program, ARCH, opts.mode, opts.pipeline, ins)
    ref = reference(model, ins)[0]
    err = max(
        max_rel_err(np.asarray(rep.outputs[0][k]).reshape(v.shape), v) for k, v in ref.items()
    )
    return res.report, rep, err


def _share(label: str) -> float:
    m = re.search(r"@([0-9.]+)", label)
    return float(m.group(1)) if m else 1.0


def test_a_smaller_share_wins_on_vgg8_latency():
    """vgg8 (32x32) on arch-a, latency: with every crossbar the replicas fill the cores, so
    conv3 and conv4 share cores and run one after the other there. The plan at 0.9 of the
    crossbars (fewer conv3/conv4/conv6 replicas) ends first in the message order, and the kept
    program is faster in simulation too (measured 3.00 -> 2.48 ms), with fewer crossbars and the
    same values. The report names every candidate and the share of the kept one."""
    model = build_model("vgg8", input_size=32)
    # without the finer vector splits, which plan with the winning share (test_vector_splits.py),
    # and conv0 in one chunk per replica (test_noc.py covers two)
    rep_d, sim_d, err_d = _run(model, CompileOptions(vector_splits=(), host_chunks=(1,)))
    every = CompileOptions(
        crossbar_shares=(1.0,), fill_shares=(), vector_splits=(), host_chunks=(1,)
    )
    rep_1, sim_1, err_1 = _run(model, every)
    assert err_d <= 1e-3 and err_1 <= 1e-3
    est = rep_d["plan_estimates_ns"]
    assert {_share(k) for k in est} == set(CROSSBAR_SHARES_LATENCY)
    assert {_share(k) for k in est if "+fill" in k} == set(FILL_SHARES)
    assert {_share(k) for k in rep_1["plan_estimates_ns"]} == {1.0}
    kept = min(est, key=lambda k: (est[k], list(est).index(k)))
    assert rep_d["crossbar_share"] == _share(kept) < 1.0
    assert rep_d["crossbar_fill"] == ("+fill" in kept) is False
    assert rep_1["crossbar_share"] == 1.0 and rep_1["crossbar_fill"] is False
    assert math.isclose(rep_d["noc_dataflow"]["message_order_estimated_ns"], est[kept], abs_tol=0.1)
    assert rep_d["crossbars_used"] < rep_1["crossbars_used"]
    assert sim_d.latency_ns < 0.9 * sim_1.latency_ns


def test_a_share_caps_the_crossbars_replication_buys():
    """With the single share 0.5, replication stops where half the chip's crossbars are spent
    (each replica counted at the crossbars it leaves unusable on its core, at least its own)."""
    model = build_model("vgg8", input_size=32)
    rep, _, err = _run(model, CompileOptions(crossbar_shares=(0.5,), fill_shares=()))
    assert err <= 1e-3
    assert rep["crossbar_share"] == 0.5
    assert rep["plan_estimates_ns"] and {_share(k) for k in rep["plan_estimates_ns"]} == {0.5}
    assert rep["crossbars_used"] <= 0.5 * ARCH.total_crossbars


def test_throughput_keeps_one_crossbar_share_and_the_fill_share(refused_compile):
    """Throughput mode keeps one crossbar share, 1 (measured with the latency shares in pipeline
    4: vgg8 arch-b 336 -> 291 inferences/s, three cases 4.5-5.7 % higher), and the fill share
    (googlenet arch-a 57.3 -> 76.7 inferences/s); shares must be distinct and in (0, 1], a
    one-line user error otherwise, and a compile that fails writes nothing."""
    tp = CompileOptions(mode="throughput", pipeline=4)
    assert (tp.crossbar_shares, tp.fill_shares) == ((1.0,), FILL_SHARES)
    assert CompileOptions().crossbar_shares == CROSSBAR_SHARES_LATENCY
    assert CompileOptions().fill_shares == FILL_SHARES
    assert CROSSBAR_SHARES_LATENCY[0] == 1.0
    for bad in [(1.0, 1.0), (0.0,), (1.5,), ()]:
        with pytest.raises(RaptorError, match="crossbar shares must be distinct numbers"):
            CompileOptions(crossbar_shares=bad)
    for bad in [(0.9, 0.9), (0.0,), (2.0,)]:
        with pytest.raises(RaptorError, match="fill shares must be distinct numbers"):
            CompileOptions(fill_shares=bad)
    assert CompileOptions(fill_shares=[]).fill_shares == ()
    err = refused_compile("--pim-crossbar-shares", "1", "0")
    assert (
        err == "raptor: error: crossbar shares must be distinct numbers in (0, 1], got [1.0, 0.0]\n"
    )


def test_a_fill_share_buys_replicas_of_the_slowest_layer():
    """choose_replication with `fill_scale`: after the time cut per crossbar has spent 0.6 of the
    crossbars, the rest buys replicas of the slowest layer, one at a time: every layer keeps its
    replicas, the extra ones go to the layer that is slowest when each is bought, and buying stops
    at the first slowest layer that no longer fits (or has a replica per pixel)."""
    from raptor.compiler import _load
    from raptor.spatial.build import build_spatial
    from raptor.spatial.cost import plan_lane_ns
    from raptor.spatial.ir import ComputeNode, LayerKind, NodeKind
    from raptor.spatial.passes import spatial_passes
    from raptor.spatial.planning import (
        SpatialPlanningPass,
        _effective_crossbars,
        choose_replication,
    )
    from raptor.spatial.tiling import gemm_slices

    opts = CompileOptions()
    sg = build_spatial(_load(build_model("vgg8", input_size=32)), ARCH.element_bytes, 128)
    for p in spatial_passes(opts):
        if isinstance(p, SpatialPlanningPass):
            break
        sg = p.apply(ARCH, sg)
    base, _ = choose_replication(ARCH, sg, 0.6, True, True)
    fill, _ = choose_replication(ARCH, sg, 0.6, True, True, fill_scale=1.0)
    cost = {}
    for ly in sg.layers:
        if ly.kind == LayerKind.GEMM:
            _, slices = gemm_slices(ARCH, ly.rows, ly.cols, ly.row_groups)
            s = slices[0]
            probe = ComputeNode(
                0, ly.index, NodeKind.MVM, 0, 1, s.c0, s.c1, s.r0, s.r1, s.row_group
            )
            xb = sum(_effective_crossbars(ARCH, sl.crossbars) for sl in slices)
            cost[ly.index] = (plan_lane_ns(ARCH, ly, probe), ly.out_pixels, xb)

    def time(i, r):
        t, p, _ = cost[i]
        return t * math.ceil(p / r)

    assert all(fill[i] >= base[i] for i in base) and sum(fill.values()) > sum(base.values())
    reps = dict(base)
    left = ARCH.total_crossbars - sum(cost[i][2] * r for i, r in reps.items())
    while True:  # replay: the slowest layer gets the next replica while it fits
        i = max(cost, key=lambda i: time(i, reps[i]))
        if cost[i][2] > left or reps[i] >= cost[i][1]:
            break
        reps[i] += 1
        left -= cost[i][2]
    assert reps == fill
