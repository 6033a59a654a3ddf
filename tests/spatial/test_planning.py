"""Replication and core assignment on a toy graph."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))
from toy import ARCH_TINY, toy_convnet, toy_resnet  # noqa: E402

from raptor.arch import load_arch
from raptor.frontend import load_graph
from raptor.spatial.build import build_spatial
from raptor.spatial.planning import SpatialPlanningPass, plain_assignment, snake_order
from raptor.spatial.tiling import TilingPass


def _tiled(model):
    arch = load_arch(str(ARCH_TINY))
    return arch, TilingPass().apply(arch, build_spatial(load_graph(model), arch.element_bytes))


def test_planning_replicates_bottleneck_within_budget():
    arch, sg = _tiled(toy_convnet(hw=16))
    out = SpatialPlanningPass(latency=True).apply(arch, sg)
    out.verify()
    reps = out.replication
    assert max(reps.values()) > 1  # the 16x16 convs get replicas
    used = {}
    for n in out.nodes:
        used[n.core] = used.get(n.core, 0) + n.crossbars
    assert max(used.values()) <= arch.crossbars_per_core
    assert len(used) > 1  # work spread over several cores
    SpatialPlanningPass(latency=False).apply(arch, sg).verify()


def test_planning_disabled_is_one_replica_first_fit():
    arch, sg = _tiled(toy_resnet())
    out = plain_assignment(arch, sg)
    out.verify()
    assert set(out.replication.values()) == {1}
    cores = [n.core for n in sorted(out.nodes, key=lambda n: n.id)]
    assert cores == sorted(cores)  # plain order


def test_snake_order_is_a_permutation_of_neighbours():
    arch = load_arch(str(ARCH_TINY))
    order = snake_order(arch)
    assert sorted(order) == list(range(arch.core_count))
    assert all(sum(arch.hops(a, b)) == 1 for a, b in zip(order, order[1:]))


def test_pixel_chunks_are_dealt_round_robin_and_share_their_replicas_crossbars():
    """3 replicas x 2 chunks of a 16x16 conv's 256 output pixels: split_range(256, 6) gives the
    edges 0 43 85 128 171 213 256; range j goes to replica j % 3 as its chunk j // 3, only chunk 0
    carries crossbars, and the packer puts every chunk on its chunk 0's core."""
    import numpy as np

    from raptor.spatial.merging import pack_balanced
    from raptor.spatial.tiling import make_nodes

    arch, sg = _tiled(toy_convnet(hw=16))
    gemm = next(ly.index for ly in sg.layers if ly.kind.name == "GEMM" and ly.out_pixels == 256)
    nodes = [n for n in make_nodes(sg, arch, {gemm: 3}, {}, {gemm: 2}) if n.layer == gemm]
    heads = sorted({(n.p0, n.p1, n.replica, n.chunk) for n in nodes})
    assert heads == [
        (0, 43, 0, 0),
        (43, 85, 1, 0),
        (85, 128, 2, 0),
        (128, 171, 0, 1),
        (171, 213, 1, 1),
        (213, 256, 2, 1),
    ]
    assert all((n.crossbars > 0) == (n.chunk == 0) for n in nodes)
    placed, _ = pack_balanced(arch, nodes, np.ones(len(nodes)))
    core = {(n.replica, n.c0, n.row_group): n.core for n in placed if n.chunk == 0}
    assert all(n.core == core[n.replica, n.c0, n.row_group] for n in placed)


def test_row_chunks_deal_whole_output_rows_round_robin():
    """The same conv with 3 replicas cut into row chunks: its 16 output rows of 16 pixels go to
    replica y % 3 as chunk y // 3 (replica 0 gets rows 0, 3, ..., 15: six rows, the others
    five), chunk 0 carries the crossbars. choose_row_chunks takes a chunked layer only when
    every replica gets at least ROW_CHUNK_MIN_ROWS rows: 3 or 8 replicas of 16 rows, not 9, and
    never a layer of one chunk."""
    from raptor.spatial.planning import ROW_CHUNK_MIN_ROWS, choose_row_chunks
    from raptor.spatial.tiling import make_nodes

    arch, sg = _tiled(toy_convnet(hw=16))
    gemm = next(ly.index for ly in sg.layers if ly.kind.name == "GEMM" and ly.out_pixels == 256)
    nodes = [n for n in make_nodes(sg, arch, {gemm: 3}, {}, {gemm: 2}, frozenset({gemm}))]
    heads = sorted({(n.p0, n.p1, n.replica, n.chunk) for n in nodes if n.layer == gemm})
    assert heads == sorted((16 * y, 16 * y + 16, y % 3, y // 3) for y in range(16))
    assert all((n.crossbars > 0) == (n.chunk == 0) for n in nodes if n.layer == gemm)
    assert ROW_CHUNK_MIN_ROWS == 2
    for reps, chunks, taken in ((3, 2, True), (8, 2, True), (9, 2, False), (3, 1, False)):
        assert (gemm in choose_row_chunks(sg, {gemm: reps}, {gemm: chunks})) == taken


def _two_cores_conv_pool_conv():
    """A two-core arch-tiny and three nodes: 4-crossbar convs of layers 0 and 2 (half a core
    each) and a pool node of layer 1 between them."""
    from dataclasses import replace

    from raptor.spatial.ir import ComputeNode, NodeKind

    arch = replace(load_arch(str(ARCH_TINY)), cores_per_chip=2, core_layout=(1, 2))
    nodes = [
        ComputeNode(0, 0, NodeKind.MVM, 0, 16, 0, 32, 0, 128, crossbars=4),
        ComputeNode(1, 1, NodeKind.VECTOR, 0, 16),
        ComputeNode(2, 2, NodeKind.MVM, 0, 16, 0, 32, 0, 128, crossbars=4),
    ]
    return arch, nodes


def test_window_packing_keeps_concurrent_layers_on_different_cores():
    """Two cores, two 4-crossbar conv nodes that each fill half a core: layer 0 computes during
    [0, 10) us, layer 2 during [20, 30) us, and a pool node (layer 1, no crossbars) runs during
    [0, 10) us beside layer 0. Total-load packing puts the pool on the least-loaded core, tied,
    hence core 0 with layer 0, so the two would wait for each other; with the layers' time
    windows the pool's window overlaps all of layer 0's 10 us on core 0 and none of layer 2's on
    core 1, so it goes to core 1."""
    import numpy as np

    from raptor.spatial.merging import pack_balanced

    arch, nodes = _two_cores_conv_pool_conv()
    times = np.array([10e3, 1e3, 10e3])
    plain, load = pack_balanced(arch, nodes, times)
    assert [n.core for n in plain] == [0, 0, 1] and list(load) == [11e3, 10e3]
    windows = {0: (0.0, 10e3), 1: (0.0, 10e3), 2: (20e3, 30e3)}
    packed, load = pack_balanced(arch, nodes, times, windows=windows)
    assert [n.core for n in packed] == [0, 1, 1] and list(load) == [10e3, 11e3]


def test_order_delay_packing_counts_what_layer_order_holds_back():
    """Two cores: layer 0 (10 us during [0, 100) us) on core 0, layer 2 (1 us during [150, 300)
    us) on core 1, then a pool node of layer 1 running during [90, 200) us. By the load within
    its window the pool goes to core 1 (a third of layer 2's 1 us against a tenth of layer 0's
    10 us), where, run before layer 2 in layer order, it would hold layer 2 back 50 us; by
    layer-order delays it goes to core 0, where it waits 10 us for layer 0 to end."""
    import numpy as np

    from raptor.spatial.merging import _WindowLoad, pack_balanced

    arch, nodes = _two_cores_conv_pool_conv()
    times = np.array([10e3, 5e3, 1e3])
    windows = {0: (0.0, 100e3), 1: (90e3, 200e3), 2: (150e3, 300e3)}
    by_load, _ = pack_balanced(arch, nodes, times, windows=windows)
    assert [n.core for n in by_load] == [0, 1, 1]
    by_delay, _ = pack_balanced(arch, nodes, times, windows=windows, order_delay=True)
    assert [n.core for n in by_delay] == [0, 0, 1]
    w = _WindowLoad(windows, 2)
    w.add(0, 0, 10e3)
    w.add(1, 2, 1e3)
    assert list(w.delay(1)) == [10e3, 50e3]
    w.add(1, 1, 5e3)  # a node of the same layer runs wholly before or after: its time
    assert list(w.delay(1)) == [10e3, 55e3]
    assert list(_WindowLoad({}, 2).delay(1)) == [0.0, 0.0]  # no windows: nothing held back


def test_fixed_nodes_keep_their_cores_and_the_rest_packs_around_them():
    """pack_balanced(fixed=...) on two cores: a full-core node and two half-core nodes pack as
    [0, 1, 1] by themselves; with the full-core node fixed on core 1 the others pack around it on
    core 0. A fixed node whose core lacks the crossbars is refused in one line."""
    from dataclasses import replace

    import numpy as np
    import pytest

    from raptor.errors import PassFailedError
    from raptor.spatial.ir import ComputeNode, NodeKind
    from raptor.spatial.merging import pack_balanced

    arch = replace(load_arch(str(ARCH_TINY)), cores_per_chip=2, core_layout=(1, 2))
    cap = arch.crossbars_per_core
    nodes = [
        ComputeNode(0, 0, NodeKind.MVM, 0, 16, 0, 32, 0, 128, crossbars=cap),
        ComputeNode(1, 1, NodeKind.MVM, 0, 16, 0, 32, 0, 128, crossbars=cap // 2),
        ComputeNode(2, 2, NodeKind.MVM, 0, 16, 0, 32, 0, 128, crossbars=cap // 2),
    ]
    times = np.array([1e3, 5e3, 1e3])
    free, _ = pack_balanced(arch, nodes, times)
    assert [n.core for n in free] == [0, 1, 1]
    placed, load = pack_balanced(arch, nodes, times, fixed={0: 1})
    assert [n.core for n in placed] == [1, 0, 0] and list(load) == [6e3, 1e3]
    with pytest.raises(PassFailedError, match="needs"):
        pack_balanced(arch, nodes, times, fixed={1: 0, 0: 0})


def test_core_span_is_the_longest_first_start_to_last_end_of_a_core():
    """The throughput rule of window packing (raptor.compiler._core_span_ns): core 0 holds layer 0
    (computing 0-4 us) and layer 2 (20-30 us), so it is busy with one input from 0 to 30 us and
    cannot restart the next input sooner; core 1 holds layer 1 only (3-12 us). The span is 30 us,
    not the 10 us of the longest layer."""
    from types import SimpleNamespace

    from raptor.compiler import _core_span_ns
    from raptor.spatial.ir import ComputeNode, NodeKind

    nodes = [
        ComputeNode(0, 0, NodeKind.MVM, 0, 8, core=0),
        ComputeNode(1, 1, NodeKind.VECTOR, 0, 8, core=1),
        ComputeNode(2, 2, NodeKind.MVM, 0, 8, core=0),
    ]
    timeline = {0: [0.0, 4e3], 1: [3e3, 12e3], 2: [20e3, 30e3]}
    first = SimpleNamespace(nodes=nodes, noc=SimpleNamespace(timeline=timeline))
    assert _core_span_ns(first) == 30e3
    assert _core_span_ns(None) == float("inf")
