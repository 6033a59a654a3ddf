"""NoC message emission of line-buffer nodes (spatial/noc.py, spatial/message_order.py): the
step order of a node, its message slots, the padding of persistent input rows and the host
stores of a producer whose buffer keeps a host reader."""

from __future__ import annotations

import numpy as np

from raptor.isa.opcodes import OFFSET_RD, OFFSET_RS1, Opcode
from raptor.isa.table import INST_DTYPE, make
from raptor.pim.emit import R_IN0, R_OUT, R_ZERO, TEMPS, Block, chunks, sldi
from raptor.pim.lowering_ctx import LowerCtx
from raptor.spatial.geometry import lines_geometry
from raptor.spatial.ir import ComputeNode, NodeKind
from raptor.spatial.message_order import message_span, row_segments, row_steps
from raptor.spatial.noc import row_spans

SLDI, SEND, RECV = int(Opcode.SLDI), int(Opcode.SEND), int(Opcode.RECV)


def line_steps(
    ctx: LowerCtx,
    node: ComputeNode,
    bands: list[tuple[int, int]],
    before: list[list],
    after: list[list],
) -> list[tuple[int, int, int, list, list, int | None]]:
    """(output row, pixel range, records before it, records after it, message slot before it or
    None) of a line-buffer node, in the step order of spatial/noc.py: row segments with a slot
    each for a NoC node, whole rows with a slot per band otherwise; a band's waits before its
    first step, its syncs after its last."""
    ow = ctx.sg.layers[node.layer].output.width
    noc = ctx.sg.noc
    per_step = noc is not None and noc.uses_lines(node)
    cuts = row_segments(ow, noc.segments, noc.segment_pixels) if per_step else [0, ow]
    out = []
    for bi, (a, b) in enumerate(bands):
        steps = row_steps(a, b, ow, cuts)
        for i, (oy, pa, pb) in enumerate(steps):
            pre = before[bi] if i == 0 else []
            post = after[bi] if i == len(steps) - 1 else []
            slot = len(out) if per_step else (bi if i == 0 else None)
            out.append((oy, pa, pb, pre, post, slot))
    return out


def end_slot(ctx: LowerCtx, node: ComputeNode, steps: list, bands: list[tuple[int, int]]) -> int:
    """Index of a line-buffer node's last message slot, after its last step: its number of
    steps (a NoC node, one slot per step of `line_steps`) or of bands (any other node)."""
    noc = ctx.sg.noc
    return len(steps) if noc is not None and noc.uses_lines(node) else len(bands)


def ring_padding(ring: int, slots: int, row_bytes: int, pl: int, width: int, wp: int, px: int):
    """(address, bytes) of the padding columns of every row slot of a line buffer whose rows are
    `wp` pixels wide with `pl` padding columns before the `width` image columns."""
    spans = [(ring + k * row_bytes, pl * px) for k in range(slots)]
    spans += [
        (ring + k * row_bytes + (width + pl) * px, (wp - width - pl) * px) for k in range(slots)
    ]
    return [(a, n) for a, n in spans if n > 0]


def noc_prologue(ctx: LowerCtx, core: int) -> list[np.ndarray]:
    """Zero the padding columns of the persistent input rows of a core's fed MVM nodes once per
    round, before any row can arrive (spatial/noc.py)."""
    noc = ctx.sg.noc
    if noc is None:
        return []
    out = []
    for n in ctx.sg.nodes:
        if n.core != core or n.id not in noc.ring_base or n.kind != NodeKind.MVM:
            continue
        ly = ctx.sg.layers[n.layer]
        wp = lines_geometry(ly, n)[4]
        px = ly.inputs[0].channels * ctx.eb
        for a, size in ring_padding(
            noc.ring_base[n.id],
            noc.ring_rows[n.id],
            wp * px,
            ly.pads[1],
            ly.inputs[0].width,
            wp,
            px,
        ):
            for a2, n2 in chunks(a, size):
                out.append(
                    make(
                        Opcode.LLDI,
                        rd=R_ZERO,
                        r2_or_imm=0,
                        generic1=OFFSET_RD,
                        generic2=a2,
                        generic3=n2,
                    )
                )
    return out


def message_records(ctx: LowerCtx, node: ComputeNode, reg: int):
    """The records of a node's NoC message slot k (spatial/noc.py order_messages): sends and recvs
    at the local addresses the message order chose, in order."""
    noc = ctx.sg.noc
    slots = noc.comm if noc is not None else {}

    def records(k: int | None) -> list[np.ndarray]:
        ms = slots.get((node.id, k)) if k is not None else None
        if ms is None or not len(ms):
            return []
        out = np.zeros(2 * len(ms), INST_DTYPE)  # per message: sldi reg, addr; send/recv reg
        out["rd"] = reg
        out["opcode"][0::2] = SLDI
        out["r2_or_imm"][0::2] = ms["addr"]
        out["opcode"][1::2] = np.where(ms["send"], SEND, RECV)
        out["r2_or_imm"][1::2] = ms["peer"]
        out["generic3"][1::2] = ms["size"]
        return [out]

    return records


def message_rows(
    ctx: LowerCtx, node: ComputeNode, k: int | None, row_at: dict[int, int], row_bytes: int
) -> np.ndarray | None:
    """The row of `row_at` (row -> local address of its first column, `row_bytes` long) that
    each message of node's slot k receives into (-1: a send, or elsewhere); None unless some
    message does, each row in a slot of its own (the rest of those rows came earlier in the
    core's program, in the slots of its other nodes)."""
    ms = ctx.sg.noc.comm.get((node.id, k)) if k is not None else None
    if ms is None or not len(ms) or len(set(row_at.values())) < len(row_at):
        return None
    recv, addr = ~ms["send"].astype(bool), ms["addr"]
    rows = np.full(len(ms), -1, np.int64)
    for iy, base in row_at.items():
        rows[recv & (addr >= base) & (addr < base + row_bytes)] = iy
    return rows if (rows >= 0).any() else None


def store_row(
    ctx: LowerCtx, node: ComputeNode, oy: int, xa: int, xb: int, out_row: int, reg: int
) -> list[np.ndarray]:
    """st columns [xa, xb) of output row oy from the local output row of a NoC producer, when its
    buffer keeps a host reader."""
    eb = ctx.eb
    layer = ctx.sg.layers[node.layer]
    out = layer.output
    if out.buffer not in ctx.sg.noc.host_buffers:
        return []
    px = layer.cols * eb
    w = out.width
    if out.contiguous:
        host = (out.channel_offset + (oy * w + xa) * out.pixel_stride) * eb
        return [
            sldi(reg, out_row + xa * px),
            make(
                Opcode.ST,
                rd=R_OUT,
                r1=reg,
                generic1=OFFSET_RD,
                generic2=host,
                generic3=(xb - xa) * px,
            ),
        ]
    xs = np.arange(xa, xb, dtype=np.int64)
    b = Block(len(xs))
    b.add(Opcode.SLDI, rd=reg, r2_or_imm=out_row + xs * px)
    host = (out.channel_offset + (oy * w + xs) * out.pixel_stride) * eb
    b.add(Opcode.ST, rd=R_OUT, r1=reg, generic1=OFFSET_RD, generic2=host, generic3=px)
    return [b.build()]


def own_pieces(ctx: LowerCtx, node: ComputeNode, iy: int, row: int, reg: int) -> list[np.ndarray]:
    """The pieces of input row iy that a mixed NoC node's own core produced, into its received
    row at local address `row` (column 0 of the input, after the left padding): lmv from the
    producer's persistent output rows when they keep every row (`NocPlan.own_local`), else ld
    from host memory, where the producer stored them earlier in the core's program."""
    noc = ctx.sg.noc
    if node.id not in noc.mixed:
        return []
    if node.id in noc.own_local:
        return own_copies(ctx, node, iy, reg)
    eb = ctx.eb
    v = ctx.sg.layers[node.layer].inputs[0]
    c = v.channels
    out = []
    for core, a, b, si in noc.pieces(node, iy):
        if core != node.core:
            continue
        src = noc.sources[node.layer][si]
        if src.flat:  # producer pixels [a, b) of the one input pixel
            cp = src.channels
            xs, off, size = np.array([0]), a * cp, (b - a) * cp
        elif src.channels == c and v.contiguous:
            xs, off, size = np.array([a]), 0, (b - a) * c
        else:
            xs, off, size = np.arange(a, b, dtype=np.int64), src.dst, src.channels
        host = (v.channel_offset + (iy * v.width + xs) * v.pixel_stride + off) * eb
        blk = Block(len(xs))
        blk.add(Opcode.SLDI, rd=reg, r2_or_imm=row + (xs * c + off) * eb)
        blk.add(Opcode.LD, rd=reg, r1=R_IN0, generic1=OFFSET_RS1, generic2=host, generic3=size * eb)
        out.append(blk.build())
    return out


def own_copies(ctx: LowerCtx, node: ComputeNode, iy: int, reg: int, k: int = 0) -> list[np.ndarray]:
    """lmv the pieces of row iy of input k (0 the window, 1 the residual) that the node's own
    core produced from the producers' output rows to the node's persistent row, at the addresses
    a message of them would use (message_span)."""
    noc = ctx.sg.noc
    if not noc.reads_own(node, k):
        return []
    s_reg = TEMPS[2] if reg != TEMPS[2] else TEMPS[3]
    out = []
    for prod, a, b, si in noc.piece_nodes(node, iy, k):
        if prod.core != node.core:
            continue
        src = noc.sources[node.layer][si]
        # a flat source's columns are producer pixels of the whole map: one piece per its row
        spans = row_spans(a, b, noc.width[src.layer]) if src.flat else {iy: (a, b)}
        for r, (xa, xb) in spans.items():
            count, size, s0, s_step, d0, d_step = message_span(
                ctx.sg, noc, prod, node, src, r, xa, xb
            )
            i = np.arange(count, dtype=np.int64)
            blk = Block(count)
            blk.add(Opcode.SLDI, rd=reg, r2_or_imm=d0 + i * d_step)
            blk.add(Opcode.SLDI, rd=s_reg, r2_or_imm=s0 + i * s_step)
            blk.add(Opcode.LMV, rd=reg, r1=s_reg, generic3=size)
            out.append(blk.build())
    return out
