"""Lowering of compute nodes to instruction blocks, built with numpy over all lanes of a class.

`lower_node` lowers a node per pixel (MVM nodes: lowering_mvm.py; pools and elementwise nodes:
lowering_vector.py; TENSOR layers: tensor_lowering.py). `lower_node_bands`, used by codegen for
every node, lowers it band by band with its row-band tokens (spatial/sync.py) in between, over a
line buffer (lowering_lines.py) when that loads fewer host bytes or the NoC dataflow needs it,
with the NoC messages of its slots (lowering_noc.py). The register convention and instruction
patterns are in emit.py, the lowering context in lowering_ctx.py.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from raptor.isa.table import concat
from raptor.pim.emit import TEMPS
from raptor.pim.lowering_ctx import LowerCtx
from raptor.pim.lowering_lines import (
    lower_mvm_lines,
    lower_pool_lines,
    use_line_buffer,
    use_pool_line_buffer,
)
from raptor.pim.lowering_mvm import lower_mvm
from raptor.pim.lowering_noc import message_records
from raptor.pim.lowering_vector import lower_elementwise, lower_pool
from raptor.pim.memalloc import LocalAllocator
from raptor.pim.tensor_lowering import lower_tensor
from raptor.spatial.ir import ComputeNode, LayerKind, NodeKind


def lower_node(ctx: LowerCtx, node: ComputeNode, ag_base: int) -> tuple[np.ndarray, int]:
    """Instructions of one node and its local-memory peak (bytes)."""
    layer = ctx.sg.layers[node.layer]
    alloc = LocalAllocator(ctx.capacity(node.core), node.core, f"node {node.id} ({layer.name})")
    if node.kind == NodeKind.MVM:
        code = lower_mvm(ctx, node, ag_base, alloc)
    elif layer.kind in (LayerKind.MAXPOOL, LayerKind.AVGPOOL):
        code = lower_pool(ctx, node, alloc)
    elif layer.kind == LayerKind.TENSOR:
        code = lower_tensor(ctx, node, alloc)
    else:
        code = lower_elementwise(ctx, node, alloc)
    return code, alloc.top


def lower_node_bands(
    ctx: LowerCtx,
    node: ComputeNode,
    ag_base: int,
    bands: list[tuple[int, int]],
    before: list[list[np.ndarray]],
    after: list[list[np.ndarray]],
) -> tuple[np.ndarray, int]:
    """Instructions of a node lowered band by band with the band tokens in between, and its
    local-memory peak: MVM nodes over a line buffer when it loads fewer host bytes, other nodes
    as one sub-node per band."""
    layer = ctx.sg.layers[node.layer]
    if use_line_buffer(ctx, node):
        alloc = LocalAllocator(ctx.capacity(node.core), node.core, f"node {node.id} ({layer.name})")
        return lower_mvm_lines(ctx, node, ag_base, alloc, bands, before, after), alloc.top
    if use_pool_line_buffer(ctx, node):
        alloc = LocalAllocator(ctx.capacity(node.core), node.core, f"node {node.id} ({layer.name})")
        return lower_pool_lines(ctx, node, alloc, bands, before, after), alloc.top
    comm = message_records(ctx, node, TEMPS[3])  # messages of other nodes between the bands
    parts: list[np.ndarray] = []
    peak = 0
    for i, (a, b) in enumerate(bands):
        sub = node if (a, b) == (node.p0, node.p1) else replace(node, p0=a, p1=b)
        code, pk = lower_node(ctx, sub, ag_base)
        peak = max(peak, pk)
        parts += comm(i) + before[i] + [code] + after[i]
    parts += comm(len(bands))
    return concat(parts), peak
