"""Lowering of TENSOR layers (raptor.spatial.tensor) to vector-unit instruction blocks.

Lanes of a node are grouped by run length; each group is one numpy Block (one record per
instruction slot and lane). Host offsets of lanes ride in the ld/st offset field; local offsets
that differ per slot ride in the vector offset field (vvdmul rd/rs2, vmv/vsoftmax rs1), so no
instruction needs its own register set-up.
"""

from __future__ import annotations

import numpy as np

from raptor.isa.opcodes import OFFSET_RD, OFFSET_RS1, OFFSET_RS2, Opcode
from raptor.isa.table import concat
from raptor.pim.emit import (
    R_IN0,
    R_IN1,
    R_OUT,
    Block,
    Regs,
    emit_ld,
    emit_st,
    emit_vv,
    prologue_ld,
    sldi,
)
from raptor.pim.lowering_ctx import LowerCtx
from raptor.pim.memalloc import LocalAllocator
from raptor.spatial.ir import ComputeNode

FUNCS = {
    "vvadd": Opcode.VVADD,
    "vvsub": Opcode.VVSUB,
    "vvmul": Opcode.VVMUL,
    "vsigm": Opcode.VSIGM,
    "vrelu": Opcode.VRELU,
}


def _groups(lens: np.ndarray, lanes: np.ndarray):
    for n in np.unique(lens[lanes]):
        yield int(n), lanes[lens[lanes] == n]


def lower_tensor(ctx: LowerCtx, node: ComputeNode, alloc: LocalAllocator) -> np.ndarray:
    spec = ctx.sg.layers[node.layer].spec
    lanes = np.arange(node.p0, node.p1, dtype=np.int64)
    fn = {"copy": _copy, "binary": _elementwise, "unary": _elementwise}.get(spec.op)
    fn = fn or {"softmax": _softmax, "matmul": _matmul}[spec.op]
    return fn(ctx, spec, lanes, alloc)


def _copy(ctx, spec, lanes, alloc):
    eb = ctx.eb
    src, dst = spec.offs
    pro = [
        sldi(R_IN0, ctx.address[spec.ins[0].buffer]),
        sldi(R_OUT, ctx.address[spec.out.buffer]),
    ]
    regs = Regs(pro)
    blocks: list[np.ndarray] = []
    if spec.mode == "transpose":
        la, sb, sa = spec.extra["la"], spec.extra["sb_src"], spec.extra["sa_dst"]
        tb = int(spec.lens[lanes].max())
        tile = alloc.alloc(la * tb * eb, "tile")
        row = alloc.alloc(tb * eb, "row")
        r_stride = regs.loc(la)  # a register holding la (the gather stride)
        regs.loc(tile)
        regs.loc(row)
        for n, sel in _groups(spec.lens, lanes):
            b = Block(len(sel))
            if sb == la:
                emit_ld(b, regs, tile, R_IN0, src[sel] * eb, n * la * eb)
            else:
                for t in range(n):
                    emit_ld(b, regs, tile + t * la * eb, R_IN0, (src[sel] + t * sb) * eb, la * eb)
            for a in range(la):
                b.add(
                    Opcode.VMV,
                    rd=regs.loc(row, b),
                    r1=regs.loc(tile, b),
                    r2_or_imm=r_stride,
                    generic1=OFFSET_RS1,
                    generic2=a,
                    generic3=n,
                )
                emit_st(b, regs, row, (dst[sel] + a * sa) * eb, n * eb)
            blocks += regs.flush() + [b.build()]
        return concat(blocks)
    buf = alloc.alloc(int(spec.lens[lanes].max()) * eb, "run")
    dups = spec.dup if spec.dup is not None else np.zeros(1, np.int64)
    for n, sel in _groups(spec.lens, lanes):
        b = Block(len(sel))
        emit_ld(b, regs, buf, R_IN0, src[sel] * eb, n * eb)
        for d in dups:
            emit_st(b, regs, buf, (dst[sel] + int(d)) * eb, n * eb)
        blocks += regs.flush() + [b.build()]
    return concat(blocks)


def _elementwise(ctx, spec, lanes, alloc):
    eb = ctx.eb
    nin = len(spec.ins)
    base = [R_IN0, R_IN1][:nin]
    pro = [sldi(r, ctx.address[v.buffer]) for r, v in zip(base, spec.ins)]
    pro.append(sldi(R_OUT, ctx.address[spec.out.buffer]))
    regs = Regs(pro)
    maxlen = int(spec.lens[lanes].max())
    bufs = [alloc.alloc(maxlen * eb, f"in{k}") for k in range(nin)]
    ci = spec.const_index
    if spec.const_uniform:
        prologue_ld(pro, regs, bufs[ci], base[ci], int(spec.offs[ci][lanes[0]]) * eb, maxlen * eb)
    op = FUNCS[spec.func]
    blocks: list[np.ndarray] = []
    for n, sel in _groups(spec.lens, lanes):
        b = Block(len(sel))
        for k in range(nin):
            if not (spec.const_uniform and k == ci):
                emit_ld(b, regs, bufs[k], base[k], spec.offs[k][sel] * eb, n * eb)
        d = bufs[1] if (spec.const_uniform and ci == 0) else bufs[0]
        emit_vv(b, regs, op, d, bufs[0], bufs[1] if nin == 2 else None, n)
        emit_st(b, regs, d, spec.offs[nin][sel] * eb, n * eb)
        blocks += regs.flush() + [b.build()]
    return concat(blocks)


def _softmax(ctx, spec, lanes, alloc):
    eb = ctx.eb
    row = spec.row
    src, dst = spec.offs
    pro = [
        sldi(R_IN0, ctx.address[spec.ins[0].buffer]),
        sldi(R_OUT, ctx.address[spec.out.buffer]),
    ]
    regs = Regs(pro)
    buf = alloc.alloc(int(spec.lens[lanes].max()) * row * eb, "rows")
    regs.loc(buf)
    blocks: list[np.ndarray] = []
    for n, sel in _groups(spec.lens, lanes):
        b = Block(len(sel))
        emit_ld(b, regs, buf, R_IN0, src[sel] * eb, n * row * eb)
        for r in range(n):
            b.add(
                Opcode.VSOFTMAX,
                rd=regs.loc(buf, b),
                r1=regs.loc(buf, b),
                generic1=OFFSET_RD | OFFSET_RS1,
                generic2=r * row,
                generic3=row,
            )
        emit_st(b, regs, buf, dst[sel] * eb, n * row * eb)
        blocks += regs.flush() + [b.build()]
    return concat(blocks)


def _matmul(ctx, spec, lanes, alloc):
    eb = ctx.eb
    ex = spec.extra
    m, k, n, tn = ex["m"], ex["k"], ex["n"], ex["tn"]
    a_offs, o_offs = spec.offs
    pro = [
        sldi(R_IN0, ctx.address[spec.ins[0].buffer]),
        sldi(R_IN1, ctx.address[spec.ins[1].buffer]),
        sldi(R_OUT, ctx.address[spec.out.buffer]),
    ]
    regs = Regs(pro)
    arow = alloc.alloc(k * eb, "a_row")
    bt = alloc.alloc(tn * k * eb, "bt_tile")
    scr = alloc.alloc(tn * k * eb, "dots")
    res = alloc.alloc(tn * eb, "row")
    r_k = regs.loc(k)
    for a in (arow, bt, scr, res):
        regs.loc(a)
    blocks: list[np.ndarray] = []
    batch = lanes // m
    for bi in np.unique(batch):
        sel = lanes[batch == bi]
        for j0 in range(0, n, tn):
            t = min(tn, n - j0)
            hb = int(ex["bt_base"][bi]) + j0 * ex["bt_row"]
            one = Block(1)
            if ex["bt_row"] == k:
                emit_ld(one, regs, bt, R_IN1, np.array([hb * eb]), t * k * eb)
            else:
                for j in range(t):
                    emit_ld(
                        one,
                        regs,
                        bt + j * k * eb,
                        R_IN1,
                        np.array([(hb + j * ex["bt_row"]) * eb]),
                        k * eb,
                    )
            b = Block(len(sel))
            emit_ld(b, regs, arow, R_IN0, a_offs[sel] * eb, k * eb)
            for j in range(t):
                b.add(
                    Opcode.VVDMUL,
                    rd=regs.loc(scr, b),
                    r1=regs.loc(arow, b),
                    r2_or_imm=regs.loc(bt, b),
                    generic1=OFFSET_RD | OFFSET_RS2,
                    generic2=j * k,
                    generic3=k,
                )
            b.add(Opcode.VMV, rd=regs.loc(res, b), r1=regs.loc(scr, b), r2_or_imm=r_k, generic3=t)
            emit_st(b, regs, res, (o_offs[sel] + j0) * eb, t * eb)
            blocks += regs.flush() + [one.build(), b.build()]
    return concat(blocks)


__all__ = ["lower_tensor"]
