"""Per-pixel lowering of MVM nodes.

Per output pixel: ld each in-bounds kernel-row segment into the local window (padding is zeroed
once per padding class with lldi), one mvmul per row tile into partial-sum buffers, vvadd
reduction; a row group of a multi-group layer then recv's and vvadd's the partial sums of its
reduction subtrees (ir.SpatialGraph.reduce_links) and sends its sum to its parent, the tree's last
group with the bias added (ir.SpatialGraph.bias_nodes); the root (or only) group adds the bias
when it is the only one (and a fused residual, spatial/fusion.py), applies the activation and
st's the column slice into the pixel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raptor.isa.opcodes import OFFSET_RD, Opcode
from raptor.isa.table import concat, make
from raptor.pim.constants import load_constant, node_constants
from raptor.pim.emit import (
    LAST_LOCAL,
    R_IN0,
    R_IN1,
    R_OUT,
    R_ZERO,
    T_DST,
    Block,
    Regs,
    emit_activation,
    emit_ld,
    emit_st,
    emit_vv,
    merge_lanes,
    sldi,
)
from raptor.pim.lowering_ctx import LowerCtx
from raptor.pim.memalloc import LocalAllocator
from raptor.pim.window import window_segments, zero_runs
from raptor.spatial.geometry import WindowClass, window_classes
from raptor.spatial.ir import ComputeNode, Layer
from raptor.spatial.tiling import row_tiles, tile_pack


def window_subclass(cls: WindowClass, mask: np.ndarray) -> WindowClass:
    return WindowClass(
        cls.ilo, cls.ihi, cls.jlo, cls.jhi, cls.pixels[mask], cls.iy0[mask], cls.ix0[mask]
    )


def sliding_lanes(layer: Layer, cls: WindowClass, whole_window: bool) -> np.ndarray:
    """Lanes whose window is the previous lane's shifted by one output column (same row, stride
    < kw, no padding): they keep kw - stride columns of the window and load only the new ones."""
    kh, kw = layer.kernel_shape
    sw = layer.strides[1]
    n = len(cls.pixels)
    interior = cls.ilo == 0 and cls.ihi == kh and cls.jlo == 0 and cls.jhi == kw
    if not (whole_window and interior and sw < kw and n > 1):
        return np.zeros(n, bool)
    out = np.zeros(n, bool)
    out[1:] = (np.diff(cls.pixels) == 1) & (np.diff(cls.ix0) == sw)
    return out


def slide_window(b: Block, regs: Regs, layer: Layer, cls: WindowClass, win: int, eb: int) -> None:
    """lmv the window left by `stride` columns, then ld the new columns of every kernel row."""
    v = layer.inputs[0]
    kh, kw = layer.kernel_shape
    sw, c = layer.strides[1], v.channels
    k = kh * kw * c
    b.add(
        Opcode.LMV,
        rd=regs.loc(win, b),
        r1=regs.loc(win + sw * c * eb, b),
        generic3=(k - sw * c) * eb,
    )
    for i in range(kh):
        row = (cls.iy0 + i) * v.width + cls.ix0
        cols = [(kw - sw, kw)] if v.contiguous else [(j, j + 1) for j in range(kw - sw, kw)]
        for j0, j1 in cols:
            host = v.channel_offset + (row + j0) * v.pixel_stride
            emit_ld(b, regs, win + (i * kw + j0) * c * eb, R_IN0, host * eb, (j1 - j0) * c * eb)


def mvm_prologue(ctx, layer, node, in_buffer, residual, last: bool, alloc, cols: int, eb: int):
    """Base registers of an MVM node (input, fused residual, output for the root row group) and,
    for the node that adds the bias (ir.SpatialGraph.bias_nodes), the node's bias slice loaded
    once into local memory. Returns (prologue, regs, bias or None)."""
    pro: list[np.ndarray] = [sldi(R_IN0, ctx.address[in_buffer])]
    regs = Regs(pro)
    if residual is not None:
        pro.append(sldi(R_IN1, ctx.address[residual.buffer]))
    bias = None
    if last:
        pro.append(sldi(R_OUT, ctx.address[layer.output.buffer]))
    for c in node_constants(ctx, node):
        bias = load_constant(ctx, node.core, c, alloc, regs, pro, "bias")
    return pro, regs, bias


def lower_mvm(ctx: LowerCtx, node: ComputeNode, ag_base: int, alloc: LocalAllocator) -> np.ndarray:
    arch, eb = ctx.arch, ctx.eb
    layer = ctx.sg.layers[node.layer]
    cols = node.c1 - node.c0
    tiles = row_tiles(arch, node.r0, node.r1)
    srcs, dst_core = ctx.links.get(node.id, ((), -1))
    # a packed last tile (spatial/tiling.py) serves one pixel here, the first of its k blocks:
    # its mvmul reads k blocks of input and writes k blocks of columns
    k = tile_pack(arch, *tiles[-1], layer.pack)
    spare = (k - 1) * (tiles[-1][1] - tiles[-1][0])
    win = alloc.alloc((node.r1 - node.r0 + spare) * eb, "window")
    ps_a = alloc.alloc(k * cols * eb, "psum")
    residual = layer.inputs[1] if len(layer.inputs) > 1 and dst_core < 0 else None
    need_b = len(tiles) > 1 or layer.activation == "silu" or bool(srcs) or residual is not None
    ps_b = alloc.alloc(k * cols * eb, "psum2") if need_b else None
    last = dst_core < 0  # the root row group (or the only one) finishes the pixel
    pro, regs, bias = mvm_prologue(
        ctx, layer, node, layer.inputs[0].buffer, residual, last, alloc, cols, eb
    )
    tail = MvmTail(layer, node, srcs, dst_core, ps_a, ps_b, bias, residual, eb)
    # fixed registers first: window tiles, psums, bias
    regs.loc(ps_a)
    if ps_b is not None:
        regs.loc(ps_b)
    for a, _ in tiles:
        if regs.next > LAST_LOCAL - 4:  # keep a few for the window segments
            break
        regs.loc(win + (a - node.r0) * eb)
    blocks: list[np.ndarray] = []
    mbiw = arch.weight_bits
    for cls in window_classes(layer, node.p0, node.p1):
        segs = window_segments(layer, cls, node.r0, node.r1)
        covered = np.zeros(node.r1 - node.r0, bool)
        for s, n, _ in segs:
            covered[s - node.r0 : s - node.r0 + n] = True
        zero = [
            make(
                Opcode.LLDI,
                rd=R_ZERO,
                r2_or_imm=0,
                generic1=OFFSET_RD,
                generic2=win + s * eb,
                generic3=n * eb,
            )
            for s, n in zero_runs(covered)
        ]
        k_all = node.r1 - node.r0
        slide = sliding_lanes(layer, cls, k_all == layer.rows)
        parts = []
        for lanes_mask, sliding in ((~slide, False), (slide, True)):
            if not lanes_mask.any():
                continue
            sub = window_subclass(cls, lanes_mask)
            b = Block(len(sub.pixels))
            if sliding:
                slide_window(b, regs, layer, sub, win, eb)
            else:
                for s, n, host in window_segments(layer, sub, node.r0, node.r1):
                    emit_ld(b, regs, win + (s - node.r0) * eb, R_IN0, host * eb, n * eb)
            for t, (a, _) in enumerate(tiles):
                dst = ps_a if t == 0 else ps_b
                b.add(
                    Opcode.MVMUL,
                    rd=regs.loc(dst, b),
                    r1=regs.loc(win + (a - node.r0) * eb, b),
                    r2_or_imm=mbiw,
                    generic2=ag_base + t,
                )
                if t > 0:
                    emit_vv(b, regs, Opcode.VVADD, ps_a, ps_a, ps_b, cols)
            mvm_tail(b, regs, tail, sub.pixels)  # partial sums of the subtrees, fused Add
            parts.append((np.flatnonzero(lanes_mask), len(b.slots), b.build()))
        blocks += regs.flush() + zero + [merge_lanes(parts)]
    return concat(blocks)


@dataclass(frozen=True)
class MvmTail:
    """What finishes an MVM node's pixels: its reduction-tree links, partial-sum and bias
    buffers, fused residual view and element size."""

    layer: Layer
    node: ComputeNode
    srcs: tuple
    dst_core: int
    ps_a: int
    ps_b: int | None
    bias: int | None
    residual: object
    eb: int


def mvm_tail(
    b: Block,
    regs: Regs,
    tail: MvmTail,
    pixels: np.ndarray,
    out_row: int | None = None,
    ox: np.ndarray | None = None,
    res_row: int | None = None,
) -> None:
    """Row-group reduction, bias, fused residual (from host memory, or from the local residual
    row res_row at column ox when it arrives over the NoC), activation and store of an MVM lane
    block (into the local output row at column ox when the node sends its rows over the NoC)."""
    layer, node, srcs, dst_core = tail.layer, tail.node, tail.srcs, tail.dst_core
    ps_a, ps_b, bias, residual, eb = tail.ps_a, tail.ps_b, tail.bias, tail.residual, tail.eb
    cols = node.c1 - node.c0
    out = layer.output
    for src in srcs:
        b.add(Opcode.RECV, rd=regs.loc(ps_b, b), r2_or_imm=src, generic3=cols * eb)
        emit_vv(b, regs, Opcode.VVADD, ps_a, ps_a, ps_b, cols)
    if bias is not None:
        emit_vv(b, regs, Opcode.VVADD, ps_a, ps_a, bias, cols)
    if dst_core >= 0:
        b.add(Opcode.SEND, rd=regs.loc(ps_a, b), r2_or_imm=dst_core, generic3=cols * eb)
        return
    if residual is not None and res_row is not None:
        ra = regs.loc(ps_a, b)
        b.add(Opcode.SLDI, rd=T_DST, r2_or_imm=res_row + ox * cols * eb)
        b.add(Opcode.VVADD, rd=ra, r1=ra, r2_or_imm=T_DST, generic3=cols)
    elif residual is not None:
        rv = residual
        r_host = (rv.channel_offset + pixels * rv.pixel_stride + node.c0) * eb
        emit_ld(b, regs, ps_b, R_IN1, r_host, cols * eb)
        emit_vv(b, regs, Opcode.VVADD, ps_a, ps_a, ps_b, cols)
    if out_row is not None:
        b.add(Opcode.SLDI, rd=T_DST, r2_or_imm=out_row + ox * cols * eb)
        _activation_to(b, regs, layer.activation, ps_a, ps_b, cols, T_DST, eb)
        return
    emit_activation(b, regs, layer.activation, ps_a, ps_b, cols)
    host = (out.channel_offset + pixels * out.pixel_stride + node.c0) * eb
    emit_st(b, regs, ps_a, host, cols * eb)


def _activation_to(
    block: Block, regs: Regs, act: str | None, a: int, tmp: int | None, n: int, rd: int, eb: int
) -> None:
    """Activation of the n elements at local address a, written to the address in register rd."""
    ra = regs.loc(a, block)
    if act == "relu":
        block.add(Opcode.VRELU, rd=rd, r1=ra, generic3=n)
    elif act == "sigmoid":
        block.add(Opcode.VSIGM, rd=rd, r1=ra, generic3=n)
    elif act == "silu":
        emit_vv(block, regs, Opcode.VSIGM, tmp, a, None, n)
        block.add(Opcode.VVMUL, rd=rd, r1=ra, r2_or_imm=regs.loc(tmp, block), generic3=n)
    else:
        block.add(Opcode.LMV, rd=rd, r1=ra, generic3=n * eb)
