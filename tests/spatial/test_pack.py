"""Packed remainder tiles (`--pim-pack-pixels`, raptor.options.PACK_PIXELS): a weight layer's short
last row tile (at most half a crossbar's rows) holds k copies of its weights block-diagonally, so
one mvmul serves k pixels' remainders (spatial/tiling.py pack_factor; the line-buffer lowering
copies the k inputs side by side, the per-pixel lowering uses the first block)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))
from toy import OnnxBuilder, max_rel_err, reference  # noqa: E402

from raptor.arch import load_arch
from raptor.compiler import compile_model
from raptor.errors import RaptorError
from raptor.isa.opcodes import Opcode
from raptor.options import PACK_PIXELS, CompileOptions
from raptor.sim import simulate
from raptor.spatial.tiling import gemm_slices, pack_factor, tile_crossbars, tile_pack

ARCH = load_arch("arch-a")  # 128x128 crossbars, 16 weights per crossbar row, 96 per core


def test_pack_factor():
    assert ARCH.matrix.rows == 128 and ARCH.weights_per_crossbar_row == 16
    assert ARCH.crossbars_per_core == 96
    assert pack_factor(ARCH, 147, 64, 1, 2) == 2  # conv1: 128 + 19 rows
    assert pack_factor(ARCH, 147, 64, 1, 8) == 6  # 6 x 19 = 114 rows fit a crossbar, 7 do not
    assert pack_factor(ARCH, 576, 64, 2, 8) == 2  # a 3x3 conv of 64 channels: 4 x 128 + 64
    assert pack_factor(ARCH, 64, 64, 1, 8) == 2  # one tile of 64 rows
    assert pack_factor(ARCH, 1152, 64, 1, 8) == 1  # 9 full tiles
    assert pack_factor(ARCH, 128 + 65, 64, 1, 8) == 1  # more than half a crossbar
    assert pack_factor(ARCH, 147, 64, 1, 1) == 1
    # its row group must still fit one core: 5 full tiles of 16 crossbars leave 16 for the pack
    assert pack_factor(ARCH, 5 * 128 + 16, 256, 1, 8) == 1
    assert pack_factor(ARCH, 5 * 128 + 16, 256, 2, 8) == 4  # groups of 3 tiles: 32 + 4 x 16
    assert tile_pack(ARCH, 128, 147, 6) == 6 and tile_pack(ARCH, 0, 128, 6) == 1
    assert tile_crossbars(ARCH, 128, 147, 64, 6) == 6 * 4
    assert [s.crossbars for s in gemm_slices(ARCH, 147, 64, 1, 2)[1]] == [4 + 8]
    assert [s.crossbars for s in gemm_slices(ARCH, 147, 64, 1)[1]] == [4 + 4]


def test_options():
    assert PACK_PIXELS == 2 and CompileOptions().pack_pixels == (2,)
    assert CompileOptions(mode="throughput", pipeline=4).pack_pixels == (2, 3)
    assert CompileOptions(disable_spatial_planning=True).pack_pixels == (2,)
    assert CompileOptions(disable_noc_dataflow=True).pack_pixels == (1,)
    assert CompileOptions(compiler="pimcomp").pack_pixels == (1,)
    assert CompileOptions(pack_pixels=3).pack_pixels == (3,)
    assert CompileOptions(pack_pixels=[2, 1]).pack_pixels == (2, 1)
    for bad in (0, (), (2, 2), (2, -1)):
        with pytest.raises(RaptorError, match="pack pixels must be distinct numbers >= 1"):
            CompileOptions(pack_pixels=bad)


def _model(hw: int = 16, out_conv: bool = True) -> onnx.ModelProto:
    """conv1-like 7x7 stride-2 conv (147 rows), a 3x3 conv of 16 channels (144 rows), a 1x1
    conv of 16 channels (16 rows, one short tile), GAP, Gemm; or the first conv alone, its
    output the graph's (`out_conv` False)."""
    b = OnnxBuilder(0)
    x = b.conv("x", 3, 16, k=7, stride=2, pad=3)
    if not out_conv:
        return b.model([1, 3, hw, hw], x, [1, 16, hw // 2, hw // 2])
    x = b.conv(b.conv(x, 16, 16), 16, 8, k=1, pad=0)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model([1, 3, hw, hw], b.gemm(x, 8, 10), [1, 10])


def _mvmuls(prog) -> int:
    return sum(int((c["opcode"] == Opcode.MVMUL).sum()) for c in prog.cores)


def _check(model, prog, mode: str, n: int, hw: int) -> None:
    rng = np.random.default_rng(1)
    ins = [{"x": rng.standard_normal((1, 3, hw, hw)).astype(np.float32)} for _ in range(n)]
    rep = simulate(prog, ARCH, mode, n, ins)
    for out, ref in zip(rep.outputs, reference(model, ins)):
        for k, want in ref.items():
            assert max_rel_err(np.asarray(out[k]).reshape(want.shape), want) <= 1e-4


@pytest.mark.parametrize("mode,n", [("latency", 1), ("throughput", 2)])
def test_packed_programs_compute_the_same_values_with_fewer_mvmuls(mode, n):
    """Every pack size computes onnxruntime's values; the packed layers' array groups are k
    block-diagonal copies of their tile; packing 2 pixels saves mvmuls."""
    model = _model()
    counts = {}
    for k in (1, 2, 6):
        # segments of at least two pixels: the 8-pixel rows in 8 one-pixel segments would make
        # every pack a pack of one (a pack never spans two steps)
        opts = CompileOptions(mode=mode, pipeline=n, pack_pixels=k, row_segment_pixels=2)
        res = compile_model(model, ARCH, opts)
        prog = res.program
        _check(model, prog, mode, n, 16)
        counts[k] = _mvmuls(prog)
        packs = res.report["remainder_packs"]  # the three convs, k pixels each (6 <= 128 // 19)
        assert list(packs.values()) == ([] if k == 1 else [k] * 3)
        shapes = {m.shape for m in prog.weight_matrices}
        if k == 1:
            assert (19, 16) in shapes and (16, 8) in shapes
            continue
        # conv1's 19-row remainder k times (16 output channels each), the 1x1 conv's 16 rows
        # min(k, 8) times, the 3x3 conv's 16-row remainder likewise
        assert (k * 19, k * 16) in shapes and (19, 16) not in shapes
        assert (min(k, 8) * 16, min(k, 8) * 8) in shapes
        big = next(m for m in prog.weight_matrices if m.shape == (k * 19, k * 16))
        block = big[:19, :16]
        assert np.array_equal(big, np.kron(np.eye(k, dtype=np.float32), block))
    assert counts[2] < counts[1] and counts[6] < counts[1]


def test_the_per_pixel_lowering_uses_the_first_block():
    """A conv read from and written to host memory without line buffers is lowered pixel by
    pixel: its packed remainder serves one pixel per mvmul, and still computes the values."""
    model = _model(out_conv=False)
    opts = CompileOptions(disable_line_buffer=True, disable_spatial_planning=True)
    res = compile_model(model, ARCH, opts)
    assert (2 * 19, 2 * 16) in {m.shape for m in res.program.weight_matrices}
    assert _mvmuls(res.program) == 2 * 8 * 8  # two tiles per pixel
    _check(model, res.program, "latency", 1, 16)


def test_cli_option(tmp_path, capsys):
    import json

    from raptor.cli import EXIT_USER_ERROR, main

    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    argv = ["compile", str(path), "--arch", "arch-a", "--out", str(tmp_path / "o")]
    assert main([*argv, "--pim-pack-pixels", "3"]) == 0
    target = json.loads((tmp_path / "o" / "pim" / "target.json").read_text())
    assert target["options"]["pack_pixels"] == [3]
    report = json.loads((tmp_path / "o" / "compile_report.json").read_text())
    assert list(report["remainder_packs"].values()) == [3, 3, 3]
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "o")]) == 0
    names = ", ".join(report["remainder_packs"])
    want = f"packed tiles   3 layers' short last row tiles serve 3 pixels per mvmul ({names})"
    assert want in capsys.readouterr().out
    capsys.readouterr()
    assert main([*argv, "--pim-pack-pixels", "0"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pack pixels must be distinct numbers >= 1" in err[0]


def test_pack_sizes_compete_as_tilings(tmp_path, monkeypatch):
    """Each further pack size plans every replication again ("/pack<K>" candidates, with the
    first size's choice of chunks) and its plan is kept only when it ends strictly first (and,
    pipelined, spans less); a size that packs no layer differently plans nothing; the plan memo
    keeps the size, so a hit rebuilds the same program without comparing again."""
    import raptor.compiler as compiler
    from raptor.frontend.cache import CachedModel
    from raptor.spatial.plan_memo import plan_memo

    model = _model()
    opts = CompileOptions(mode="throughput", pipeline=2, pack_pixels=(2, 6))
    both = compile_model(model, ARCH, opts)
    one = compile_model(model, ARCH, CompileOptions(mode="throughput", pipeline=2, pack_pixels=2))
    est = both.report["plan_estimates_ns"]
    six = {k: v for k, v in est.items() if k.endswith("/pack6") or "/pack6_" in k}
    # (the delay rounds, compiler._delay_repack, repack whichever plan won, so they differ)
    alike = lambda e: {k: v for k, v in e.items() if k not in six and "_delay" not in k}  # noqa: E731
    assert six and alike(est) == alike(one.report["plan_estimates_ns"])
    assert both.report["plan_kept"] in est
    kept_six = "/pack6" in both.report["plan_kept"]
    assert set(both.report["remainder_packs"].values()) == ({6} if kept_six else {2})
    _check(model, both.program, "throughput", 2, 16)
    # at most 128 // 19 = 6 pixels for conv1, 128 // 16 = 8 for the others: 9 packs as 8 does
    same = compile_model(model, ARCH, CompileOptions(pack_pixels=(8, 9)))
    assert not any("/pack" in k for k in same.report["plan_estimates_ns"])
    assert list(same.report["remainder_packs"].values()) == [6, 8, 8]

    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    cached = CachedModel(path, tmp_path / "common", "code-v1")
    opts = CompileOptions(pack_pixels=(1, 2))  # the second size must win to be kept
    fresh = compile_model(cached, ARCH, opts)
    recipe = plan_memo(cached, ARCH, opts).get()
    assert recipe is not None and recipe.label == fresh.report["plan_kept"]
    assert recipe.pack == (2 if "/pack2" in recipe.label else 0)
    monkeypatch.setattr(compiler, "_trial", lambda *a: pytest.fail("compared again"))
    hit = compile_model(cached, ARCH, opts)
    assert [c.tobytes() for c in hit.program.cores] == [c.tobytes() for c in fresh.program.cores]


def test_lane_cost_sees_the_pack_in_every_row_group():
    """The planner's lane estimate charges a packed tile 1/k of an mvmul plus the copy of its
    input, also in a later row group (576 rows in groups of 2 and 3 tiles: the packed 64-row
    tile is the second group's last)."""
    from dataclasses import replace

    from raptor.frontend import load_graph
    from raptor.spatial.build import build_spatial
    from raptor.spatial.cost import _vec_ns, lane_ns, mvm_ns
    from raptor.spatial.ir import ComputeNode, NodeKind

    b = OnnxBuilder(0)
    model = b.model([1, 3, 8, 8], b.conv(b.conv("x", 3, 64), 64, 64), [1, 64, 8, 8])
    sg = build_spatial(load_graph(model), ARCH.element_bytes, ARCH.matrix.rows)
    layer = next(ly for ly in sg.layers if ly.rows == 576)
    one, two = (replace(layer, row_groups=2, pack=k) for k in (1, 2))
    for r0, r1, group in ((0, 256, 0), (256, 576, 1)):
        node = ComputeNode(0, layer.index, NodeKind.MVM, 0, 1, 0, 64, r0, r1, group)
        saved = lane_ns(ARCH, one, node) - lane_ns(ARCH, two, node)
        want = mvm_ns(ARCH) / 2 - _vec_ns(ARCH, 64) if r1 == 576 else 0.0
        assert saved == pytest.approx(want)
