"""pimcomp: partitioning, replication (pinned by hand), first-fit mapping, and end-to-end values
of the HT and LL schedules against onnxruntime on toy networks (the default models, both
architectures and modes: tests/suite/test_default_matrix.py)."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))
from toy import (  # noqa: E402
    ARCH_TINY,
    OnnxBuilder,
    max_rel_err,
    reference,
    toy_convnet,
    toy_inception,
    toy_resnet,
)

from raptor.arch import load_arch
from raptor.compiler import compile_model
from raptor.errors import PassFailedError
from raptor.options import CompileOptions
from raptor.pimcomp.mapping import core_lists, first_fit
from raptor.pimcomp.partition import ArrayGroup, column_parts, replica_ags
from raptor.pimcomp.replication import _StdMaxHeap, balance, uniform, w0h0
from raptor.sim import simulate
from raptor.spatial.ir import Layer, LayerKind, TensorView

TINY = load_arch(str(ARCH_TINY))  # 8 cores x 8 crossbars; 16 logical weight columns per crossbar


def _gemm(i: int, rows: int, cols: int, hw: int) -> Layer:
    return Layer(
        i,
        f"L{i}",
        LayerKind.GEMM,
        (TensorView(f"in{i}", rows, hw, hw, 0, rows),),
        TensorView(f"out{i}", cols, hw, hw, 0, cols),
        weight=np.zeros((rows, cols), np.float32),
    )


def _net() -> list[Layer]:
    # conv 27x64 (4 xb, 16 windows), conv 576x32 (10 xb, 4 windows), FC 256x10 (2 xb)
    return [_gemm(0, 27, 64, 4), _gemm(1, 576, 32, 2), _gemm(2, 256, 10, 1)]


def test_partition_row_tiles_and_agp():
    ags = replica_ags(TINY, _gemm(0, 300, 40, 2), 0)
    assert [(a.r0, a.r1, a.crossbars) for a in ags] == [(0, 128, 3), (128, 256, 3), (256, 300, 3)]
    # 200 columns = 13 crossbars per AG > 8 per core: two column parts
    assert column_parts(TINY, 300, 200) == [(0, 112), (112, 200)]
    wide = replica_ags(TINY, _gemm(0, 300, 200, 2), 1)
    assert len(wide) == 6 and {a.part for a in wide} == {0, 1}
    assert [a.crossbars for a in wide if a.index == 0] == [7, 6]


def test_balance_by_hand():
    # budget 64 - 2 (FC) = 62, stop at <= 31; heap on ceil(windows / r) with std::priority_queue's
    # tie order: L0 16->8->6->4 (budget 50); the tie 4/4 goes to L1 (at the heap's top since L0
    # was pushed below it): L1 -> 2 (40); L0 4 -> 4 (rep 5), -> 3 (rep 6), -> 3 (rep 7, 28): stop
    assert balance(TINY, _net()) == {0: 7, 1: 2, 2: 1}


def test_balance_tie_order_is_std_priority_queue():
    # libstdc++'s std::priority_queue pops equal keys in heap order, not by index: pushing four
    # keys of 8 then popping gives 0, 2, 1, 3 (checked with a C++ program); so does ours
    heap = _StdMaxHeap()
    for i in range(4):
        heap.push((8, i))
    assert [heap.pop()[1] for _ in range(4)] == [0, 2, 1, 3]
    # four convs of 8 windows and 1 crossbar, FC of 4 on one core of 8: budget 4, stop at <= 2,
    # so two copies go out: to L0, then (after pushing L0 back at 4) to L2, not L1
    net = [_gemm(i, 27, 16, 2) for i in range(4)] + [_gemm(4, 512, 10, 1)]
    one_core = replace(TINY, cores_per_chip=1, core_layout=(1, 1))
    assert balance(one_core, net) == {0: 2, 1: 1, 2: 2, 3: 1, 4: 1}


def test_conv_with_one_window_is_a_conv():
    # a conv whose output is 1x1 stays a conv (released: by op type), so it is in the heap and in
    # the uniform count; without `fc_layers` a one-pixel GEMM counts as FC
    net = [_gemm(0, 27, 16, 4), _gemm(1, 576, 32, 1), _gemm(2, 256, 10, 1)]  # 1, 10, 2 xb
    assert uniform(TINY, net) == {0: 16, 1: 1, 2: 1}  # floor((64 - 12) / 1 / 1.2) = 43, cap 16
    assert uniform(TINY, net, fc_layers={2}) == {0: 4, 1: 1, 2: 1}  # floor(62 / 11 / 1.2) = 4


def test_w0h0_and_uniform_by_hand():
    # baseline = 2nd-smallest windows = 16: ratios 1, 1; scale floor(62 / 14 / 1.2) = 3
    assert w0h0(TINY, _net()) == {0: 3, 1: 3, 2: 1}
    assert uniform(TINY, _net()) == {0: 3, 1: 3, 2: 1}


def test_first_fit_and_core_lists():
    ags = [ArrayGroup(0, r, 0, 0, 0, 1, 0, 1, xb) for r, xb in enumerate([5, 4, 3, 4])]
    placed = first_fit(TINY, ags)
    assert [a.core for a in placed] == [0, 1, 0, 1]
    lists = core_lists(placed[::-1], TINY.core_count)
    assert [a.replica for a in lists[0]] == [0, 2]


def _check(model, arch, opts, shape, n=None):
    res = compile_model(model, arch, opts)
    rng = np.random.default_rng(3)
    ins = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(n or opts.pipeline)]
    rep = simulate(res.program, arch, opts.mode, opts.pipeline, ins)
    return res, rep, ins


@pytest.mark.parametrize("model", [toy_convnet, toy_resnet, toy_inception])
@pytest.mark.parametrize("method", ["balance", "W0H0", "uniform"])
@pytest.mark.parametrize("mode,pipeline", [("latency", 1), ("throughput", 3)])
def test_toy_values(model, method, mode, pipeline):
    m = model()
    opts = CompileOptions(mode=mode, pipeline=pipeline, compiler="pimcomp", replication=method)
    res, rep, ins = _check(m, TINY, opts, (1, 3, 8, 8))
    ref = reference(m, ins)
    errs = [
        max_rel_err(next(iter(o.values())), next(iter(r.values())))
        for o, r in zip(rep.outputs, ref)
    ]
    assert max(errs) < 1e-3
    r = res.report
    assert r["compiler"] == "pimcomp" and r["schedule"] == ("LL" if mode == "latency" else "HT")
    assert r["instructions_total"] == sum(r["instructions_per_core"])


def _toy_wide(hw: int = 64, c: int = 16):
    """Conv -> Conv -> Conv, Add with the first conv, Relu, MaxPool, GAP, Gemm at 64 x 64 x 16:
    each Add input is 128 KiB, so an LL core that kept every received pixel would need
    2 x 128 KiB for the Add alone (the 256 KiB of arch-tiny)."""
    b = OnnxBuilder(1)
    x = b.conv("x", 3, c)
    y = b.conv(x, c, c)
    y = b.conv(y, c, c, relu=False)
    x = b.node("Relu", [b.node("Add", [x, y])])
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    return b.model([1, 3, hw, hw], b.gemm(x, c, 10), [1, 10])


def test_ll_frees_pixels_no_longer_needed():
    m = _toy_wide()
    opts = CompileOptions(mode="latency", pipeline=1, compiler="pimcomp")
    res, rep, ins = _check(m, TINY, opts, (1, 3, 64, 64))
    got = next(iter(rep.outputs[0].values()))
    assert max_rel_err(got, next(iter(reference(m, ins)[0].values()))) < 1e-3
    peak = res.report["local_memory_peak_bytes"]
    cap = TINY.core.local_memory.memory_size
    # without freeing (every received pixel kept) the Add core alone needs 2 x 128 KiB + more
    # (341 632 bytes on core 3 before pixel lifetimes); with them every core stays far below
    assert max(peak) <= cap // 2, peak
    assert len(peak) == TINY.core_count


def test_ll_overflow_names_core_and_bytes(tmp_path):
    cfg = json.loads(ARCH_TINY.read_text())
    cfg["core"]["local_memory"]["memory_size"] = 4096
    path = tmp_path / "arch-tiny-4k.json"
    path.write_text(json.dumps(cfg))
    opts = CompileOptions(mode="latency", pipeline=1, compiler="pimcomp")
    with pytest.raises(
        PassFailedError, match=r"local memory overflow on core \d+: .* needs \d+ bytes"
    ):
        compile_model(_toy_wide(32, 16), load_arch(str(path)), opts)
