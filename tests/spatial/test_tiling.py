"""Tiling counts by hand, and the model-too-big error."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))
from toy import ARCH_TINY, toy_convnet  # noqa: E402

from raptor.arch import load_arch
from raptor.errors import PassFailedError
from raptor.frontend import load_graph
from raptor.spatial.build import build_spatial
from raptor.spatial.tiling import TilingPass, gemm_slices, split_range


def test_conv3x3_64_on_arch_a_is_one_slice_of_5_tiles():
    arch = load_arch("arch-a")
    groups, slices = gemm_slices(arch, 3 * 3 * 64, 64)
    assert groups == 1 and len(slices) == 1
    # 576 rows -> 5 row tiles; 64 weight columns -> 4 crossbars of 16 columns each
    assert slices[0].crossbars == 5 * 4


def test_conv3x3_512_on_arch_a_slices_fit_one_core():
    arch = load_arch("arch-a")
    groups, slices = gemm_slices(arch, 3 * 3 * 512, 512)
    assert groups == 1
    tiles = math.ceil(4608 / 128)  # 36
    assert all(s.crossbars <= 96 for s in slices)
    assert slices[0].crossbars == tiles * 2  # 96 // 36 = 2 groups of 16 columns -> 32 columns
    assert len(slices) == 16


def test_fc_8192_on_arch_a_and_row_groups_on_arch_c():
    a = load_arch("arch-a")
    groups, slices = gemm_slices(a, 8192, 1024)
    assert groups == 1 and len(slices) == 64 and slices[0].crossbars == 64
    c = load_arch("arch-c")
    groups, slices = gemm_slices(c, 8192, 1024)
    # 512-row crossbars: 16 row tiles > 8 crossbars per core -> 2 row groups of 8 tiles;
    # 1024 columns / 8 slices per weight = 128 weight columns per crossbar
    assert groups == 2
    assert {s.row_group for s in slices} == {0, 1}
    assert all(s.crossbars == 8 for s in slices) and len(slices) == 16


def test_split_range_even():
    assert split_range(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert split_range(2, 5) == [(0, 1), (1, 2)]


def test_tiling_pass_verifies():
    arch = load_arch(str(ARCH_TINY))
    sg = TilingPass().apply(arch, build_spatial(load_graph(toy_convnet()), arch.element_bytes))
    sg.verify()
    assert "layer" in sg.dump()


def test_model_too_big_names_crossbars():
    from raptor.models import build_model

    arch = load_arch(str(ARCH_TINY))
    g = load_graph(build_model("vgg8", input_size=32))
    with pytest.raises(PassFailedError, match=r"needs \d+ crossbars.*has 64"):
        TilingPass().apply(arch, build_spatial(g, arch.element_bytes))
