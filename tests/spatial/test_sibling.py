"""Sibling-GEMM merging (spatial/sibling.py): the reduce 1x1 convs reading one input become one
GEMM, values still match onnxruntime, and the input is loaded from host memory once less."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))

from toy import ARCH_TINY, OnnxBuilder, max_rel_err, reference  # noqa: E402


def _inception_block(hw: int = 8):
    b = OnnxBuilder(5)
    x = b.conv("x", 3, 8)
    p = b.conv(x, 8, 4, k=1, pad=0)  # into a concat slot: not merged
    q = b.conv(b.conv(x, 8, 6, k=1, pad=0), 6, 6)  # 3x3 reduce -> 3x3
    r = b.conv(b.conv(x, 8, 3, k=1, pad=0), 3, 4, k=5, pad=2)  # 5x5 reduce -> 5x5
    y = b.node("Concat", [p, q, r], axis=1)
    return b.model([1, 3, hw, hw], y, [1, 14, hw, hw])


@pytest.mark.parametrize("plan", [True, False])
def test_sibling_merge_values_and_loads(plan):
    from dataclasses import replace

    from raptor.arch import load_arch
    from raptor.compiler import compile_model
    from raptor.options import CompileOptions
    from raptor.sim import simulate

    arch = load_arch(str(ARCH_TINY))
    model = _inception_block()
    opts = CompileOptions(disable_spatial_planning=not plan)
    rng = np.random.default_rng(1)
    ins = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}]
    ref = reference(model, ins)
    res = compile_model(model, arch, opts)
    assert res.report["host_load_bytes"] > 0
    out = simulate(res.program, arch, "latency", 1, ins).outputs
    assert max_rel_err(next(iter(out[0].values())), next(iter(ref[0].values()))) < 1e-3
    merged = [n for n in res.report["host_load_bytes_per_layer"] if "+" in n]
    assert len(merged) == 1  # the two reduce convs, not the concat-slot 1x1
    plain = compile_model(model, arch, replace(opts, disable_sibling_merge=True)).report
    assert not [n for n in plain["host_load_bytes_per_layer"] if "+" in n]
    # the 8-channel 8x8 input is read once less (2 bytes per element)
    assert res.report["host_load_bytes"] <= plain["host_load_bytes"] - 8 * 8 * 8 * 2
