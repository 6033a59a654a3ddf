"""Per-core constant area: the constant slices a core's nodes read (an MVM node's bias slice, an
average pool's 1/count vectors) each get one slot in a region of local memory right below the
core's persistent NoC buffers, and are loaded into it once per round instead of in the prologue
of every node (and band) that reads them.

A node's prologue sits between its producer's last message and its first mvmul; on a core
whose nodes follow each other on the critical path (resnet18's fc after the global pool) the
ld of its bias was on the path. The loads of the constants that the core's first node reads
stay where that node's prologue was (the program start); a later node's go before the nearest
earlier node, past the first, that receives a message (the core waits for its producers there
anyway), else before the node itself (`load_positions`). Node scratch gets the memory below the
area (`LowerCtx.capacity`); a core whose nodes do not fit beside it keeps the loads in the
prologues (`raptor.pim.codegen`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from raptor.isa.opcodes import OFFSET_RS1, Opcode
from raptor.isa.table import make
from raptor.pim.emit import R_CONST, TEMPS, Regs, prologue_ld, sldi
from raptor.pim.memalloc import LocalAllocator, aligned
from raptor.spatial.geometry import pool_counts
from raptor.spatial.ir import ComputeNode, LayerKind, NodeKind


class ConstSlice(NamedTuple):
    """Bytes [offset, offset + size) of host constant buffer `buffer`."""

    buffer: str
    offset: int
    size: int


def node_constants(ctx, node: ComputeNode) -> list[ConstSlice]:
    """The constant slices node `node` reads: its bias slice if it adds the bias
    (ir.adds_bias), the 1/count vectors of an average pool."""
    layer = ctx.sg.layers[node.layer]
    eb = ctx.eb
    if node.kind == NodeKind.MVM:
        if node.id in ctx.bias_nodes:
            return [ConstSlice(layer.bias_buffer, node.c0 * eb, (node.c1 - node.c0) * eb)]
        return []
    if layer.kind == LayerKind.AVGPOOL:
        c = layer.inputs[0].channels
        return [ConstSlice(f"{layer.name}.recip", 0, len(pool_counts(layer)) * c * eb)]
    return []


def const_area(ctx, core: int, nodes: list[ComputeNode]) -> dict[ConstSlice, int]:
    """Local address of every distinct constant slice the nodes of `core` read, in a region
    ending where the core's persistent NoC buffers begin."""
    slices = list(dict.fromkeys(s for n in nodes for s in node_constants(ctx, n)))
    addr = ctx.capacity(core, with_constants=False) - sum(aligned(s.size) for s in slices)
    out = {}
    for s in slices:
        out[s] = addr
        addr += aligned(s.size)
    return out


def load_constant(ctx, core: int, s: ConstSlice, alloc: LocalAllocator, regs: Regs, pro, label):
    """Local address of constant slice `s` for a node of `core`: its slot in the core's constant
    area, or (no area) scratch that the node's prologue `pro` loads it into."""
    addr = ctx.consts.get(core, {}).get(s)
    if addr is not None:
        regs.loc(addr)  # the register the prologue's ld would have set
        return addr
    addr = alloc.alloc(s.size, label)
    pro.append(sldi(R_CONST, ctx.address[s.buffer]))
    prologue_ld(pro, regs, addr, R_CONST, s.offset, s.size)
    return addr


def load_records(ctx, area: dict[ConstSlice, int], slices) -> list[np.ndarray]:
    """The records that load `slices` into their slots of `area` (between two nodes: R_CONST and
    the first temporary are free there)."""
    out: list[np.ndarray] = []
    for s in slices:
        out += [
            sldi(R_CONST, ctx.address[s.buffer]),
            sldi(TEMPS[0], area[s]),
            make(
                Opcode.LD,
                rd=TEMPS[0],
                r1=R_CONST,
                generic1=OFFSET_RS1,
                generic2=s.offset,
                generic3=s.size,
            ),
        ]
    return out


def load_positions(
    ctx, nodes: list[ComputeNode], codes: list[np.ndarray]
) -> dict[int, list[ConstSlice]]:
    """Node index -> the constant slices loaded right before that node: the first node's at the
    program start (index 0, where its prologue was); a later node's before the nearest earlier
    node, other than the first, that receives a message (the core waits for its producers
    there), else before the node itself."""
    out: dict[int, list[ConstSlice]] = {}
    seen: set[ConstSlice] = set()
    wait = None  # the latest node (past the first) that receives
    for i, (n, code) in enumerate(zip(nodes, codes)):
        for s in node_constants(ctx, n):
            if s not in seen:
                seen.add(s)
                out.setdefault(i if i == 0 or wait is None else wait, []).append(s)
        if i > 0 and (code["opcode"] == Opcode.RECV).any():
            wait = i
    return out
