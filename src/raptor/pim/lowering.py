"""Lowering of compute nodes to instruction blocks, built with numpy over all lanes of a class.

Register convention (32 registers): r0 = 0, r1/r2 = host base of the inputs, r3 = host base of
the output, r4 = host base of a constant; r5..r27 hold the node's fixed local addresses (set in
its prologue); r28..r31 are temporaries for local addresses beyond that (an sldi right before the
instruction that uses it). Host addresses of lanes ride in the offset field (ld: rs1 offset, st:
rd offset), so an ld or st is one record per lane.

MVM node, per output pixel: ld each in-bounds kernel-row segment into the local window (padding
is zeroed once per padding class with lldi), one mvmul per row tile into partial-sum buffers,
vvadd reduction; a row group of a multi-group layer then recv's and vvadd's the partial sums of
its reduction subtrees (ir.SpatialGraph.reduce_links) and sends its sum to its parent; the root
(or only) group adds bias (and a fused residual, spatial/fusion.py), applies the activation and
st's the column slice into the pixel.

Line buffers (`lower_node_bands`, used by codegen for every node): an MVM or pool node whose input
rows are cheaper to load once than per pixel keeps a ring of kh input rows in local memory and
reads its windows from there (`lower_mvm_lines`, `lower_pool_lines`); the node's row-band tokens
(spatial/sync.py) go between its bands.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from raptor.arch import Arch
from raptor.isa.opcodes import OFFSET_RD, OFFSET_RS1, Opcode
from raptor.isa.table import concat, interleave, make
from raptor.pim.memalloc import LocalAllocator
from raptor.spatial.geometry import (
    WindowClass,
    lines_geometry,
    lines_rows,
    pool_counts,
    window_classes,
)
from raptor.spatial.ir import ComputeNode, Layer, LayerKind, NodeKind, SpatialGraph
from raptor.spatial.message_order import row_segments, row_steps
from raptor.spatial.noc import mvm_lines_ok, pool_lines_ok
from raptor.spatial.tiling import row_tiles

R_ZERO, R_IN0, R_IN1, R_OUT, R_CONST = 0, 1, 2, 3, 4
FIRST_LOCAL, LAST_LOCAL = 5, 27
TEMPS = (28, 29, 30, 31)
T_DST = TEMPS[1]  # per-lane destination in a NoC producer's output row


class Block:
    """A per-lane instruction template over `lanes` lanes; a field is a scalar or a lane array."""

    def __init__(self, lanes: int):
        self.lanes = lanes
        self.slots: list[tuple[int, dict]] = []

    def add(self, op: Opcode, **fields) -> None:
        self.slots.append((int(op), fields))

    def build(self) -> np.ndarray:
        if not self.slots or self.lanes == 0:
            return make(0, 0)
        return interleave([make(op, self.lanes, **f) for op, f in self.slots])


class Regs:
    """Local-address registers of one node: preset in the prologue while they last."""

    def __init__(self, prologue: list[np.ndarray]):
        self.map: dict[int, int] = {}
        self.next = FIRST_LOCAL
        self.prologue = prologue  # sldi of new preset registers go here until flush()
        self.t = 0

    def flush(self) -> list[np.ndarray]:
        """The sldi records of registers preset since the last flush (emit before the block)."""
        out, self.prologue[:] = list(self.prologue), []
        return out

    def loc(self, addr: int, block: Block | None = None) -> int:
        r = self.map.get(addr)
        if r is not None:
            return r
        if self.next <= LAST_LOCAL or block is None:
            if self.next > LAST_LOCAL:
                raise RuntimeError("out of preset registers outside a block")
            r = self.next
            self.next += 1
            self.map[addr] = r
            self.prologue.append(make(Opcode.SLDI, rd=r, r2_or_imm=addr))
            return r
        r = TEMPS[self.t % len(TEMPS)]
        self.t += 1
        block.add(Opcode.SLDI, rd=r, r2_or_imm=addr)
        return r


@dataclass
class LowerCtx:
    arch: Arch
    sg: SpatialGraph
    address: dict[str, int]  # host buffer -> byte address
    links: dict[int, tuple[tuple[int, ...], int]] = field(default_factory=dict)  # reduce_links
    line_choice: dict[tuple[int, int, int, int], bool] = field(default_factory=dict)

    @property
    def eb(self) -> int:
        return self.arch.element_bytes

    def capacity(self, core: int) -> int:
        """Local memory a node's scratch may use: below the core's persistent NoC buffers."""
        noc = self.sg.noc
        persist = noc.persist.get(core, 0) if noc is not None else 0
        return self.arch.core.local_memory.memory_size - persist


def _sldi(r: int, v: int) -> np.ndarray:
    return make(Opcode.SLDI, rd=r, r2_or_imm=int(v))


def _ld(block: Block, regs: Regs, local: int, base_reg: int, host_off, size: int) -> None:
    block.add(
        Opcode.LD,
        rd=regs.loc(local, block),
        r1=base_reg,
        generic1=OFFSET_RS1,
        generic2=host_off,
        generic3=size,
    )


def _st(block: Block, regs: Regs, local: int, host_off, size: int) -> None:
    block.add(
        Opcode.ST,
        rd=R_OUT,
        r1=regs.loc(local, block),
        generic1=OFFSET_RD,
        generic2=host_off,
        generic3=size,
    )


def _vv(block: Block, regs: Regs, op: Opcode, d: int, a: int, b: int | None, n: int) -> None:
    rd = regs.loc(d, block)
    ra = regs.loc(a, block)
    rb = regs.loc(b, block) if b is not None else 0
    block.add(op, rd=rd, r1=ra, r2_or_imm=rb, generic3=n)


def _activation(block: Block, regs: Regs, act: str | None, a: int, tmp: int | None, n: int) -> None:
    if act == "relu":
        _vv(block, regs, Opcode.VRELU, a, a, None, n)
    elif act == "sigmoid":
        _vv(block, regs, Opcode.VSIGM, a, a, None, n)
    elif act == "silu":
        _vv(block, regs, Opcode.VSIGM, tmp, a, None, n)
        _vv(block, regs, Opcode.VVMUL, a, a, tmp, n)


def _segments(
    layer: Layer, cls: WindowClass, lo: int, hi: int
) -> list[tuple[int, int, np.ndarray]]:
    """(window element start, length, host element offset per lane) of the in-bounds input of a
    padding class, clipped to window elements [lo, hi)."""
    v = layer.inputs[0]
    kw = layer.kernel_shape[1]
    c = v.channels
    out = []
    for i in range(cls.ilo, cls.ihi):
        row = (cls.iy0 + i) * v.width + cls.ix0
        if v.contiguous:
            parts = [(cls.jlo, cls.jhi)]
        else:
            parts = [(j, j + 1) for j in range(cls.jlo, cls.jhi)]
        for j0, j1 in parts:
            s, e = (i * kw + j0) * c, (i * kw + j1) * c
            s2, e2 = max(s, lo), min(e, hi)
            if e2 > s2:
                out.append((s2, e2 - s2, v.channel_offset + (row + j0) * v.pixel_stride + (s2 - s)))
    return out


def _zero_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) runs of False in mask."""
    m = np.concatenate([[True], mask, [True]])
    d = np.diff(m.astype(np.int8))
    starts = np.flatnonzero(d == -1)
    ends = np.flatnonzero(d == 1)
    return [(int(s), int(e - s)) for s, e in zip(starts, ends)]


def _subclass(cls: WindowClass, mask: np.ndarray) -> WindowClass:
    return WindowClass(
        cls.ilo, cls.ihi, cls.jlo, cls.jhi, cls.pixels[mask], cls.iy0[mask], cls.ix0[mask]
    )


def _sliding_lanes(layer: Layer, cls: WindowClass, whole_window: bool) -> np.ndarray:
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


def _slide_window(b: Block, regs: Regs, layer: Layer, cls: WindowClass, win: int, eb: int) -> None:
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
            _ld(b, regs, win + (i * kw + j0) * c * eb, R_IN0, host * eb, (j1 - j0) * c * eb)


def _merge_lanes(parts: list[tuple[np.ndarray, int, np.ndarray]]) -> np.ndarray:
    """Merge per-lane blocks built for disjoint lane subsets back into lane order."""
    if len(parts) == 1:
        return parts[0][2]
    keys = np.concatenate([np.repeat(lanes, slots) for lanes, slots, _ in parts])
    code = np.concatenate([blk for _, _, blk in parts])
    return code[np.argsort(keys, kind="stable")]


def _mvm_prologue(ctx, layer, node, in_buffer, residual, last: bool, alloc, cols: int, eb: int):
    """Base registers of an MVM node (input, fused residual, output) and, for the root row group,
    the node's bias slice loaded once into local memory. Returns (prologue, regs, bias or None)."""
    pro: list[np.ndarray] = [_sldi(R_IN0, ctx.address[in_buffer])]
    regs = Regs(pro)
    if residual is not None:
        pro.append(_sldi(R_IN1, ctx.address[residual.buffer]))
    bias = None
    if last:
        pro.append(_sldi(R_OUT, ctx.address[layer.output.buffer]))
        bias = alloc.alloc(cols * eb, "bias")
        pro.append(_sldi(R_CONST, ctx.address[layer.bias_buffer]))
        pro.append(
            make(
                Opcode.LD,
                rd=regs.loc(bias),
                r1=R_CONST,
                generic1=OFFSET_RS1,
                generic2=node.c0 * eb,
                generic3=cols * eb,
            )
        )
    return pro, regs, bias


def lower_mvm(ctx: LowerCtx, node: ComputeNode, ag_base: int, alloc: LocalAllocator) -> np.ndarray:
    arch, eb = ctx.arch, ctx.eb
    layer = ctx.sg.layers[node.layer]
    cols = node.c1 - node.c0
    tiles = row_tiles(arch, node.r0, node.r1)
    srcs, dst_core = ctx.links.get(node.id, ((), -1))
    win = alloc.alloc((node.r1 - node.r0) * eb, "window")
    ps_a = alloc.alloc(cols * eb, "psum")
    residual = layer.inputs[1] if len(layer.inputs) > 1 and dst_core < 0 else None
    need_b = len(tiles) > 1 or layer.activation == "silu" or bool(srcs) or residual is not None
    ps_b = alloc.alloc(cols * eb, "psum2") if need_b else None
    last = dst_core < 0  # the root row group (or the only one) finishes the pixel
    pro, regs, bias = _mvm_prologue(
        ctx, layer, node, layer.inputs[0].buffer, residual, last, alloc, cols, eb
    )
    out = layer.output
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
        segs = _segments(layer, cls, node.r0, node.r1)
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
            for s, n in _zero_runs(covered)
        ]
        k_all = node.r1 - node.r0
        slide = _sliding_lanes(layer, cls, k_all == layer.rows)
        parts = []
        for lanes_mask, sliding in ((~slide, False), (slide, True)):
            if not lanes_mask.any():
                continue
            sub = _subclass(cls, lanes_mask)
            b = Block(len(sub.pixels))
            if sliding:
                _slide_window(b, regs, layer, sub, win, eb)
            else:
                for s, n, host in _segments(layer, sub, node.r0, node.r1):
                    _ld(b, regs, win + (s - node.r0) * eb, R_IN0, host * eb, n * eb)
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
                    _vv(b, regs, Opcode.VVADD, ps_a, ps_a, ps_b, cols)
            for src in srcs:  # add the partial sums of the subtrees
                b.add(Opcode.RECV, rd=regs.loc(ps_b, b), r2_or_imm=src, generic3=cols * eb)
                _vv(b, regs, Opcode.VVADD, ps_a, ps_a, ps_b, cols)
            if not last:
                b.add(Opcode.SEND, rd=regs.loc(ps_a, b), r2_or_imm=dst_core, generic3=cols * eb)
            else:
                _vv(b, regs, Opcode.VVADD, ps_a, ps_a, bias, cols)
                if residual is not None:  # fused Add (spatial/fusion.py)
                    rv = residual
                    r_host = (rv.channel_offset + sub.pixels * rv.pixel_stride + node.c0) * eb
                    _ld(b, regs, ps_b, R_IN1, r_host, cols * eb)
                    _vv(b, regs, Opcode.VVADD, ps_a, ps_a, ps_b, cols)
                _activation(b, regs, layer.activation, ps_a, ps_b, cols)
                host = (out.channel_offset + sub.pixels * out.pixel_stride + node.c0) * eb
                _st(b, regs, ps_a, host, cols * eb)
            parts.append((np.flatnonzero(lanes_mask), len(b.slots), b.build()))
        blocks += regs.flush() + zero + [_merge_lanes(parts)]
    return concat(blocks)


def _pool_prologue(ctx, layer, is_max: bool, alloc, c: int, eb: int):
    """Base registers of a pool node (input, output) and, for an average pool, its vectors of
    1/count (one per distinct window count) loaded once. Returns (prologue, regs, counts, recip);
    counts and recip are None for a max pool."""
    pro: list[np.ndarray] = [
        _sldi(R_IN0, ctx.address[layer.inputs[0].buffer]),
        _sldi(R_OUT, ctx.address[layer.output.buffer]),
    ]
    regs = Regs(pro)
    if is_max:
        return pro, regs, None, None
    counts = pool_counts(layer)
    recip = alloc.alloc(len(counts) * c * eb, "recip")
    pro.append(_sldi(R_CONST, ctx.address[f"{layer.name}.recip"]))
    pro.append(
        make(
            Opcode.LD,
            rd=regs.loc(recip),
            r1=R_CONST,
            generic1=OFFSET_RS1,
            generic2=0,
            generic3=len(counts) * c * eb,
        )
    )
    return pro, regs, counts, recip


def lower_pool(ctx: LowerCtx, node: ComputeNode, alloc: LocalAllocator) -> np.ndarray:
    eb = ctx.eb
    layer = ctx.sg.layers[node.layer]
    v, out = layer.inputs[0], layer.output
    c = v.channels
    kh, kw = layer.kernel_shape
    is_max = layer.kind == LayerKind.MAXPOOL
    op = Opcode.VVMAX if is_max else Opcode.VVADD
    pro, regs, counts, recip = _pool_prologue(ctx, layer, is_max, alloc, c, eb)
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
                    _ld(
                        b,
                        regs,
                        local,
                        R_IN0,
                        (v.channel_offset + (row + cls.jlo) * v.pixel_stride) * eb,
                        row_bytes,
                    )
                else:
                    for j in range(cls.jlo, cls.jhi):
                        _ld(
                            b,
                            regs,
                            local + (j - cls.jlo) * c * eb,
                            R_IN0,
                            (v.channel_offset + (row + j) * v.pixel_stride) * eb,
                            c * eb,
                        )
            for i in range(r0 + 1, r1):
                _vv(b, regs, op, buf, buf, buf + (i - r0) * row_bytes, nw * c)
            for j in range(1, nw):
                _vv(b, regs, op, buf, buf, buf + j * c * eb, c)
            if first:
                b.add(Opcode.LMV, rd=regs.loc(acc, b), r1=regs.loc(buf, b), generic3=c * eb)
                first = False
            else:
                _vv(b, regs, op, acc, acc, buf, c)
        if recip is not None:
            k = counts.index(kh * kw if layer.count_include_pad else cls.count)
            _vv(b, regs, Opcode.VVMUL, acc, acc, recip + k * c * eb, c)
        _activation(b, regs, layer.activation, acc, buf, c)
        _st(b, regs, acc, (out.channel_offset + cls.pixels * out.pixel_stride) * eb, c * eb)
        built = b.build()
        blocks += regs.flush() + [built]
    return concat(blocks)


def lower_elementwise(ctx: LowerCtx, node: ComputeNode, alloc: LocalAllocator) -> np.ndarray:
    """Add (+activation) or a standalone activation over pixels p0..p1, in chunks that fit."""
    eb = ctx.eb
    layer = ctx.sg.layers[node.layer]
    ins, out = layer.inputs, layer.output
    c = out.channels
    pro: list[np.ndarray] = [_sldi(R_IN0 + k, ctx.address[v.buffer]) for k, v in enumerate(ins)]
    pro.append(_sldi(R_OUT, ctx.address[out.buffer]))
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
            _ld(b, regs, bufs[k], R_IN0 + k, host[k](lanes), n * eb)
        if len(ins) == 2:
            _vv(b, regs, Opcode.VVADD, bufs[0], bufs[0], bufs[1], n)
        _activation(b, regs, layer.activation, bufs[0], bufs[-1], n)
        _st(b, regs, bufs[0], out_host(lanes), n * eb)
        built = b.build()
        blocks += regs.flush() + [built]
    return concat(blocks)


def lower_node(ctx: LowerCtx, node: ComputeNode, ag_base: int) -> tuple[np.ndarray, int]:
    """Instructions of one node and its local-memory peak (bytes)."""
    layer = ctx.sg.layers[node.layer]
    alloc = LocalAllocator(ctx.capacity(node.core), node.core, f"node {node.id} ({layer.name})")
    if node.kind == NodeKind.MVM:
        code = lower_mvm(ctx, node, ag_base, alloc)
    elif layer.kind in (LayerKind.MAXPOOL, LayerKind.AVGPOOL):
        code = lower_pool(ctx, node, alloc)
    elif layer.kind == LayerKind.TENSOR:
        from raptor.pim.tensor_lowering import lower_tensor

        code = lower_tensor(ctx, node, alloc)
    else:
        code = lower_elementwise(ctx, node, alloc)
    return code, alloc.top


# Emission helpers shared with raptor.pimcomp (one implementation of each instruction pattern).
emit_ld = _ld
emit_st = _st
emit_vv = _vv
emit_activation = _activation
window_segments = _segments
zero_runs = _zero_runs


# ---------------------------------------------------------------------------------------------
# Line-buffer MVM lowering (with row-band tokens)


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
    srcs, dst_core = ctx.links.get(node.id, ((), -1))
    i0, i1, x0, x1, wp = lines_geometry(layer, node)
    row_bytes = wp * c * eb
    noc = ctx.sg.noc
    fed = noc is not None and noc.is_fed(node)
    # a fed node's rows sit in its persistent NoC buffer, padding zeroed at program start
    ring = None if fed else alloc.alloc(kh * row_bytes, "ring")
    zero_row = alloc.alloc(row_bytes, "zero row")
    cross = [(a, b) for a, b in tiles if a // krow != (b - 1) // krow]
    win = alloc.alloc(max((b - a for a, b in cross), default=1) * eb, "window")
    ps_a = alloc.alloc(cols * eb, "psum")
    residual = layer.inputs[1] if len(layer.inputs) > 1 and dst_core < 0 else None
    need_b = len(tiles) > 1 or layer.activation == "silu" or bool(srcs) or residual is not None
    ps_b = alloc.alloc(cols * eb, "psum2") if need_b else None
    last = dst_core < 0
    pro, regs, bias = _mvm_prologue(ctx, layer, node, v.buffer, residual, last, alloc, cols, eb)
    regs.loc(ps_a)
    if ps_b is not None:
        regs.loc(ps_b)
    regs.loc(win)
    # zero the ring's padding columns and the zero row once (the node reads only columns
    # [x0, x1) of a row, which every load writes, and the padding)
    spans = [] if fed else ring_padding(ring, kh, row_bytes, pl, v.width, wp, c * eb)
    spans += _chunks(zero_row, row_bytes)
    zero_all = [
        make(Opcode.LLDI, rd=R_ZERO, r2_or_imm=0, generic1=OFFSET_RD, generic2=a, generic3=n)
        for a, n in spans
        if n > 0
    ]
    t_addr, t_src = TEMPS[3], TEMPS[2]
    blocks: list[np.ndarray] = regs.flush() + zero_all
    loaded: set[int] = set()
    mbiw = arch.weight_bits

    def slot(iy: int) -> int:
        return noc.in_row_addr(node, iy) if fed else ring + (iy % kh) * row_bytes

    sender = last and noc is not None and bool(noc.targets.get(node.id))
    res_fed = noc is not None and node.id in noc.res_fed
    out_at = partial(noc.out_row_addr, node) if sender else None
    comm = _messages(ctx, node, t_addr)

    def load_row(iy: int) -> list[np.ndarray]:
        loaded.add(iy)
        if fed:  # received in the node's message slots, but a mixed node's own core's pieces
            return own_pieces(ctx, node, iy, slot(iy) + pl * c * eb, t_addr)
        base = slot(iy) + (x0 + pl) * c * eb
        if v.pixels == 1 and krow == c:  # a classifier's one pixel: only the node's K range
            host = (v.channel_offset + node.r0) * eb
            return [
                _sldi(t_addr, base + node.r0 * eb),
                make(
                    Opcode.LD,
                    rd=t_addr,
                    r1=R_IN0,
                    generic1=OFFSET_RS1,
                    generic2=host,
                    generic3=(node.r1 - node.r0) * eb,
                ),
            ]
        if v.contiguous:
            host = (v.channel_offset + (iy * v.width + x0) * v.pixel_stride) * eb
            return [
                _sldi(t_addr, base),
                make(
                    Opcode.LD,
                    rd=t_addr,
                    r1=R_IN0,
                    generic1=OFFSET_RS1,
                    generic2=host,
                    generic3=(x1 - x0) * c * eb,
                ),
            ]
        xs = np.arange(x0, x1, dtype=np.int64)
        b = Block(len(xs))
        b.add(Opcode.SLDI, rd=t_addr, r2_or_imm=base + (xs - x0) * c * eb)
        host = (v.channel_offset + (iy * v.width + xs) * v.pixel_stride) * eb
        b.add(Opcode.LD, rd=t_addr, r1=R_IN0, generic1=OFFSET_RS1, generic2=host, generic3=c * eb)
        return [b.build()]

    steps = line_steps(ctx, node, bands, before, after)
    for oy, pa, pb, pre, post, k in steps:
        blocks += comm(k) + pre
        rows_addr = []
        for i in range(kh):
            iy = oy * sh - pt + i
            if i0 <= i < i1 and 0 <= iy < v.height:
                if iy not in loaded:
                    blocks += load_row(iy)
                rows_addr.append(slot(iy))
            else:
                rows_addr.append(zero_row)
        ox = np.arange(pa - oy * ow, pb - oy * ow, dtype=np.int64)
        pixels = np.arange(pa, pb, dtype=np.int64)
        b = Block(len(ox))
        for t, (ta, tb) in enumerate(tiles):
            dst = ps_a if t == 0 else ps_b
            i = ta // krow
            if i == (tb - 1) // krow:
                addr = rows_addr[i] + (ox * sw * c + ta - i * krow) * eb
                b.add(Opcode.SLDI, rd=t_src, r2_or_imm=addr)
                src_reg = t_src
            else:
                for s in range(ta, tb):
                    if s != ta and s % krow:
                        continue
                    i = s // krow
                    e = min(tb, (i + 1) * krow)
                    addr = rows_addr[i] + (ox * sw * c + s - i * krow) * eb
                    b.add(Opcode.SLDI, rd=t_src, r2_or_imm=addr)
                    b.add(
                        Opcode.LMV,
                        rd=regs.loc(win + (s - ta) * eb, b),
                        r1=t_src,
                        generic3=(e - s) * eb,
                    )
                src_reg = regs.loc(win, b)
            b.add(
                Opcode.MVMUL,
                rd=regs.loc(dst, b),
                r1=src_reg,
                r2_or_imm=mbiw,
                generic2=ag_base + t,
            )
            if t > 0:
                _vv(b, regs, Opcode.VVADD, ps_a, ps_a, ps_b, cols)
        _mvm_tail(
            b,
            regs,
            layer,
            node,
            srcs,
            dst_core,
            ps_a,
            ps_b,
            bias,
            residual,
            pixels,
            eb,
            out_at(oy) if sender else None,
            ox,
            noc.in_row_addr(node, oy, 1) if residual is not None and res_fed else None,
        )
        built = b.build()
        blocks += regs.flush() + [built]
        if sender:
            blocks += store_row(ctx, node, oy, pa - oy * ow, pb - oy * ow, out_at(oy), t_addr)
        blocks += post
    blocks += comm(_end_slot(ctx, node, steps, bands))
    return concat(blocks)


def own_pieces(ctx: LowerCtx, node: ComputeNode, iy: int, row: int, reg: int) -> list[np.ndarray]:
    """ld the pieces of input row iy that a mixed NoC node's own core produced (stored in host
    memory earlier in the core's program) into its received row at local address `row` (column
    0 of the input, after the left padding)."""
    noc = ctx.sg.noc
    if node.id not in noc.mixed:
        return []
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


def _chunks(start: int, total: int, limit: int = 1 << 20) -> list[tuple[int, int]]:
    return [(a, min(limit, start + total - a)) for a in range(start, start + total, limit)]


def _mvm_tail(
    b,
    regs,
    layer,
    node,
    srcs,
    dst_core,
    ps_a,
    ps_b,
    bias,
    residual,
    pixels,
    eb,
    out_row=None,
    ox=None,
    res_row=None,
):
    """Row-group reduction, bias, fused residual (from host memory, or from the local residual
    row res_row at column ox when it arrives over the NoC), activation and store of an MVM lane
    block (into the local output row at column ox when the node sends its rows over the NoC)."""
    cols = node.c1 - node.c0
    out = layer.output
    for src in srcs:
        b.add(Opcode.RECV, rd=regs.loc(ps_b, b), r2_or_imm=src, generic3=cols * eb)
        _vv(b, regs, Opcode.VVADD, ps_a, ps_a, ps_b, cols)
    if dst_core >= 0:
        b.add(Opcode.SEND, rd=regs.loc(ps_a, b), r2_or_imm=dst_core, generic3=cols * eb)
        return
    _vv(b, regs, Opcode.VVADD, ps_a, ps_a, bias, cols)
    if residual is not None and res_row is not None:
        ra = regs.loc(ps_a, b)
        b.add(Opcode.SLDI, rd=T_DST, r2_or_imm=res_row + ox * cols * eb)
        b.add(Opcode.VVADD, rd=ra, r1=ra, r2_or_imm=T_DST, generic3=cols)
    elif residual is not None:
        rv = residual
        r_host = (rv.channel_offset + pixels * rv.pixel_stride + node.c0) * eb
        _ld(b, regs, ps_b, R_IN1, r_host, cols * eb)
        _vv(b, regs, Opcode.VVADD, ps_a, ps_a, ps_b, cols)
    if out_row is not None:
        b.add(Opcode.SLDI, rd=T_DST, r2_or_imm=out_row + ox * cols * eb)
        _activation_to(b, regs, layer.activation, ps_a, ps_b, cols, T_DST, eb)
        return
    _activation(b, regs, layer.activation, ps_a, ps_b, cols)
    host = (out.channel_offset + pixels * out.pixel_stride + node.c0) * eb
    _st(b, regs, ps_a, host, cols * eb)


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
        _vv(block, regs, Opcode.VSIGM, tmp, a, None, n)
        block.add(Opcode.VVMUL, rd=rd, r1=ra, r2_or_imm=regs.loc(tmp, block), generic3=n)
    else:
        block.add(Opcode.LMV, rd=rd, r1=ra, generic3=n * eb)


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
    cuts = row_segments(ow) if per_step else [0, ow]
    out = []
    for bi, (a, b) in enumerate(bands):
        steps = row_steps(a, b, ow, cuts)
        for i, (oy, pa, pb) in enumerate(steps):
            pre = before[bi] if i == 0 else []
            post = after[bi] if i == len(steps) - 1 else []
            slot = len(out) if per_step else (bi if i == 0 else None)
            out.append((oy, pa, pb, pre, post, slot))
    return out


def _end_slot(ctx: LowerCtx, node: ComputeNode, steps: list, bands: list[tuple[int, int]]) -> int:
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
            for a2, n2 in _chunks(a, size):
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


def _messages(ctx: LowerCtx, node: ComputeNode, reg: int):
    """The records of a node's NoC message slot k (spatial/noc.py order_messages): sends and recvs
    at the local addresses the message order chose, in order."""
    noc = ctx.sg.noc
    slots = noc.comm if noc is not None else {}

    def records(k: int | None) -> list[np.ndarray]:
        ms = slots.get((node.id, k), ()) if k is not None else ()
        if not ms:
            return []
        n = len(ms)
        addr = np.fromiter((m.addr for m in ms), np.int64, n)
        peer = np.fromiter((m.peer for m in ms), np.int64, n)
        size = np.fromiter((m.size for m in ms), np.int64, n)
        op = np.where(np.fromiter((m.send for m in ms), bool, n), Opcode.SEND, Opcode.RECV)
        sldi = make(Opcode.SLDI, n, rd=reg, r2_or_imm=addr)
        return [interleave([sldi, make(op, n, rd=reg, r2_or_imm=peer, generic3=size)])]

    return records


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
            _sldi(reg, out_row + xa * px),
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
    comm = _messages(ctx, node, TEMPS[3])  # messages of other nodes between the bands
    parts: list[np.ndarray] = []
    peak = 0
    for i, (a, b) in enumerate(bands):
        sub = node if (a, b) == (node.p0, node.p1) else replace(node, p0=a, p1=b)
        code, pk = lower_node(ctx, sub, ag_base)
        peak = max(peak, pk)
        parts += comm(i) + before[i] + [code] + after[i]
    parts += comm(len(bands))
    return concat(parts), peak


def _pool_lines_bytes(layer: Layer, node: ComputeNode, eb: int) -> tuple[int, int]:
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
    grouped by horizontal padding class). Band tokens go before/after each band."""
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
    pro, regs, counts, recip = _pool_prologue(ctx, layer, is_max, alloc, c, eb)
    noc = ctx.sg.noc
    fed = noc is not None and noc.is_fed(node)
    ring = None if fed else alloc.alloc(kh * row_bytes, "ring")
    red = alloc.alloc(row_bytes, "row")
    acc = alloc.alloc(c * eb, "acc")
    tmp = alloc.alloc(c * eb, "tmp")
    regs.loc(acc)
    regs.loc(red)
    t_addr, t_src = TEMPS[3], TEMPS[2]
    sender = noc is not None and bool(noc.targets.get(node.id))
    out_at = partial(noc.out_row_addr, node) if sender else None
    blocks: list[np.ndarray] = regs.flush()
    loaded: set[int] = set()
    seg = (x1 - x0) * c

    def slot(iy: int) -> int:
        return noc.in_row_addr(node, iy) if fed else ring + (iy % kh) * row_bytes

    comm = _messages(ctx, node, t_addr)
    steps = line_steps(ctx, node, bands, before, after)
    for oy, pa, pb, pre, post, k in steps:
        blocks += comm(k) + pre
        rows = [oy * sh - pt + i for i in range(kh) if 0 <= oy * sh - pt + i < v.height]
        for iy in rows:
            if iy in loaded:
                continue
            loaded.add(iy)
            if fed:  # received in the node's message slots, but a mixed node's own pieces
                blocks += own_pieces(ctx, node, iy, slot(iy), t_addr)
                continue
            base = slot(iy) + x0 * c * eb
            if v.contiguous:
                host = (v.channel_offset + (iy * v.width + x0) * v.pixel_stride) * eb
                blocks += [
                    _sldi(t_addr, base),
                    make(
                        Opcode.LD,
                        rd=t_addr,
                        r1=R_IN0,
                        generic1=OFFSET_RS1,
                        generic2=host,
                        generic3=seg * eb,
                    ),
                ]
            else:
                xs = np.arange(x0, x1, dtype=np.int64)
                lb = Block(len(xs))
                lb.add(Opcode.SLDI, rd=t_addr, r2_or_imm=base + (xs - x0) * c * eb)
                lb.add(
                    Opcode.LD,
                    rd=t_addr,
                    r1=R_IN0,
                    generic1=OFFSET_RS1,
                    generic2=(v.channel_offset + (iy * v.width + xs) * v.pixel_stride) * eb,
                    generic3=c * eb,
                )
                blocks.append(lb.build())
        # vertical reduction of the in-bounds rows into `red` (the columns this step's windows read)
        ca = max(0, (pa - oy * ow) * sw - pl)
        cb = min(v.width, (pb - 1 - oy * ow) * sw - pl + kw)
        vseg = (cb - ca) * c
        r0 = red + ca * c * eb
        rb = Block(1)
        s0 = slot(rows[0]) + ca * c * eb
        if len(rows) == 1:
            rb.add(Opcode.SLDI, rd=t_src, r2_or_imm=s0)
            rb.add(Opcode.LMV, rd=regs.loc(r0, rb), r1=t_src, generic3=vseg * eb)
        else:
            rb.add(Opcode.SLDI, rd=t_src, r2_or_imm=s0)
            rb.add(Opcode.SLDI, rd=t_addr, r2_or_imm=slot(rows[1]) + ca * c * eb)
            rb.add(op, rd=regs.loc(r0, rb), r1=t_src, r2_or_imm=t_addr, generic3=vseg)
            for iy in rows[2:]:
                rb.add(Opcode.SLDI, rd=t_addr, r2_or_imm=slot(iy) + ca * c * eb)
                rb.add(
                    op, rd=regs.loc(r0, rb), r1=regs.loc(r0, rb), r2_or_imm=t_addr, generic3=vseg
                )
        blocks += regs.flush() + [rb.build()]
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
            b.add(Opcode.SLDI, rd=t_src, r2_or_imm=red + (xs + lo) * c * eb)
            b.add(Opcode.LMV, rd=regs.loc(acc, b), r1=t_src, generic3=c * eb)
            for j in range(lo + 1, hi):
                b.add(Opcode.SLDI, rd=t_src, r2_or_imm=red + (xs + j) * c * eb)
                b.add(op, rd=regs.loc(acc, b), r1=regs.loc(acc, b), r2_or_imm=t_src, generic3=c)
            if recip is not None:
                cnt = kh * kw if layer.count_include_pad else len(rows) * (hi - lo)
                _vv(b, regs, Opcode.VVMUL, acc, acc, recip + counts.index(cnt) * c * eb, c)
            _activation(b, regs, layer.activation, acc, tmp, c)
            pix = oy * ow + ox[m]
            if sender:
                b.add(Opcode.SLDI, rd=T_DST, r2_or_imm=out_at(oy) + ox[m] * c * eb)
                b.add(Opcode.LMV, rd=T_DST, r1=regs.loc(acc, b), generic3=c * eb)
            else:
                _st(b, regs, acc, (out.channel_offset + pix * out.pixel_stride) * eb, c * eb)
            parts.append((np.flatnonzero(m), len(b.slots), b.build()))
        blocks += regs.flush() + [_merge_lanes(parts)]
        if sender:
            blocks += store_row(ctx, node, oy, pa - oy * ow, pb - oy * ow, out_at(oy), t_addr)
        blocks += post
    blocks += comm(_end_slot(ctx, node, steps, bands))
    return concat(blocks)


def use_pool_line_buffer(ctx: LowerCtx, node: ComputeNode) -> bool:
    layer = ctx.sg.layers[node.layer]
    if not pool_lines_ok(layer):
        return False
    if ctx.sg.noc is not None and ctx.sg.noc.uses_lines(node):
        return True
    lines, per_pixel = _pool_lines_bytes(layer, node, ctx.eb)
    return lines < per_pixel
