"""Line-buffer lowering of MVM and pool nodes (with row-band tokens).

An MVM or pool node whose input rows are cheaper to load once than per pixel (or that the NoC
dataflow feeds or reads) keeps a ring of kh input rows in local memory and reads its windows from
there; the node's row-band tokens (spatial/sync.py) go between its bands.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np

from raptor.isa.opcodes import OFFSET_RD, OFFSET_RS1, Opcode
from raptor.isa.table import concat, make
from raptor.pim.emit import (
    LAST_LOCAL,
    R_IN0,
    R_ZERO,
    T_DST,
    TEMPS,
    Block,
    Regs,
    chunks,
    emit_activation,
    emit_st,
    emit_vv,
    merge_lanes,
    sldi,
)
from raptor.pim.lowering_ctx import LowerCtx
from raptor.pim.lowering_mvm import MvmTail, mvm_prologue, mvm_tail
from raptor.pim.lowering_noc import (
    end_slot,
    line_steps,
    message_records,
    message_rows,
    own_copies,
    own_pieces,
    ring_padding,
    store_row,
)
from raptor.pim.lowering_vector import pool_prologue
from raptor.pim.memalloc import LocalAllocator
from raptor.spatial.geometry import lines_geometry, lines_rows, window_classes
from raptor.spatial.ir import ComputeNode, Layer, LayerKind, NodeKind
from raptor.spatial.noc import mvm_lines_ok, pool_lines_ok
from raptor.spatial.tiling import row_tiles, tile_pack


def line_buffer_bytes(layer: Layer, node: ComputeNode, eb: int) -> tuple[int, int]:
    """(host bytes a line-buffer lowering loads, bytes the per-pixel window lowering loads) for
    the input window of an MVM node (the per-pixel figure assumes sliding windows)."""
    v = layer.inputs[0]
    kh, kw = layer.kernel_shape
    sw = layer.strides[1]
    i0, i1, x0, x1, _ = lines_geometry(layer, node)
    lines = len(lines_rows(layer, node, i0, i1)) * max(0, x1 - x0) * v.channels * eb
    k = node.r1 - node.r0
    if k == layer.rows and sw < kw:
        per_pixel = node.lanes * kh * sw * v.channels * eb
    else:
        per_pixel = node.lanes * k * eb
    return lines, per_pixel


def use_line_buffer(ctx: LowerCtx, node: ComputeNode) -> bool:
    layer = ctx.sg.layers[node.layer]
    if node.kind != NodeKind.MVM or not mvm_lines_ok(layer):
        return False
    if ctx.sg.noc is not None and ctx.sg.noc.uses_lines(node):
        return True  # a NoC consumer or producer (spatial/noc.py)
    if not ctx.line_buffers:
        return False
    # the row groups of one reduction tree must agree (their send/recv pair pixel by pixel, and
    # the per-pixel lowering goes in padding-class order): decide on the sum over the tree
    key = (node.layer, node.replica, node.c0, node.p0)
    if key not in ctx.line_choice:
        tree = [
            n
            for n in ctx.sg.nodes
            if n.kind == NodeKind.MVM and (n.layer, n.replica, n.c0, n.p0) == key
        ]
        cost = np.sum([line_buffer_bytes(layer, n, ctx.eb) for n in tree], axis=0)
        ctx.line_choice[key] = bool(cost[0] < cost[1])
    return ctx.line_choice[key]


def load_host_row(v, iy: int, x0: int, x1: int, base: int, reg: int, eb: int) -> list[np.ndarray]:
    """ld columns [x0, x1) of row iy of host view v to local address `base` (column x0): one ld
    when the view's pixels are contiguous, else one per pixel."""
    c = v.channels
    if v.contiguous:
        host = (v.channel_offset + (iy * v.width + x0) * v.pixel_stride) * eb
        return [
            sldi(reg, base),
            make(
                Opcode.LD,
                rd=reg,
                r1=R_IN0,
                generic1=OFFSET_RS1,
                generic2=host,
                generic3=(x1 - x0) * c * eb,
            ),
        ]
    xs = np.arange(x0, x1, dtype=np.int64)
    b = Block(len(xs))
    b.add(Opcode.SLDI, rd=reg, r2_or_imm=base + (xs - x0) * c * eb)
    host = (v.channel_offset + (iy * v.width + xs) * v.pixel_stride) * eb
    b.add(Opcode.LD, rd=reg, r1=R_IN0, generic1=OFFSET_RS1, generic2=host, generic3=c * eb)
    return [b.build()]


def lower_mvm_lines(
    ctx: LowerCtx,
    node: ComputeNode,
    ag_base: int,
    alloc: LocalAllocator,
    bands: list[tuple[int, int]],
    before: list[list[np.ndarray]],
    after: list[list[np.ndarray]],
) -> np.ndarray:
    """MVM node over a local ring of kh input rows (zero-padded borders, zeroed once): each input
    row segment the node needs is loaded from host memory once; a row tile within one kernel row
    is read in place by the mvmul, others are assembled in the window with lmv. Band tokens go
    before/after each band's output pixels."""
    arch, eb = ctx.arch, ctx.eb
    layer = ctx.sg.layers[node.layer]
    v = layer.inputs[0]
    c = v.channels
    kh, kw = layer.kernel_shape
    sh, sw = layer.strides
    pt, pl = layer.pads[0], layer.pads[1]
    ow = layer.output.width
    krow = kw * c
    cols = node.c1 - node.c0
    tiles = row_tiles(arch, node.r0, node.r1)
    # a packed last tile (spatial/tiling.py pack_factor): k pixels' inputs copied side by side,
    # one mvmul for all of them
    pack = tile_pack(arch, *tiles[-1], layer.pack)
    packed = tiles.pop() if pack > 1 else None
    srcs, dst_core = ctx.links.get(node.id, ((), -1))
    i0, i1, x0, x1, wp = lines_geometry(layer, node)
    row_bytes = wp * c * eb
    noc = ctx.sg.noc
    fed = noc is not None and noc.is_fed(node)
    # a fed node's rows sit in its persistent NoC buffer, padding zeroed at program start
    halo = ctx.halo.get(node.id)  # rows other replicas load and send (raptor.pim.halo)
    area = ctx.halo_area.get(node.id)  # every input row in the core's halo area
    ring = None if fed or area is not None else alloc.alloc(kh * row_bytes, "ring")
    zero_row = alloc.alloc(row_bytes, "zero row")
    h0, h1 = halo.received if halo is not None and area is None else (0, 0)
    hbuf = alloc.alloc((h1 - h0) * row_bytes, "halo") if h1 > h0 else None
    cross = [(a, b) for a, b in tiles if a // krow != (b - 1) // krow]
    win = alloc.alloc(max((b - a for a, b in cross), default=1) * eb, "window")
    ps_a = alloc.alloc(cols * eb, "psum")
    residual = layer.inputs[1] if len(layer.inputs) > 1 and dst_core < 0 else None
    need_b = len(tiles) > 1 or layer.activation == "silu" or bool(srcs) or residual is not None
    ps_b = alloc.alloc(cols * eb, "psum2") if need_b else None
    if packed is not None:
        pk_rows = packed[1] - packed[0]
        pk_in = alloc.alloc(pack * pk_rows * eb, "pack input")
        pk_out = alloc.alloc(pack * cols * eb, "pack output")
    last = dst_core < 0
    pro, regs, bias = mvm_prologue(ctx, layer, node, v.buffer, residual, last, alloc, cols, eb)
    tail = MvmTail(layer, node, srcs, dst_core, ps_a, ps_b, bias, residual, eb)
    regs.loc(ps_a)
    if ps_b is not None:
        regs.loc(ps_b)
    regs.loc(win)
    if packed is not None and regs.next <= LAST_LOCAL - 5:
        regs.loc(pk_in)
        regs.loc(pk_out)
    # zero the ring's padding columns and the zero row once (the node reads only columns
    # [x0, x1) of a row, which every load writes, and the padding)
    spans = [] if ring is None else ring_padding(ring, kh, row_bytes, pl, v.width, wp, c * eb)
    spans += chunks(zero_row, row_bytes)
    if hbuf is not None:
        spans += chunks(hbuf, (h1 - h0) * row_bytes)
    for m in halo.members if halo is not None else ():  # the areas the prologue fills
        r0, r1 = ctx.halo[m].rows
        spans += chunks(ctx.halo_area[m], (r1 - r0) * row_bytes)
    zero_all = [
        make(Opcode.LLDI, rd=R_ZERO, r2_or_imm=0, generic1=OFFSET_RD, generic2=a, generic3=n)
        for a, n in spans
        if n > 0
    ]
    t_addr, t_src = TEMPS[3], TEMPS[2]
    blocks: list[np.ndarray] = regs.flush() + zero_all
    loaded: set[int] = set()
    mbiw = arch.weight_bits

    def area_row(nid: int, iy: int) -> int:  # row iy in node nid's halo area
        return ctx.halo_area[nid] + (iy - ctx.halo[nid].rows[0]) * row_bytes

    def slot(iy: int) -> int:
        if fed:
            return noc.in_row_addr(node, iy)
        if area is not None:
            return area_row(node.id, iy)
        if h0 <= iy < h1:
            return hbuf + (iy - h0) * row_bytes
        return ring + (iy % kh) * row_bytes

    sender = last and noc is not None and noc.writes_rows(node)
    res_fed = noc is not None and node.id in noc.res_fed
    out_at = partial(noc.out_row_addr, node) if sender else None
    comm = message_records(ctx, node, t_addr)

    def load_row(iy: int) -> list[np.ndarray]:
        loaded.add(iy)
        if fed:  # received in the node's message slots, but a mixed node's own core's pieces
            return own_pieces(ctx, node, iy, slot(iy) + pl * c * eb, t_addr)
        base = slot(iy) + (x0 + pl) * c * eb
        if v.pixels == 1 and krow == c:  # a classifier's one pixel: only the node's K range
            host = (v.channel_offset + node.r0) * eb
            return [
                sldi(t_addr, base + node.r0 * eb),
                make(
                    Opcode.LD,
                    rd=t_addr,
                    r1=R_IN0,
                    generic1=OFFSET_RS1,
                    generic2=host,
                    generic3=(node.r1 - node.r0) * eb,
                ),
            ]
        return load_host_row(v, iy, x0, x1, base, t_addr, eb)

    if halo is not None:
        # the core's part of the exchange (on its first node of the layer): whole rows, loaded
        # from host memory or received into the slots of the node they are for
        def row_at(nid: int, iy: int) -> int:
            return slot(iy) if nid == node.id else area_row(nid, iy)

        inner, size = pl * c * eb, v.width * c * eb
        for nid, iy in halo.preload:
            blocks += load_host_row(v, iy, 0, v.width, row_at(nid, iy) + inner, t_addr, eb)
        for send, peer, nid, a, b in halo.exchanges:
            op = Opcode.SEND if send else Opcode.RECV
            for iy in range(a, b):
                blocks += [
                    sldi(t_addr, row_at(nid, iy) + inner),
                    make(op, rd=t_addr, r2_or_imm=peer, generic3=size),
                ]
        loaded |= halo.present
    steps = line_steps(ctx, node, bands, before, after)
    # One lane block holds the pixels of every step: its records run lane by lane, so each step's
    # pixels are one contiguous run of them, cut out below between the step's messages, loads
    # and stores. Per lane: the address of each kernel row's input row (or the zero row).
    loads: list[list[int]] = []
    addrs, outs, ress = [], [], []  # per step
    for oy, *_ in steps:
        rows, at = [], []
        for i in range(kh):
            iy = oy * sh - pt + i
            if i0 <= i < i1 and 0 <= iy < v.height:
                rows.append(iy)
                at.append(slot(iy))
            else:
                at.append(zero_row)
        loads.append(rows)
        addrs.append(at)
        if sender:
            outs.append(out_at(oy))
        if residual is not None and res_fed:
            ress.append(noc.in_row_addr(node, oy, 1))
    if steps:
        # per lane (pixel): its step's values, its pixel and its column in the output row
        st_oy, st_pa, st_pb = (np.array([s[f] for s in steps], np.int64) for f in range(3))
        count = st_pb - st_pa
        first = np.cumsum(count) - count  # each step's first lane
        pix = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(st_pa - first, count)
        ox = pix - np.repeat(st_oy * ow, count)
        rows_addr = np.repeat(np.array(addrs, np.int64), count, axis=0).T
        outs_l = np.repeat(np.array(outs, np.int64), count) if sender else None
        ress_l = np.repeat(np.array(ress, np.int64), count) if ress else None

        def tile_src(b: Block, ta: int, tb: int, ln, dest: int | None = None) -> int:
            """Register holding the address of row tile [ta, tb)'s input for lanes ln: in place
            in its kernel row's input row when it lies in one and no dest is given, else lmv'd
            into dest (the window) segment by segment."""
            i = ta // krow
            if dest is None and i == (tb - 1) // krow:
                addr = rows_addr[i][ln] + (ox[ln] * sw * c + ta - i * krow) * eb
                b.add(Opcode.SLDI, rd=t_src, r2_or_imm=addr)
                return t_src
            dest = win if dest is None else dest
            for s in range(ta, tb):
                if s != ta and s % krow:
                    continue
                i = s // krow
                e = min(tb, (i + 1) * krow)
                addr = rows_addr[i][ln] + (ox[ln] * sw * c + s - i * krow) * eb
                b.add(Opcode.SLDI, rd=t_src, r2_or_imm=addr)
                b.add(
                    Opcode.LMV,
                    rd=regs.loc(dest + (s - ta) * eb, b),
                    r1=t_src,
                    generic3=(e - s) * eb,
                )
            return regs.loc(dest, b)

        def lane_body(b: Block, ln, pack_slot=None) -> None:
            """The mvmuls and the finish of lanes ln (pack_slot: their block of the pack's
            output, a lane array)."""
            for t, (ta, tb) in enumerate(tiles):
                dst = ps_a if t == 0 else ps_b
                src_reg = tile_src(b, ta, tb, ln)
                b.add(
                    Opcode.MVMUL,
                    rd=regs.loc(dst, b),
                    r1=src_reg,
                    r2_or_imm=mbiw,
                    generic2=ag_base + t,
                )
                if t > 0:
                    emit_vv(b, regs, Opcode.VVADD, ps_a, ps_a, ps_b, cols)
            if pack_slot is not None:
                b.add(Opcode.SLDI, rd=t_src, r2_or_imm=pack_slot)
                ra = regs.loc(ps_a, b)
                if tiles:
                    b.add(Opcode.VVADD, rd=ra, r1=ra, r2_or_imm=t_src, generic3=cols)
                else:
                    b.add(Opcode.LMV, rd=ra, r1=t_src, generic3=cols * eb)
            mvm_tail(
                b,
                regs,
                tail,
                pix[ln],
                None if outs_l is None else outs_l[ln],
                ox[ln],
                None if ress_l is None else ress_l[ln],
            )

        if packed is None:
            b = Block(len(ox))
            lane_body(b, slice(None))
            presets = regs.flush()
            built = b.build()
            offsets = np.arange(len(ox) + 1, dtype=np.int64) * len(b.slots)
        else:
            # the pixels of each step in packs of k (the last one of a step shorter: a pack never
            # spans two steps, whose messages and stores go between them); a pack's first lane
            # copies the pack's inputs and runs its mvmul, every lane adds its block of the output
            pos = np.arange(len(ox), dtype=np.int64) - np.repeat(first, count)
            member = pos % pack  # a lane's place in its pack
            size_of = np.minimum(pack, np.repeat(count, count) - (pos - member))  # its pack's size
            slot_addr = pk_out + member * cols * eb
            parts = []
            for size in [0, *np.unique(size_of[member == 0]).tolist()]:
                ln = (
                    np.flatnonzero(member > 0)
                    if size == 0
                    else np.flatnonzero((member == 0) & (size_of == size))
                )
                if not len(ln):
                    continue
                b = Block(len(ln))
                if size:
                    for q in range(size):
                        tile_src(b, *packed, ln + q, pk_in + q * pk_rows * eb)
                    b.add(
                        Opcode.MVMUL,
                        rd=regs.loc(pk_out, b),
                        r1=regs.loc(pk_in, b),
                        r2_or_imm=mbiw,
                        generic2=ag_base + len(tiles),
                    )
                lane_body(b, ln, slot_addr[ln])
                parts.append((ln, len(b.slots), b.build()))
            presets = regs.flush()
            built = merge_lanes(parts)
            lens = np.zeros(len(ox), np.int64)
            for ln, n_slots, _ in parts:
                lens[ln] = n_slots
            offsets = np.concatenate([[0], np.cumsum(lens)])
    lane = 0
    for j, (oy, pa, pb, pre, post, k) in enumerate(steps):
        blocks += comm(k) + pre
        for iy in loads[j]:
            if iy not in loaded:
                blocks += load_row(iy)
        if res_fed and (j == 0 or steps[j - 1][0] != oy):  # the residual row's own pieces
            blocks += own_copies(ctx, node, oy, t_addr, 1)
        if j == 0:
            blocks += presets
        blocks.append(built[offsets[lane] : offsets[lane + pb - pa]])
        lane += pb - pa
        if sender:
            blocks += store_row(ctx, node, oy, pa - oy * ow, pb - oy * ow, out_at(oy), t_addr)
        blocks += post
    blocks += comm(end_slot(ctx, node, steps, bands))
    return concat(blocks)


def reduce_rows(
    addrs: list[int], dst: int, n: int, eb: int, op: Opcode, regs: Regs
) -> list[np.ndarray]:
    """Records that reduce the `n` elements (`eb` bytes each) at each of `addrs`, in that order,
    into `dst` with `op` (vvadd/vvmax), a copy for a single address; sldi into the pool's two
    temporaries."""
    t_src, t_addr = TEMPS[2], TEMPS[3]
    b = Block(1)
    b.add(Opcode.SLDI, rd=t_src, r2_or_imm=addrs[0])
    if len(addrs) == 1:
        b.add(Opcode.LMV, rd=regs.loc(dst, b), r1=t_src, generic3=n * eb)
    else:
        b.add(Opcode.SLDI, rd=t_addr, r2_or_imm=addrs[1])
        b.add(op, rd=regs.loc(dst, b), r1=t_src, r2_or_imm=t_addr, generic3=n)
        for a in addrs[2:]:
            b.add(Opcode.SLDI, rd=t_addr, r2_or_imm=a)
            b.add(op, rd=regs.loc(dst, b), r1=regs.loc(dst, b), r2_or_imm=t_addr, generic3=n)
    return regs.flush() + [b.build()]


def reduce_on_arrival(
    ctx: LowerCtx,
    node: ComputeNode,
    k: int,
    messages: list[np.ndarray],
    rows: np.ndarray,
    row_at: dict[int, int],
    row_bytes: int,
    dst: int,
    op: Opcode,
    fold: int = 0,
) -> list[np.ndarray]:
    """A message slot's records (two per message: sldi, send/recv) with the rows of a whole-row
    step (`row_at`: row -> address, `row_bytes` long) reduced into `dst` as they come: first the
    bytes that came earlier in the core's program (all that the slot's messages do not
    receive: `rows`, `message_rows`), then after each recv its bytes, copied to the same offset
    of `dst` where no row reached yet, else reduced into it with `op` (vvadd/vvmax). With `fold`
    (the channels of a pixel: a pool of one output pixel over whole rows) every pixel is reduced
    into the one pixel at `dst` instead. Only the last message's piece is left for after the
    last recv, where a whole-window pool reduced every row, and then every pixel, there."""
    eb = ctx.eb
    ms = ctx.sg.noc.comm[(node.id, k)]
    recs = concat(messages)
    seen = np.zeros(fold or row_bytes // eb, bool)  # elements of `dst` some piece reached
    t_dst, t_src = TEMPS[1], TEMPS[2]

    def reduce(src: int, e0: int, e1: int) -> np.ndarray:
        """Elements [e0, e1) of the row at `src` into `dst`."""
        b = Block(1)
        bounds = [e0, *range((e0 // fold + 1) * fold, e1, fold), e1] if fold else [e0, e1]
        for s0, s1 in zip(bounds[:-1], bounds[1:]):
            d0 = s0 % fold if fold else s0
            piece = seen[d0 : d0 + s1 - s0]
            cuts = np.flatnonzero(np.diff(piece.astype(np.int8))) + 1
            for lo, hi in zip([0, *cuts], [*cuts, len(piece)]):
                b.add(Opcode.SLDI, rd=t_dst, r2_or_imm=dst + (d0 + int(lo)) * eb)
                b.add(Opcode.SLDI, rd=t_src, r2_or_imm=src + (s0 + int(lo)) * eb)
                if piece[lo]:
                    b.add(op, rd=t_dst, r1=t_dst, r2_or_imm=t_src, generic3=int(hi - lo))
                else:
                    b.add(Opcode.LMV, rd=t_dst, r1=t_src, generic3=int(hi - lo) * eb)
            seen[d0 : d0 + s1 - s0] = True
        return b.build()

    out = []
    for iy, src in row_at.items():  # what came before this slot
        came = np.ones(row_bytes // eb, bool)
        for j in np.flatnonzero(rows == iy):
            e0 = (int(ms["addr"][j]) - src) // eb
            came[e0 : e0 + int(ms["size"][j]) // eb] = False
        edges = np.flatnonzero(np.diff(np.concatenate([[0], came.astype(np.int8), [0]])))
        out += [reduce(src, int(e0), int(e1)) for e0, e1 in zip(edges[0::2], edges[1::2])]
    for j in range(len(ms)):
        out.append(recs[2 * j : 2 * j + 2])
        if rows[j] >= 0:
            src = row_at[int(rows[j])]
            e0 = (int(ms["addr"][j]) - src) // eb
            out.append(reduce(src, e0, e0 + int(ms["size"][j]) // eb))
    return out


def pool_line_buffer_bytes(layer: Layer, node: ComputeNode, eb: int) -> tuple[int, int]:
    """(host bytes a line-buffer pool loads, bytes the per-pixel window pool loads)."""
    v = layer.inputs[0]
    kh, kw = layer.kernel_shape
    full = replace(node, r0=0, r1=kh * kw * v.channels)
    i0, i1, x0, x1, _ = lines_geometry(layer, full)
    lines = len(lines_rows(layer, full, 0, kh)) * max(0, x1 - x0) * v.channels * eb
    per_pixel = sum(len(cl.pixels) * cl.count for cl in window_classes(layer, node.p0, node.p1))
    return lines, per_pixel * v.channels * eb


def lower_pool_lines(
    ctx: LowerCtx,
    node: ComputeNode,
    alloc: LocalAllocator,
    bands: list[tuple[int, int]],
    before: list[list[np.ndarray]],
    after: list[list[np.ndarray]],
) -> np.ndarray:
    """Max/average pool over a local ring of kh input rows, each loaded once: per output row the
    in-bounds rows are reduced into one row, then each pixel reduces its in-bounds columns (lanes
    grouped by horizontal padding class); a NoC step over whole rows whose message slot receives
    them (a global pool) reduces them while they come (`reduce_on_arrival`), so only the last
    piece is left when the last recv is in. Band tokens go before/after each band."""
    eb = ctx.eb
    layer = ctx.sg.layers[node.layer]
    v, out = layer.inputs[0], layer.output
    c = v.channels
    kh, kw = layer.kernel_shape
    sh, sw = layer.strides
    pt, pl = layer.pads[0], layer.pads[1]
    ow = out.width
    is_max = layer.kind == LayerKind.MAXPOOL
    op = Opcode.VVMAX if is_max else Opcode.VVADD
    full = replace(node, r0=0, r1=kh * kw * c)
    _, _, x0, x1, _ = lines_geometry(layer, full)
    row_bytes = v.width * c * eb
    pro, regs, counts, recip = pool_prologue(ctx, layer, node, is_max, alloc, c, eb)
    noc = ctx.sg.noc
    fed = noc is not None and noc.is_fed(node)
    ring = None if fed else alloc.alloc(kh * row_bytes, "ring")
    red = alloc.alloc(row_bytes, "row")
    acc = alloc.alloc(c * eb, "acc")
    tmp = alloc.alloc(c * eb, "tmp")
    regs.loc(acc)
    regs.loc(red)
    t_addr, t_src = TEMPS[3], TEMPS[2]
    sender = noc is not None and noc.writes_rows(node)
    out_at = partial(noc.out_row_addr, node) if sender else None
    blocks: list[np.ndarray] = regs.flush()
    loaded: set[int] = set()

    def slot(iy: int) -> int:
        return noc.in_row_addr(node, iy) if fed else ring + (iy % kh) * row_bytes

    comm = message_records(ctx, node, t_addr)
    steps = line_steps(ctx, node, bands, before, after)
    for oy, pa, pb, pre, post, k in steps:
        rows = [oy * sh - pt + i for i in range(kh) if 0 <= oy * sh - pt + i < v.height]
        # the columns this step's windows read, reduced over the in-bounds rows into `red`
        ca = max(0, (pa - oy * ow) * sw - pl)
        cb = min(v.width, (pb - 1 - oy * ow) * sw - pl + kw)
        vseg = (cb - ca) * c
        r0 = red + ca * c * eb
        # a step over whole rows that all come in its own message slot (a global pool) reduces
        # them as they come, not all once the last one is in
        whole = fed and node.id not in noc.mixed and len(rows) > 1 and (ca, cb) == (0, v.width)
        at = {iy: slot(iy) for iy in rows}
        arriving = (
            message_rows(ctx, node, k, at, row_bytes) if whole and not loaded & set(rows) else None
        )
        # one output pixel whose window covers every column: pixels reduced into `acc` too
        fold = c if arriving is not None and pb - pa == 1 and kw >= v.width + pl else 0
        if arriving is not None:
            into = acc if fold else r0
            blocks += reduce_on_arrival(
                ctx, node, k, comm(k), arriving, at, row_bytes, into, op, fold
            )
            blocks += pre
            loaded.update(rows)
        else:
            blocks += comm(k) + pre
        for iy in rows:
            if iy in loaded:
                continue
            loaded.add(iy)
            if fed:  # received in the node's message slots, but a mixed node's own pieces
                blocks += own_pieces(ctx, node, iy, slot(iy), t_addr)
                continue
            blocks += load_host_row(v, iy, x0, x1, slot(iy) + x0 * c * eb, t_addr, eb)
        if arriving is None:
            blocks += reduce_rows([slot(iy) + ca * c * eb for iy in rows], r0, vseg, eb, op, regs)
        # horizontal reduction per pixel, lanes grouped by in-bounds columns
        ox = np.arange(pa - oy * ow, pb - oy * ow, dtype=np.int64)
        ix0 = ox * sw - pl
        jlo = np.clip(-ix0, 0, kw)
        jhi = np.clip(v.width - ix0, 0, kw)
        key = jlo * (kw + 1) + jhi
        parts = []
        for k in np.unique(key):
            m = key == k
            lo, hi = int(jlo[m][0]), int(jhi[m][0])
            xs = ix0[m]
            b = Block(int(m.sum()))
            if not fold:  # a folded pool's pixels are in `acc` already
                b.add(Opcode.SLDI, rd=t_src, r2_or_imm=red + (xs + lo) * c * eb)
                b.add(Opcode.LMV, rd=regs.loc(acc, b), r1=t_src, generic3=c * eb)
                for j in range(lo + 1, hi):
                    b.add(Opcode.SLDI, rd=t_src, r2_or_imm=red + (xs + j) * c * eb)
                    b.add(op, rd=regs.loc(acc, b), r1=regs.loc(acc, b), r2_or_imm=t_src, generic3=c)
            if recip is not None:
                cnt = kh * kw if layer.count_include_pad else len(rows) * (hi - lo)
                emit_vv(b, regs, Opcode.VVMUL, acc, acc, recip + counts.index(cnt) * c * eb, c)
            emit_activation(b, regs, layer.activation, acc, tmp, c)
            pix = oy * ow + ox[m]
            if sender:
                b.add(Opcode.SLDI, rd=T_DST, r2_or_imm=out_at(oy) + ox[m] * c * eb)
                b.add(Opcode.LMV, rd=T_DST, r1=regs.loc(acc, b), generic3=c * eb)
            else:
                emit_st(b, regs, acc, (out.channel_offset + pix * out.pixel_stride) * eb, c * eb)
            parts.append((np.flatnonzero(m), len(b.slots), b.build()))
        blocks += regs.flush() + [merge_lanes(parts)]
        if sender:
            blocks += store_row(ctx, node, oy, pa - oy * ow, pb - oy * ow, out_at(oy), t_addr)
        blocks += post
    blocks += comm(end_slot(ctx, node, steps, bands))
    return concat(blocks)


def use_pool_line_buffer(ctx: LowerCtx, node: ComputeNode) -> bool:
    layer = ctx.sg.layers[node.layer]
    if not pool_lines_ok(layer):
        return False
    if ctx.sg.noc is not None and ctx.sg.noc.uses_lines(node):
        return True
    if not ctx.line_buffers:
        return False
    lines, per_pixel = pool_line_buffer_bytes(layer, node, ctx.eb)
    return lines < per_pixel
