"""Conv -> GEMM tiling: split each weight layer into array groups and compute nodes.

Rows K = kh*kw*cin (the NHWC window order) are cut into row tiles of one crossbar's rows; each
(row tile, column slice) is one array group of `arch.crossbars_for(rows, cols)` physical
crossbars. One MVM costs the same whatever the array group's width (pimsim-nn runs its crossbars
in parallel) and a core runs one instruction at a time, so array groups span as many columns as
fit: the column slice is the full width unless one row tile at full width exceeds a core (then
the fewest equal slices that fit). The row tiles of a slice are cut into row groups of as many
tiles as fit one core, in tile order (the last tiles first for a classifier reading a flattened
map, `last_rows_at_root`); the row groups of one (replica, slice) add their partial sums over the
NoC in a reduction tree (ir.reduce_children, ir.SpatialGraph.reduce_links: send/recv + vvadd, no
host round trip); its root, group 0, applies the activation and sends or stores. Vector layers
get one node over all pixels; planning re-splits pixel ranges later.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from raptor.arch import Arch
from raptor.errors import PassFailedError
from raptor.options import SMALL_LAYER_PIXELS
from raptor.spatial.geometry import pool_counts
from raptor.spatial.ir import (
    Buffer,
    BufferRole,
    ComputeNode,
    Layer,
    LayerKind,
    NodeKind,
    SpatialGraph,
)
from raptor.spatial.noc import mvm_lines_ok


@dataclass(frozen=True, slots=True)
class Slice:
    """One column slice of one row group of a GEMM layer (one node per replica)."""

    c0: int
    c1: int
    r0: int
    r1: int
    row_group: int
    crossbars: int


def row_tiles(arch: Arch, r0: int, r1: int) -> list[tuple[int, int]]:
    rows = arch.matrix.rows
    return [(a, min(a + rows, r1)) for a in range(r0, r1, rows)]


def tile_pack(arch: Arch, a: int, b: int, pack: int) -> int:
    """Pixels one mvmul of row tile [a, b) serves: a layer's `pack` for its short last tile (the
    only one `pack` pixels' rows fit one crossbar), else 1."""
    return pack if pack > 1 and (b - a) * pack <= arch.matrix.rows else 1


def tile_crossbars(arch: Arch, a: int, b: int, cols: int, pack: int) -> int:
    """Physical crossbars of the array group of row tile [a, b) over `cols` columns: k = tile_pack
    block-diagonal copies of its weights (k x rows by k x cols) when it is packed."""
    k = tile_pack(arch, a, b, pack)
    return arch.crossbars_for(k * (b - a), k * cols)


def pack_factor(arch: Arch, rows: int, cols: int, groups: int, most: int) -> int:
    """Pixels one mvmul of a GEMM layer's short last row tile can serve, at most `most`: a tile
    of at most half a crossbar's rows (conv1's 147 = 128 + 19 rows, a 576-row conv's 64, a
    1x1 conv of 64 channels) holds k = rows // its rows copies of its weights block-diagonally
    (k x its crossbars), so k pixels' remainders share one mvmul, as depthwise groups do, while
    its row group still fits one core. 1: not packed."""
    xr, cpc = arch.matrix.rows, arch.crossbars_per_core
    a, b = row_tiles(arch, 0, rows)[-1]
    rem = b - a
    if most <= 1 or 2 * rem > xr:
        return 1
    _, slices = gemm_slices(arch, rows, cols, groups)
    last = [s for s in slices if s.r1 == rows]
    k = min(most, xr // rem)
    while k > 1 and any(
        s.crossbars
        - arch.crossbars_for(rem, s.c1 - s.c0)
        + tile_crossbars(arch, 0, rem, s.c1 - s.c0, k)
        > cpc
        for s in last
    ):
        k -= 1
    return k


def row_groups(arch: Arch, rows: int, cols: int, group_tiles: int = 0) -> int:
    """Row groups of a rows x cols weight matrix: groups of as many row tiles as fit one core,
    and at most `group_tiles` tiles when it is not 0 (module docstring)."""
    tiles = math.ceil(rows / arch.matrix.rows)
    fit = max(1, arch.crossbars_per_core // _slice_width(arch, rows, cols)[1])
    return math.ceil(tiles / (min(fit, group_tiles) if group_tiles else fit))


def _slice_width(arch: Arch, rows: int, cols: int) -> tuple[int, int]:
    """(columns of a slice, crossbars of one row tile of it)."""
    xr, wpc, cpc = arch.matrix.rows, arch.weights_per_crossbar_row, arch.crossbars_per_core
    n_slices = math.ceil(arch.crossbars_for(min(rows, xr), cols) / cpc)
    width = min(cols, math.ceil(math.ceil(cols / n_slices) / wpc) * wpc)
    return width, arch.crossbars_for(min(rows, xr), width)


def gemm_slices(
    arch: Arch, rows: int, cols: int, groups: int | None = None, pack: int = 1
) -> tuple[int, list[Slice]]:
    """(row groups, slices) of a rows x cols weight matrix: full-width array groups, `groups` row
    groups (a layer's `row_groups`, set by the tiling pass), by default as many row tiles as fit
    one core in each (module docstring); the short last tile packed `pack` times (a layer's
    `pack`, pack_factor)."""
    xr = arch.matrix.rows
    tiles = math.ceil(rows / xr)
    width, _ = _slice_width(arch, rows, cols)
    groups = min(tiles, max(groups or 1, row_groups(arch, rows, cols)))
    bounds = [round(tiles * g / groups) for g in range(groups + 1)]  # balanced tiles per group
    out = []
    for g in range(groups):
        r0, r1 = bounds[g] * xr, min(rows, bounds[g + 1] * xr)
        for c0 in range(0, cols, width):
            c1 = min(cols, c0 + width)
            xb = sum(tile_crossbars(arch, a, b, c1 - c0, pack) for a, b in row_tiles(arch, r0, r1))
            out.append(Slice(c0, c1, r0, r1, g, xb))
    return groups, out


def split_range(n: int, parts: int) -> list[tuple[int, int]]:
    """Split 0..n into `parts` near-equal non-empty ranges."""
    parts = max(1, min(parts, n))
    edges = np.linspace(0, n, parts + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def last_rows_at_root(sg: SpatialGraph, layer: Layer) -> bool:
    """Whether the row groups of GEMM layer `layer` take its row tiles in reverse order, the last
    tiles in group 0, the root of every reduction tree (ir.reduce_children). A classifier reading
    a flattened feature map of several pixels (vgg8's fc0: 4x4 pixels x 512 channels, its rows
    permuted to (h, w, c) order by build) gets its rows pixel by pixel as the producer's last
    rows come in, so the tiles of the last pixels are the last to compute: at the root their
    sums go up the fewest levels (vgg8 fc0's 64 groups: 4 instead of 6 hops after the last
    pixel). Layers whose one input pixel comes whole (resnet's and googlenet's classifiers after
    the global pool) keep the order."""
    return flat_producer(sg, layer) is not None


def flat_producer(sg: SpatialGraph, layer: Layer) -> Layer | None:
    """The layer whose map of several pixels GEMM layer `layer` of more than one row group reads
    flattened as its one input pixel (`last_rows_at_root`), else None."""
    v = layer.inputs[0] if layer.inputs else None
    if layer.kind != LayerKind.GEMM or layer.row_groups <= 1 or v is None or v.pixels != 1:
        return None
    return next((p for p in sg.layers if p.output.buffer == v.buffer and p.output.pixels > 1), None)


def make_nodes(
    sg: SpatialGraph,
    arch: Arch,
    replicas: dict[int, int],
    splits: dict[int, int],
    chunks: dict[int, int] | None = None,
    rows: frozenset[int] = frozenset(),
) -> list[ComputeNode]:
    """Nodes of every layer: GEMM layers get `replicas[i]` copies of their slices; vector layers
    are split into `splits[i]` pixel ranges.

    A GEMM layer's pixels are cut into replicas x `chunks[i]` near-equal ranges dealt round-robin:
    range j goes to replica j mod R as its chunk j div R (all row groups of a replica share its
    ranges). With one chunk a replica owns one contiguous range; with several, every replica
    works near the top of the image at first and all of them move down together, so a consumer
    layer gets its first rows early instead of after the replica that holds them finished its
    whole range. The layers in `rows` are cut into their output rows instead (row y goes to
    replica y mod R; planning.choose_row_chunks): the replicas of a wave then all start at the
    left edge, so the pixel a consumer's window needs from the row below its own is computed at
    the same time as the consumer's, not at the end of a range that began mid-row. Chunk 0
    carries the replica's crossbars; the other chunks run on its core on the same array
    groups."""
    chunks = chunks or {}
    nodes: list[ComputeNode] = []
    for layer in sg.layers:
        i = layer.index
        if layer.kind == LayerKind.GEMM:
            _, slices = gemm_slices(arch, layer.rows, layer.cols, layer.row_groups, layer.pack)
            reps = max(1, min(replicas.get(i, 1), layer.out_pixels))
            parts = layer.output.height if i in rows else reps * chunks.get(i, 1)
            ranges = split_range(layer.out_pixels, parts)
            flip = last_rows_at_root(sg, layer)
            for j, (p0, p1) in enumerate(ranges):
                rep, chunk = j % reps, j // reps
                for s in slices:
                    nodes.append(
                        ComputeNode(
                            len(nodes),
                            i,
                            NodeKind.MVM,
                            p0,
                            p1,
                            s.c0,
                            s.c1,
                            s.r0,
                            s.r1,
                            layer.row_groups - 1 - s.row_group if flip else s.row_group,
                            rep,
                            s.crossbars if chunk == 0 else 0,
                            chunk=chunk,
                        )
                    )
        else:
            for p0, p1 in split_range(layer.out_pixels, splits.get(i, 1)):
                nodes.append(ComputeNode(len(nodes), i, NodeKind.VECTOR, p0, p1, 0, layer.cols))
    return nodes


def crossbars_needed(sg: SpatialGraph, arch: Arch) -> int:
    return sum(
        sum(s.crossbars for s in gemm_slices(arch, ly.rows, ly.cols, ly.row_groups, ly.pack)[1])
        for ly in sg.layers
        if ly.kind == LayerKind.GEMM
    )


@dataclass(frozen=True)
class TilingPass:
    """Tile every GEMM layer onto crossbars (one replica); records row groups (NoC reduction
    trees; at most `group_tiles` row tiles each unless 0, `small_tiles` for the layers of few
    output pixels when it is not 0) and adds the reciprocal-count constants
    of average pools. Fails if the model needs more crossbars than the chip."""

    group_tiles: int = 0  # raptor.options.CompileOptions.row_group_tiles
    # row tiles per group of the layers of at most SMALL_LAYER_PIXELS output pixels (0:
    # group_tiles; raptor.options.CompileOptions.small_layer_group_tiles)
    small_tiles: int = 0
    # pixels one mvmul of a short last row tile may serve (raptor.options.CompileOptions
    # .pack_pixels; 1: no packing)
    pack_pixels: int = 1
    name: ClassVar[str] = "conv-to-gemm-tiling"

    def layer_group_tiles(self, layer) -> int:
        """Row tiles per group of a GEMM layer (0: as many as fit one core)."""
        if self.small_tiles and layer.output.pixels <= SMALL_LAYER_PIXELS:
            return self.small_tiles
        return self.group_tiles

    def apply(self, arch: Arch, sg: SpatialGraph) -> SpatialGraph:
        eb = arch.element_bytes
        layers, buffers, consts = list(sg.layers), dict(sg.buffers), dict(sg.const_values)
        for i, layer in enumerate(layers):
            if layer.kind == LayerKind.GEMM:
                groups = row_groups(arch, layer.rows, layer.cols, self.layer_group_tiles(layer))
                pack = 1
                if layer.output.pixels > 1 and mvm_lines_ok(layer):
                    pack = pack_factor(arch, layer.rows, layer.cols, groups, self.pack_pixels)
                if groups > 1 or pack > 1:
                    layers[i] = replace(layer, row_groups=groups, pack=pack)
            elif layer.kind == LayerKind.AVGPOOL:
                name = f"{layer.name}.recip"
                counts = pool_counts(layer)
                c = layer.output.channels
                consts[name] = np.repeat(1.0 / np.asarray(counts, np.float32), c).astype(np.float32)
                buffers[name] = Buffer(name, len(counts) * c * eb, BufferRole.CONST)
        out = replace(sg, layers=layers, buffers=buffers, const_values=consts)
        need = crossbars_needed(out, arch)
        if need > arch.total_crossbars:
            raise PassFailedError(
                f"model {sg.name} needs {need} crossbars at one replica per layer, "
                f"{arch.name} has {arch.total_crossbars} ({arch.core_count} cores x {arch.crossbars_per_core})"
            )
        out.nodes = make_nodes(out, arch, {}, {})
        out.core_count = 0
        return out
