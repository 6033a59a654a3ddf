"""Per-pixel lowering of pool nodes and of elementwise nodes (Add, standalone activations)."""

from __future__ import annotations

import numpy as np

from raptor.isa.opcodes import Opcode
from raptor.isa.table import concat
from raptor.pim.constants import load_constant, node_constants
from raptor.pim.emit import (
    R_IN0,
    R_OUT,
    Block,
    Regs,
    emit_activation,
    emit_ld,
    emit_st,
    emit_vv,
    sldi,
)
from raptor.pim.lowering_ctx import LowerCtx
from raptor.pim.memalloc import LocalAllocator
from raptor.spatial.geometry import pool_counts, window_classes
from raptor.spatial.ir import ComputeNode, LayerKind


def pool_prologue(ctx, layer, node, is_max: bool, alloc, c: int, eb: int):
    """Base registers of a pool node (input, output) and, for an average pool, its vectors of
    1/count (one per distinct window count) loaded once. Returns (prologue, regs, counts, recip);
    counts and recip are None for a max pool."""
    pro: list[np.ndarray] = [
        sldi(R_IN0, ctx.address[layer.inputs[0].buffer]),
        sldi(R_OUT, ctx.address[layer.output.buffer]),
    ]
    regs = Regs(pro)
    if is_max:
        return pro, regs, None, None
    counts = pool_counts(layer)
    (c_slice,) = node_constants(ctx, node)
    recip = load_constant(ctx, node.core, c_slice, alloc, regs, pro, "recip")
    return pro, regs, counts, recip


def lower_pool(ctx: LowerCtx, node: ComputeNode, alloc: LocalAllocator) -> np.ndarray:
    eb = ctx.eb
    layer = ctx.sg.layers[node.layer]
    v, out = layer.inputs[0], layer.output
    c = v.channels
    kh, kw = layer.kernel_shape
    is_max = layer.kind == LayerKind.MAXPOOL
    op = Opcode.VVMAX if is_max else Opcode.VVADD
    pro, regs, counts, recip = pool_prologue(ctx, layer, node, is_max, alloc, c, eb)
    classes = window_classes(layer, node.p0, node.p1)
    acc = alloc.alloc(c * eb, "acc")
    max_nw = max(cl.jhi - cl.jlo for cl in classes)
    budget_rows = max(1, alloc.free_bytes() // max(1, max_nw * c * eb) - 1)
    buf = alloc.alloc(min(kh, budget_rows) * max_nw * c * eb, "window")
    blocks: list[np.ndarray] = []
    for cls in classes:
        nh, nw = cls.ihi - cls.ilo, cls.jhi - cls.jlo
        rc = min(nh, budget_rows)
        b = Block(len(cls.pixels))
        row_bytes = nw * c * eb
        first = True
        for r0 in range(cls.ilo, cls.ihi, rc):
            r1 = min(cls.ihi, r0 + rc)
            for i in range(r0, r1):
                row = (cls.iy0 + i) * v.width + cls.ix0
                local = buf + (i - r0) * row_bytes
                if v.contiguous:
                    emit_ld(
                        b,
                        regs,
                        local,
                        R_IN0,
                        (v.channel_offset + (row + cls.jlo) * v.pixel_stride) * eb,
                        row_bytes,
                    )
                else:
                    for j in range(cls.jlo, cls.jhi):
                        emit_ld(
                            b,
                            regs,
                            local + (j - cls.jlo) * c * eb,
                            R_IN0,
                            (v.channel_offset + (row + j) * v.pixel_stride) * eb,
                            c * eb,
                        )
            for i in range(r0 + 1, r1):
                emit_vv(b, regs, op, buf, buf, buf + (i - r0) * row_bytes, nw * c)
            for j in range(1, nw):
                emit_vv(b, regs, op, buf, buf, buf + j * c * eb, c)
            if first:
                b.add(Opcode.LMV, rd=regs.loc(acc, b), r1=regs.loc(buf, b), generic3=c * eb)
                first = False
            else:
                emit_vv(b, regs, op, acc, acc, buf, c)
        if recip is not None:
            k = counts.index(kh * kw if layer.count_include_pad else cls.count)
            emit_vv(b, regs, Opcode.VVMUL, acc, acc, recip + k * c * eb, c)
        emit_activation(b, regs, layer.activation, acc, buf, c)
        emit_st(b, regs, acc, (out.channel_offset + cls.pixels * out.pixel_stride) * eb, c * eb)
        built = b.build()
        blocks += regs.flush() + [built]
    return concat(blocks)


def lower_elementwise(ctx: LowerCtx, node: ComputeNode, alloc: LocalAllocator) -> np.ndarray:
    """Add (+activation) or a standalone activation over pixels p0..p1, in chunks that fit."""
    eb = ctx.eb
    layer = ctx.sg.layers[node.layer]
    ins, out = layer.inputs, layer.output
    c = out.channels
    pro: list[np.ndarray] = [sldi(R_IN0 + k, ctx.address[v.buffer]) for k, v in enumerate(ins)]
    pro.append(sldi(R_OUT, ctx.address[out.buffer]))
    regs = Regs(pro)
    nbuf = len(ins) + (layer.activation == "silu")
    flat = all(v.contiguous for v in (*ins, out))
    if flat:
        total = node.lanes * c
        chunk = min(total, max(c, (alloc.free_bytes() // (nbuf * eb) - 64) // 32 * 32))
        e0 = node.p0 * c
        starts = np.arange(e0, e0 + total, chunk, dtype=np.int64)
        lens = np.minimum(chunk, e0 + total - starts)
        groups = [(starts[lens == n], int(n)) for n in np.unique(lens)]
        host = [lambda s, v=v: (v.channel_offset + s) * eb for v in ins]
        out_host = lambda s: (out.channel_offset + s) * eb  # noqa: E731
    else:
        chunk = c
        groups = [(np.arange(node.p0, node.p1, dtype=np.int64), c)]
        host = [lambda p, v=v: (v.channel_offset + p * v.pixel_stride) * eb for v in ins]
        out_host = lambda p: (out.channel_offset + p * out.pixel_stride) * eb  # noqa: E731
    bufs = [alloc.alloc(chunk * eb, f"in{k}") for k in range(nbuf)]
    blocks: list[np.ndarray] = []
    for lanes, n in groups:
        b = Block(len(lanes))
        for k in range(len(ins)):
            emit_ld(b, regs, bufs[k], R_IN0 + k, host[k](lanes), n * eb)
        if len(ins) == 2:
            emit_vv(b, regs, Opcode.VVADD, bufs[0], bufs[0], bufs[1], n)
        emit_activation(b, regs, layer.activation, bufs[0], bufs[-1], n)
        emit_st(b, regs, bufs[0], out_host(lanes), n * eb)
        built = b.build()
        blocks += regs.flush() + [built]
    return concat(blocks)
