"""Row groups of the layers of few pixels as a planning candidate
(`--pim-small-layer-group-tiles`, raptor.options.SMALL_LAYER_PIXELS and
SMALL_LAYER_GROUP_TILES_LATENCY): a planned latency compile plans once with every layer in row
groups of ROW_GROUP_TILES_LATENCY tiles and once each with the layers of at most
SMALL_LAYER_PIXELS output pixels in groups of 2 and of 1, and keeps the plan that ends first (or
the fastest finalist)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))
from toy import OnnxBuilder  # noqa: E402

from raptor.arch import load_arch
from raptor.compiler import compile_model
from raptor.errors import RaptorError
from raptor.frontend import load_graph
from raptor.options import SMALL_LAYER_PIXELS, CompileOptions
from raptor.sim import simulate
from raptor.spatial.build import build_spatial
from raptor.spatial.tiling import TilingPass

ARCH = load_arch("arch-a")


def _model(hw: int = 14) -> onnx.ModelProto:
    """Two convs at hw x hw (3 -> 64, then 576 rows: 5 row tiles), a stride-2 conv to (hw/2)^2
    pixels and another there (576 rows each), GAP, Gemm."""
    b = OnnxBuilder(0)
    x = b.conv(b.conv("x", 3, 64), 64, 64)
    x = b.conv(b.conv(x, 64, 64, stride=2), 64, 64)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model([1, 3, hw, hw], b.gemm(x, 64, 10), [1, 10])


def test_small_layers_take_their_own_group_size():
    sg = build_spatial(load_graph(_model()), ARCH.element_bytes, ARCH.matrix.rows)
    pixels = [ly.output.pixels for ly in sg.layers if ly.cols]
    assert SMALL_LAYER_PIXELS == 49 and 196 in pixels and 49 in pixels
    for small, want in ((0, 2), (2, 3), (1, 5)):  # 5 tiles: groups of 3 -> 2, of 2 -> 3
        tiled = TilingPass(group_tiles=3, small_tiles=small).apply(ARCH, sg)
        groups = {ly.output.pixels: ly.row_groups for ly in tiled.layers if ly.rows == 576}
        assert groups == {196: 2, 49: want}


def test_options_defaults_and_errors():
    assert CompileOptions().small_layer_group_tiles == (0, 2, 1)
    for o in (
        CompileOptions(mode="throughput", pipeline=2),
        CompileOptions(disable_spatial_planning=True),
        CompileOptions(disable_noc_dataflow=True),
        CompileOptions(compiler="pimcomp"),
    ):
        assert o.small_layer_group_tiles == (0,)
    for bad in ((), (0, 0), (-1,)):
        with pytest.raises(RaptorError, match="small-layer group tiles must be distinct"):
            CompileOptions(small_layer_group_tiles=bad)


def test_the_small_layer_plans_compete_and_the_kept_one_is_the_fastest():
    """The 7x7 convs (5 tiles) in groups of 2 make a second set of candidates, labelled
    "/small2", planned with the first tiling's choice of chunks; the kept program is the one that
    simulates fastest among the finalists, which come from both tilings, and never slower than
    the estimate's best of the first tiling alone. A model whose small layers fit one group
    either way plans once."""
    model = _model()
    both = compile_model(model, ARCH, CompileOptions(small_layer_group_tiles=(0, 2)))
    one = compile_model(model, ARCH, CompileOptions(small_layer_group_tiles=(0,)))
    est_both, est_one = both.report["plan_estimates_ns"], one.report["plan_estimates_ns"]
    small = {k: v for k, v in est_both.items() if "/small2" in k}
    assert small and not any("/small" in k for k in est_one)
    # (the delay rounds, compiler._delay_repack, repack whichever plan won, so they differ)
    alike = lambda e: {k: v for k, v in e.items() if k not in small and "_delay" not in k}  # noqa: E731
    assert alike(est_both) == alike(est_one)
    firsts = {k.split("@")[0].split("/")[0].split("_")[0] for k in small}
    assert len(firsts) == 1  # one choice of chunks
    assert min(est_both.values()) <= min(est_one.values())
    fin = both.report.get("plan_finalists_ns", {})
    kept = simulate(both.program, ARCH, "latency", 1).latency_ns
    assert not fin or kept == min(fin.values())
    assert both.report["plan_kept"] in est_both

    # groups of 3 tiles are what every layer has: the second tiling changes nothing, plans nothing
    same = compile_model(model, ARCH, CompileOptions(small_layer_group_tiles=(0, 3))).report
    assert same["plan_estimates_ns"] == est_one
    # by default the 1-tile groups make a third set of candidates
    est_all = compile_model(model, ARCH, CompileOptions()).report["plan_estimates_ns"]
    assert any("/small1" in k for k in est_all)
    assert {k for k in small if "_delay" not in k} <= est_all.keys()


def test_cli_option_is_recorded(tmp_path, capsys):
    from raptor.cli import EXIT_USER_ERROR, main

    path = tmp_path / "m.onnx"
    onnx.save(_model(hw=8), path)
    argv = ["compile", str(path), "--arch", "arch-a", "--out", str(tmp_path / "o")]
    assert main([*argv, "--pim-small-layer-group-tiles", "0", "1"]) == 0
    target = json.loads((tmp_path / "o" / "pim" / "target.json").read_text())
    assert target["options"]["small_layer_group_tiles"] == [0, 1]
    # `raptor inspect` names the kept plan and the mvmuls against the bound's minimum
    report = json.loads((tmp_path / "o" / "compile_report.json").read_text())
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    kept, ratio = report["plan_kept"], report["mvm_vs_machine_min"]
    assert f"plan           {kept}, the kept one of {len(report['plan_estimates_ns'])}" in out
    assert f"= {ratio:.3f}x the fewest any program needs" in out and ratio >= 1
    capsys.readouterr()
    assert main([*argv, "--pim-small-layer-group-tiles", "2", "2"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "small-layer group tiles must be distinct" in err[0]


def test_a_memo_hit_replays_the_small_layer_tiling(tmp_path, monkeypatch):
    """The recipe keeps the row-group size of the small layers: a compile that finds it writes
    the program of the full comparison without comparing again."""
    import raptor.compiler as compiler
    from raptor.frontend.cache import CachedModel
    from raptor.spatial.plan_memo import plan_memo

    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    model = CachedModel(path, tmp_path / "common", "code-v1")
    # only the 2-tile groups: the recipe must carry them for the hit to rebuild this plan
    opts = CompileOptions(small_layer_group_tiles=(2,))
    fresh = compile_model(model, ARCH, opts)
    recipe = plan_memo(model, ARCH, opts).get()
    assert recipe is not None and recipe.small_tiles == 2
    monkeypatch.setattr(compiler, "_trial", lambda *a: pytest.fail("compared again"))
    hit = compile_model(model, ARCH, opts)
    assert [c.tobytes() for c in hit.program.cores] == [c.tobytes() for c in fresh.program.cores]
    assert hit.report["plan_kept"] == fresh.report["plan_kept"] == recipe.label
    assert "/small2" in recipe.label  # the only tiling


def test_throughput_mode_takes_the_option_too():
    """Asked for in throughput mode, the second tiling competes under that mode's rule (a
    shorter estimate and a shorter core span); the program computes onnxruntime's values."""
    import numpy as np
    from toy import max_rel_err, reference

    model = _model(hw=8)
    opts = CompileOptions(mode="throughput", pipeline=2, small_layer_group_tiles=(0, 2))
    res = compile_model(model, ARCH, opts)
    assert any("/small2" in k for k in res.report["plan_estimates_ns"])
    assert res.report["plan_kept"] in res.report["plan_estimates_ns"]
    rng = np.random.default_rng(0)
    ins = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(2)]
    rep = simulate(res.program, ARCH, "throughput", 2, ins)
    for out, ref in zip(rep.outputs, reference(model, ins)):
        for k, want in ref.items():
            assert max_rel_err(np.asarray(out[k]).reshape(want.shape), want) <= 1e-3
