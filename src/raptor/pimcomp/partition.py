"""Node partitioning into array groups (PIMCOMP DAC'23 §IV-B, released `CrossbarPartition.cpp`).

A weight layer is an H x W matrix (H = kh*kw*cin in the NHWC window order, W = cout; FC: in x
out). It is cut horizontally into array groups (AGs) of crossbar-height rows spanning the full
width: ceil(H / xbar rows) AGs per replica, each of `arch.crossbars_for(rows, W)` physical
crossbars. An AG wider than one core (AGP) is split by columns into ceil(crossbars / per-core)
parts, each part a separate set of AGs with its own accumulation (released code: "extra
replication"). Group convs are rejected by the frontend-to-spatial build (as Raptor does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from raptor.arch import Arch
from raptor.spatial.ir import Layer, LayerKind
from raptor.spatial.tiling import row_tiles


@dataclass(frozen=True, slots=True)
class ArrayGroup:
    """AG `index` (row tile) of column part `part` of replica `replica` of `layer`."""

    layer: int
    replica: int
    part: int
    index: int
    r0: int
    r1: int
    c0: int
    c1: int
    crossbars: int
    core: int = -1


def column_parts(arch: Arch, rows: int, cols: int) -> list[tuple[int, int]]:
    """AGP: the column ranges of an AG of `rows` x `cols` so that each part fits one core."""
    xb = arch.crossbars_for(min(rows, arch.matrix.rows), cols)
    n = math.ceil(xb / arch.crossbars_per_core)
    if n <= 1:
        return [(0, cols)]
    wpc = arch.weights_per_crossbar_row
    width = math.ceil(math.ceil(cols / n) / wpc) * wpc
    return [(c, min(cols, c + width)) for c in range(0, cols, width)]


def replica_ags(arch: Arch, layer: Layer, replica: int) -> list[ArrayGroup]:
    """The AGs of one replica of a GEMM layer, in (part, index) order."""
    out = []
    for part, (c0, c1) in enumerate(column_parts(arch, layer.rows, layer.cols)):
        for k, (r0, r1) in enumerate(row_tiles(arch, 0, layer.rows)):
            xb = arch.crossbars_for(r1 - r0, c1 - c0)
            out.append(ArrayGroup(layer.index, replica, part, k, r0, r1, c0, c1, xb))
    return out


def layer_crossbars(arch: Arch, layer: Layer) -> int:
    """Physical crossbars of one replica of a GEMM layer."""
    return sum(ag.crossbars for ag in replica_ags(arch, layer, 0))


def is_fc(layer: Layer) -> bool:
    """A GEMM layer with a single output pixel (Gemm, or the released code's OP_FC)."""
    return layer.kind == LayerKind.GEMM and layer.out_pixels == 1


def partition(arch: Arch, layers: list[Layer], replication: dict[int, int]) -> list[ArrayGroup]:
    """All AGs of all GEMM layers in node, replica, AG order (the order first-fit maps them)."""
    out: list[ArrayGroup] = []
    for ly in layers:
        if ly.kind == LayerKind.GEMM:
            for r in range(replication.get(ly.index, 1)):
                out += replica_ags(arch, ly, r)
    return out
