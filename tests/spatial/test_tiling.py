"""Tiling counts by hand, and the model-too-big error."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))
from toy import ARCH_TINY, toy_convnet  # noqa: E402

from raptor.arch import load_arch
from raptor.errors import PassFailedError
from raptor.frontend import load_graph
from raptor.spatial.build import build_spatial
from raptor.spatial.tiling import TilingPass, gemm_slices, row_groups, split_range


def test_conv3x3_64_on_arch_a_is_one_slice_of_5_tiles():
    arch = load_arch("arch-a")
    groups, slices = gemm_slices(arch, 3 * 3 * 64, 64)
    assert groups == 1 and len(slices) == 1
    # 576 rows -> 5 row tiles; 64 weight columns -> 4 crossbars of 16 columns each
    assert slices[0].crossbars == 5 * 4


def test_conv3x3_512_on_arch_a_is_row_groups_of_full_width_tiles():
    arch = load_arch("arch-a")
    groups, slices = gemm_slices(arch, 3 * 3 * 512, 512)
    # 36 row tiles of 128 x 512 (32 crossbars each): 3 per core -> 12 row groups, one slice
    assert groups == 12 and len(slices) == 12
    assert all(s.c0 == 0 and s.c1 == 512 and s.crossbars == 96 for s in slices)
    assert [s.row_group for s in slices] == list(range(12))


def test_fc_8192_on_arch_a_and_arch_c_row_groups():
    a = load_arch("arch-a")
    groups, slices = gemm_slices(a, 8192, 1024)
    # one 128 x 1024 tile = 64 crossbars: one tile per core, 64 row groups of the full width
    assert groups == 64 and len(slices) == 64 and slices[0].crossbars == 64
    c = load_arch("arch-c")
    groups, slices = gemm_slices(c, 8192, 1024)
    # 512-row crossbars of 128 weight columns: a 512 x 1024 tile is 8 crossbars = one core
    assert groups == 16 and all(s.crossbars == 8 and s.c1 == 1024 for s in slices)


def test_row_group_tiles_caps_the_tiles_of_a_group():
    """`group_tiles` (CompileOptions.row_group_tiles): at most that many row tiles per row group,
    never more than fit one core; the slices of the given groups cover every row once with the
    same crossbars."""
    arch = load_arch("arch-a")
    # 3x3x256 -> 256: 18 tiles of 16 crossbars, 6 fit a core
    assert row_groups(arch, 2304, 256) == 3
    assert [row_groups(arch, 2304, 256, t) for t in (0, 1, 3, 4, 6, 10)] == [3, 18, 6, 5, 3, 3]
    assert row_groups(arch, 576, 64, 3) == 2  # 5 tiles -> 3 + 2
    base = gemm_slices(arch, 2304, 256)[1]
    for groups in (3, 6, 18):
        n, slices = gemm_slices(arch, 2304, 256, groups)
        assert n == groups == len(slices)
        assert [(s.r0, s.r1) for s in slices][0][0] == 0 and slices[-1].r1 == 2304
        assert all(a.r1 == b.r0 for a, b in zip(slices, slices[1:]))
        assert max(s.r1 - s.r0 for s in slices) <= 128 * 18 // groups
        assert sum(s.crossbars for s in slices) == sum(s.crossbars for s in base)
    assert gemm_slices(arch, 2304, 256, 1)[0] == 3  # fewer groups than fit: the core limit wins
    sg = TilingPass(group_tiles=3).apply(
        arch, build_spatial(load_graph(toy_convnet()), arch.element_bytes)
    )
    for ly in sg.layers:
        if ly.rows:
            assert ly.row_groups == row_groups(arch, ly.rows, ly.cols, 3)


def test_reduce_links_root_takes_one_sum_and_the_last_group_adds_the_bias():
    """The row groups of a tree reduce into group 0, which receives only group 1's sum; groups
    1.. form a binary heap below it (no group adds more than two sums, the smaller subtree's
    first), and the last group, a leaf, adds the bias before sending its partial sum."""
    from dataclasses import replace

    from raptor.spatial.ir import ComputeNode, NodeKind, SpatialGraph, reduce_children

    arch = load_arch("arch-a")
    sg = TilingPass().apply(arch, build_spatial(load_graph(toy_convnet()), arch.element_bytes))
    ly = next(ly for ly in sg.layers if ly.rows)
    sg = replace(sg, layers=[replace(ly, row_groups=5) if x is ly else x for x in sg.layers])
    nodes = [
        ComputeNode(g, ly.index, NodeKind.MVM, 0, 1, 0, ly.cols, 0, ly.rows, g, 0, 1, core=10 + g)
        for g in range(5)
    ]
    graph = replace(sg, nodes=nodes)
    links = SpatialGraph.reduce_links(graph)
    # 0 <- 1; 1 <- 3, 2; 2 <- 4; root 0 stores
    assert links[0] == ((11,), -1)
    assert links[1] == ((13, 12), 10) and links[2] == ((14,), 11)
    assert links[3] == ((), 11) and links[4] == ((), 12)
    assert graph.bias_nodes() == {4}
    # a one-group layer's node adds its own bias
    single = [replace(ly, row_groups=1) if x.index == ly.index else x for x in sg.layers]
    assert replace(sg, layers=single, nodes=nodes[:1]).bias_nodes() == {0}
    for size in range(1, 40):
        kids = [reduce_children(g, size) for g in range(size)]
        assert sorted(k for ks in kids for k in ks) == list(range(1, size))  # one tree
        assert len(kids[0]) == min(1, size - 1) and max(map(len, kids)) <= 2
        assert not kids[-1]  # the bias group is a leaf


def test_classifier_of_a_flattened_map_puts_its_last_rows_at_the_root():
    """vgg8's fc0 reads 2x2 pixels x 512 channels flattened (rows in (h, w, c) order): its row
    groups take the row tiles last first, so group 0 (the tree's root) holds the rows of the
    last pixel and the last group (the bias leaf) the first ones; resnet18's classifier, whose
    one input pixel comes whole from the global pool, keeps its tiles in order. Either way every
    row is covered once per column slice (values: test_noc.py::test_noc_dataflow_values_*)."""
    from raptor.models import build_model
    from raptor.spatial.tiling import last_rows_at_root, make_nodes

    arch = load_arch("arch-a")
    for model, flipped in (("vgg8", True), ("resnet18", False)):
        g = load_graph(build_model(model, input_size=16 if model == "vgg8" else 32))
        sg = TilingPass().apply(arch, build_spatial(g, arch.element_bytes))
        fc = next(ly for ly in sg.layers if ly.name.endswith("fc0" if flipped else "fc"))
        assert fc.row_groups > 1 and last_rows_at_root(sg, fc) is flipped
        nodes = [n for n in make_nodes(sg, arch, {}, {}) if n.layer == fc.index]
        by_group = sorted((n.row_group, n.r0, n.r1) for n in nodes)
        assert len(by_group) == fc.row_groups
        starts = [r0 for _, r0, _ in by_group]
        assert starts == sorted(starts, reverse=flipped)
        assert sorted((r0, r1) for _, r0, r1 in by_group)[-1][1] == fc.rows
        assert (by_group[0][2] == fc.rows) is flipped and (by_group[0][1] == 0) is not flipped
        # every other layer (the convs, vgg8's fc1 reading fc0's one pixel) keeps the order
        flips = [ly.name for ly in sg.layers if ly.rows and last_rows_at_root(sg, ly)]
        assert flips == ([fc.name] if flipped else [])


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


def test_lane_cost_follows_the_tree_and_the_planner_keeps_the_binomial_charge():
    """cost.lane_ns charges each group of a 6-group tree its own work in the programs' tree (the
    root one sum, group 1 two, the last group the bias); plan_lane_ns, what the planner ranks
    by, charges the binomial tree's: the root three sums and the bias, group 1 none."""
    from dataclasses import replace

    from raptor.spatial.cost import _noc_ns, _vec_ns, lane_ns, plan_lane_ns
    from raptor.spatial.ir import ComputeNode, NodeKind

    arch = load_arch("arch-a")
    sg = TilingPass().apply(arch, build_spatial(load_graph(toy_convnet()), arch.element_bytes))
    ly = replace(next(ly for ly in sg.layers if ly.rows), row_groups=6)
    cols, eb = ly.cols, arch.element_bytes
    add = _noc_ns(arch, cols * eb) + _vec_ns(arch, cols)  # receive a sum and add it
    bias = _vec_ns(arch, cols)

    def node(g):
        return ComputeNode(g, ly.index, NodeKind.MVM, 0, 1, 0, cols, 0, ly.rows, g, 0, 1)

    assert plan_lane_ns(arch, ly, node(0)) - lane_ns(arch, ly, node(0)) == pytest.approx(
        2 * add + bias
    )
    assert lane_ns(arch, ly, node(1)) - plan_lane_ns(arch, ly, node(1)) == pytest.approx(2 * add)
    assert lane_ns(arch, ly, node(5)) - plan_lane_ns(arch, ly, node(5)) == pytest.approx(bias)
    one = replace(ly, row_groups=1)
    assert lane_ns(arch, one, node(0)) == plan_lane_ns(arch, one, node(0))


def test_flat_groups_at_producers_give_each_producer_core_its_pixels_group():
    """merging.flat_groups_at_producers: a core holding a producer node of a flattened map
    (vgg8 16x16: pool8's 2x2 pixels, one node each, each placed on the core of a leaf group of
    fc0 reading another pixel) gets the group nearest the root among those reading its node's
    pixels (the last pixel's core: the root, group 0); fc0's groups only trade cores among
    themselves, one per core, and every other node stays where it was."""
    from dataclasses import replace

    from raptor.models import build_model
    from raptor.spatial.merging import flat_groups_at_producers
    from raptor.spatial.tiling import make_nodes

    arch = load_arch("arch-a")
    sg = TilingPass().apply(
        arch, build_spatial(load_graph(build_model("vgg8", input_size=16)), arch.element_bytes)
    )
    fc = next(ly for ly in sg.layers if ly.name.endswith("fc0"))
    pool = next(ly for ly in sg.layers if ly.output.buffer == fc.inputs[0].buffer)
    assert pool.output.pixels == 4 and fc.row_groups >= 8
    nodes = make_nodes(sg, arch, {}, {pool.index: pool.output.pixels})
    placed = [replace(n, core=k) for k, n in enumerate(nodes)]
    pools = [k for k, n in enumerate(placed) if n.layer == pool.index]
    leaves = sorted(
        (k for k, n in enumerate(placed) if n.layer == fc.index), key=lambda k: -placed[k].row_group
    )
    for k, f in zip(pools, leaves):  # pixel 0 with the deepest leaf, ..., pixel 3 with another leaf
        placed[k] = replace(placed[k], core=placed[f].core)
    ch = pool.output.channels

    def group_on(ns, core):
        return next(n for n in ns if n.layer == fc.index and n.core == core)

    def best(ns, p):
        return min(
            n.row_group for n in ns if n.layer == fc.index and n.r0 < p.p1 * ch and p.p0 * ch < n.r1
        )

    assert all(group_on(placed, placed[k].core).row_group != best(placed, placed[k]) for k in pools)
    out = flat_groups_at_producers(sg, placed)
    for k in pools:
        assert group_on(out, out[k].core).row_group == best(out, out[k])
    last = max(pools, key=lambda k: out[k].p1)
    assert group_on(out, out[last].core).row_group == 0
    fc_cores = sorted(n.core for n in out if n.layer == fc.index)
    assert (
        fc_cores == sorted(n.core for n in placed if n.layer == fc.index) == sorted(set(fc_cores))
    )
    assert all(a == b for a, b in zip(out, placed) if a.layer != fc.index)
    assert [replace(n, core=0) for n in out] == [replace(n, core=0) for n in placed]
