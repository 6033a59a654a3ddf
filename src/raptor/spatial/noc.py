"""NoC dataflow: which activation edges travel core to core with send/recv instead of host memory.

A *producer* is a node of a layer that computes its output rows in order: the root row group of a
GEMM layer over full columns, or a max/average pool, both lowered over line buffers
(raptor.pim.lowering). A *consumer unit* is a line-buffer MVM reduction tree (all row groups of one
layer, replica, column slice and pixel range) or a line-buffer pool node whose `inputs[0]` is
exactly one producer layer's output view (`noc_edges`). A consumer unit is *fed* over the NoC when
one of its nodes reads a piece of input that a producer node on another core computes: instead of
an `ld` of an input row into its line buffer it `recv`s each producer's segment of that row, and
the producer `send`s the segment from its local output rows right after computing it. A node of a
fed unit that also reads pieces its own core produced (a *mixed* node) copies them with `lmv` from
the producer's output rows, which then keep every row the producer computes (`keep_all`, up to
OUT_BYTES; the producer runs earlier in the core's program, since a core runs its nodes in layer
order); where they do not fit, it loads them from host memory after the producer stored them. A
fused residual travels the same way (`res_fed`), its own core's pieces copied likewise
(`res_mixed`; where the producer cannot keep its rows, the residual stays in host memory: "same
core residual"). Everything else (network inputs, constants, outputs, flattened/strided views,
units with no piece from another core) stays in host memory, ordered by the synchronization
pass's tokens; a producer also `st`s its rows when its buffer keeps a host reader.

Granularity and buffers. NoC nodes compute one row segment per step (up to `NocPlan.segments`
per output row: raptor.options.ROW_SEGMENTS unless `raptor compile --pim-row-segments` says
otherwise, of at least `NocPlan.segment_pixels` pixels: raptor.options.ROW_SEGMENT_PIXELS,
`--pim-row-segment-pixels`), so a
consumer starts on the first columns of a row before its producers finished it.
A fed node keeps every input row it reads in local memory when they fit in RING_BYTES (else a ring
of kernel-height rows); a producer keeps up to OUT_BYTES of output rows waiting to be sent.

Message order. Send and recv are a rendezvous (pimsim-nn pairs them by source and destination in
program order, rob_size 1 blocks the core). `order_messages` runs the program on estimated times
without values: a core runs its next step once its input columns are received, its waits are
satisfied and its oldest output rows are sent; a pending row is exchanged when the consumer's core
is between two steps of that node and the line-buffer slot is free; the earliest enabled event
runs first. Every core's program lists its steps, tokens and messages in the order of that one
execution, so each core pair's sends and recvs match one to one and in order.

Deadlock freedom. Take the graph whose vertices are the messages and sync/wait events and whose
edges follow each core's program order (plus sync -> wait). If it is acyclic it has a topological
order, a global order every core's sequence respects; the earliest event in it that has not
happened has all its predecessors done on both (all) of its cores, so it can happen: by induction
every program runs to its end, whatever the timing. The order above is such a global order by
construction (every event is appended to its cores' programs when it runs in the one execution).
As a check of the whole compiler, every emitted program also goes through
`raptor.pim.deadlock.check_programs`, an untimed execution that is exact for this model
(operations only become enabled by other cores' progress, never disabled, so any maximal
execution ends in the same state); a failure returns the consumer units on the blocked cores to
host memory and compiles again. The pipeline restart needs no tokens for NoC edges: round r+1's
rows reach a consumer only once its own program has restarted.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from raptor.arch import Arch
from raptor.options import ROW_SEGMENT_PIXELS, ROW_SEGMENTS
from raptor.spatial.geometry import lines_geometry, lines_rows
from raptor.spatial.ir import BufferRole, ComputeNode, Layer, LayerKind, NodeKind, SpatialGraph

Unit = tuple[int, int, int, int]  # (layer, replica, c0, p0) of an MVM tree; (layer, -1, 0, id) pool


def unit_of(n: ComputeNode) -> Unit:
    if n.kind == NodeKind.MVM:
        return (n.layer, n.replica, n.c0, n.p0)
    return (n.layer, -1, 0, n.id)


def mvm_lines_ok(layer: Layer) -> bool:
    """Geometry that the line-buffer MVM lowering handles."""
    v = layer.inputs[0]
    return layer.kind == LayerKind.GEMM and v.chw is None


def pool_lines_ok(layer: Layer) -> bool:
    """Geometry that the line-buffer pool lowering handles."""
    return layer.kind in (LayerKind.MAXPOOL, LayerKind.AVGPOOL) and not (
        layer.inputs[0].chw is not None or layer.strides[1] > layer.kernel_shape[1]
    )


def row_spans(a: int, b: int, w: int) -> dict[int, tuple[int, int]]:
    """Row -> columns [x0, x1) of that row which pixels [a, b) of a row-major map w pixels wide
    cover, in row order."""
    return {
        y: (max(a, y * w) - y * w, min(b, (y + 1) * w) - y * w)
        for y in range(a // w, (b - 1) // w + 1)
    }


def input_rows(sg: SpatialGraph, n: ComputeNode) -> tuple[list[int], int, int]:
    """(input rows in first-use order, input columns [x0, x1)) a line-buffer node loads."""
    ly = sg.layers[n.layer]
    if n.kind == NodeKind.MVM:
        i0, i1, x0, x1, _ = lines_geometry(ly, n)
        return lines_rows(ly, n, i0, i1), x0, x1
    kh, kw = ly.kernel_shape
    full = replace(n, r0=0, r1=kh * kw * ly.inputs[0].channels)
    _, _, x0, x1, _ = lines_geometry(ly, full)
    return lines_rows(ly, full, 0, kh), x0, x1


@dataclass
class NocPlan:
    """Fed consumer units and the message geometry that both sides of an edge lower."""

    fed: set[Unit] = field(default_factory=set)
    res_fed: set[int] = field(default_factory=set)  # root MVM nodes whose residual comes by NoC
    # nodes of a fed unit that read pieces their own core produced (and receive the rest, if
    # any): copied from the producer's output rows (`own_local`), else loaded from host memory
    # after the producer stored them (program order, no token)
    mixed: set[int] = field(default_factory=set)
    # residual-fed nodes that read pieces of their residual from their own core: always copied
    # from the producer's output rows (without room for them the residual stays in host memory)
    res_mixed: set[int] = field(default_factory=set)
    # producer node id -> (mixed node on its own core, source index) pairs reading its rows
    own: dict[int, list[tuple[ComputeNode, int]]] = field(default_factory=dict)
    # producers whose persistent output rows hold every row they compute, so that their own
    # core's mixed readers copy their pieces locally (lmv) instead of through host memory
    keep_all: set[int] = field(default_factory=set)
    # mixed nodes whose own core's pieces all come from `keep_all` producers by lmv
    own_local: set[int] = field(default_factory=set)
    sources: dict[int, list[Source]] = field(default_factory=dict)  # consumer layer -> sources
    width: dict[int, int] = field(default_factory=dict)  # producer layer -> output row width
    width_out: dict[int, int] = field(default_factory=dict)  # consumer layer -> output width
    flat: dict[int, int] = field(default_factory=dict)  # flatten consumer layer -> channels/pixel
    producers: dict[int, list[ComputeNode]] = field(default_factory=dict)  # root nodes by p0
    # producer layer -> the pixel ends of its producers (sorted, so pieces() bisects them), or
    # None where their pixel ranges overlap
    producer_ends: dict[int, list[int] | None] = field(default_factory=dict)
    rows: dict[int, tuple[list[int], int, int]] = field(default_factory=dict)  # input_rows
    # (fed node id, source index) -> the producers on other cores it reads a pixel of (indices
    # into producers[source layer]): geometry alone, so kept while demotions re-derive the plan
    readers: dict[tuple[int, int], list[int]] = field(
        default_factory=dict, repr=False, compare=False
    )
    # producer node id -> (fed consumer node, index of the source in its layer's sources)
    targets: dict[int, list[tuple[ComputeNode, int]]] = field(default_factory=dict)
    senders: set[Unit] = field(default_factory=set)  # units of producers with targets
    host_buffers: set[str] = field(default_factory=set)  # activation buffers with a host reader
    ring_rows: dict[int, int] = field(default_factory=dict)  # fed node -> input row slots
    out_rows: dict[int, int] = field(default_factory=dict)  # producer node -> output row slots
    res_rows: dict[int, int] = field(default_factory=dict)  # residual-fed node -> row slots
    element_bytes: int = 2
    local_bytes: int = 1 << 20  # a core's local memory
    segments: int = ROW_SEGMENTS  # row segments per output row (message_order.row_segments)
    segment_pixels: int = ROW_SEGMENT_PIXELS  # the fewest pixels of a row segment
    # persistent per-core NoC buffers at the top of local memory (`_layout`): a fed node's input
    # rows and a producer's output rows outlive the node, so a core can receive rows for a later
    # node and send rows of an earlier one; node scratch gets the memory below `persist`
    ring_base: dict[int, int] = field(default_factory=dict)
    ring_row_bytes: dict[int, int] = field(default_factory=dict)
    ring_pad: dict[int, int] = field(default_factory=dict)  # left padding columns of the row
    out_base: dict[int, int] = field(default_factory=dict)
    res_base: dict[int, int] = field(default_factory=dict)
    res_row_bytes: dict[int, int] = field(default_factory=dict)
    out_row_bytes: dict[int, int] = field(default_factory=dict)
    persist: dict[int, int] = field(default_factory=dict)  # core -> bytes reserved
    comm: Mapping[tuple[int, int], np.ndarray] = field(default_factory=dict)  # order_messages
    estimated_ns: float = 0.0  # end of the estimated execution order_messages followed
    timeline: dict[int, list[float]] = field(default_factory=dict)  # layer -> [start, end] ns
    demoted: dict[str, int] = field(default_factory=dict)  # units sent back to host, by reason

    def is_fed(self, n: ComputeNode) -> bool:
        """n's window input arrives over the NoC."""
        return unit_of(n) in self.fed

    def uses_lines(self, n: ComputeNode) -> bool:
        """n's unit is fed or sends rows, or n receives its residual, so it must be lowered over
        line buffers."""
        u = unit_of(n)
        return u in self.fed or u in self.senders or n.id in self.res_fed

    def writes_rows(self, n: ComputeNode) -> bool:
        """Producer n computes into its persistent output rows: it sends rows to other cores or
        keeps them all for its own core's mixed readers."""
        return bool(self.targets.get(n.id)) or n.id in self.keep_all

    def reads_own(self, n: ComputeNode, k: int) -> bool:
        """Fed node n reads pieces of its input k that its own core produced."""
        return n.id in (self.mixed if k == 0 else self.res_mixed)

    def receives(self, n: ComputeNode) -> tuple[int, ...]:
        """The inputs of node n that arrive over the NoC (0 the window, 1 the residual)."""
        return tuple(k for k, on in ((0, self.is_fed(n)), (1, n.id in self.res_fed)) if on)

    def columns(self, m: ComputeNode, k: int, iy: int) -> tuple[int, int]:
        """Columns [x0, x1) of row iy of input k that node m reads: the window's column span, or
        the node's output pixels in row iy for the residual (same pixel geometry as the output)."""
        if k == 0 and m.layer in self.flat:  # producer pixels holding the node's K range
            c = self.flat[m.layer]
            return m.r0 // c, (m.r1 - 1) // c + 1
        if k == 0:
            return self.rows[m.id][1], self.rows[m.id][2]
        return row_spans(m.p0, m.p1, self.width_out[m.layer])[iy]

    def input_rows(self, m: ComputeNode, k: int) -> list[int]:
        """Rows of input k that node m reads, in first-use order."""
        if k == 0:
            return self.rows[m.id][0]
        return list(row_spans(m.p0, m.p1, self.width_out[m.layer]))

    def pieces(self, m: ComputeNode, iy: int, k: int = 0) -> list[tuple[int, int, int, int]]:
        """(producer core, x0, x1, source) segments of row iy of input k that node m receives."""
        return [(n.core, a, b, si) for n, a, b, si in self.piece_nodes(m, iy, k)]

    def piece_nodes(
        self, m: ComputeNode, iy: int, k: int = 0
    ) -> list[tuple[ComputeNode, int, int, int]]:
        """(producer node, x0, x1, source) segments of row iy of input k that node m reads."""
        x0, x1 = self.columns(m, k, iy)
        out = []
        for si, src in enumerate(self.sources[m.layer]):
            if src.input != k:
                continue
            w = self.width[src.layer]
            lo, hi = iy * w + x0, iy * w + x1
            ends = self.producer_ends[src.layer]
            first = 0 if ends is None else bisect_right(ends, lo)
            for n in self.producers[src.layer][first:]:
                if n.p0 >= hi:
                    break
                a, b = max(lo, n.p0), min(hi, n.p1)
                if a < b:
                    out.append((n, a - iy * w, b - iy * w, si))
        return out

    def consumer_row(self, src: Source, r: int) -> tuple[int, int]:
        """(consumer row, column shift) of producer row r of `src`: the same row, or row 0 with
        columns shifted to producer pixel indices for a flat source."""
        return (0, r * self.width[src.layer]) if src.flat else (r, 0)

    def in_row_addr(self, m: ComputeNode, r: int, k: int = 0) -> int:
        """Local address of the persistent slot holding row r of input k of node m."""
        if k == 1:
            return self.res_base[m.id] + (r % self.res_rows[m.id]) * self.res_row_bytes[m.id]
        return self.ring_base[m.id] + (r % self.ring_rows[m.id]) * self.ring_row_bytes[m.id]

    def slots(self, m: ComputeNode, k: int) -> int:
        """Row slots of node m's persistent buffer of input k."""
        return self.res_rows[m.id] if k == 1 else self.ring_rows[m.id]

    def out_row_addr(self, n: ComputeNode, oy: int) -> int:
        """Local address of the persistent slot holding output row oy of producer n."""
        first = n.p0 // self.width[n.layer]
        slot = (oy - first) % self.out_rows[n.id]
        return self.out_base[n.id] + slot * self.out_row_bytes[n.id]

    def fed_by(self, m: ComputeNode, k: int = 0) -> set[int]:
        """Producer cores of input k of a consumer node."""
        return {p[0] for iy in self.input_rows(m, k) for p in self.pieces(m, iy, k)}


@dataclass(frozen=True, slots=True)
class Source:
    """Channels [c0, c0 + channels) of producer `layer`'s output rows are channels
    [dst, dst + channels) of a consumer's input pixel (the whole pixel on both sides for a plain
    edge; a channel slice for a concat slot or a merged sibling's view): of its window input, or
    of its fused residual (`input` 1), whose pixels are the consumer's output pixels. A `flat`
    source is a classifier reading the producer's whole H x W x C output as one pixel of H*W*C
    channels: producer pixel p is channels [p*C, (p+1)*C) of it, and messages address the
    consumer's row 0 by producer pixel index (`NocPlan.consumer_row`)."""

    layer: int
    c0: int
    dst: int
    channels: int
    input: int = 0  # the consumer input it feeds: 0 the window input, 1 a fused residual
    flat: bool = False  # the consumer reads the producer's whole output as one pixel (flatten)


def noc_edges(sg: SpatialGraph) -> dict[int, list[Source]]:
    """Consumer layer -> sources of every input the NoC can carry (module docstring): the consumer
    reads its window input over a line buffer, and every channel of that view is written, with the
    same pixel geometry, by producer layers that compute all their output channels row by row
    (a GEMM over full columns or a pool). One producer writing the exact view is a plain edge;
    concat slots and merged siblings' channel views give channel-slice sources. Needs tiling."""
    writers: dict[str, list[Layer]] = {}
    for ly in sg.layers:
        writers.setdefault(ly.output.buffer, []).append(ly)
    sliced = {
        n.layer
        for n in sg.nodes
        if n.kind == NodeKind.MVM and (n.c0, n.c1) != (0, sg.layers[n.layer].cols)
    }

    def producer_ok(lp: Layer) -> bool:
        if lp.kind == LayerKind.GEMM:
            return mvm_lines_ok(lp) and lp.index not in sliced
        return pool_lines_ok(lp)

    def sources(lc: Layer, k: int) -> list[Source]:
        """Producers of every channel of input k of lc, or [] when one cannot send it."""
        v = lc.inputs[k]
        if v.chw is not None or sg.buffers[v.buffer].role not in (
            BufferRole.ACT,
            BufferRole.OUTPUT,
        ):
            return []
        srcs, covered = [], 0
        lps = writers.get(v.buffer, [])
        if k == 0 and v.pixels == 1 and len(lps) == 1 and lps[0].index < lc.index:
            o = lps[0].output  # a classifier reading a whole feature map (flatten)
            whole = (o.channel_offset, o.pixel_stride, o.chw, v.channel_offset) == (
                0,
                o.channels,
                None,
                0,
            )
            if o.pixels > 1 and whole and o.pixels * o.channels == v.channels:
                if not producer_ok(lps[0]):
                    return []
                return [Source(lps[0].index, 0, 0, o.channels, 0, True)]
        for lp in lps:
            o = lp.output
            lo = max(v.channel_offset, o.channel_offset)
            hi = min(v.channel_offset + v.channels, o.channel_offset + o.channels)
            if lo >= hi:
                continue
            same = (o.height, o.width, o.pixel_stride, o.chw) == (
                v.height,
                v.width,
                v.pixel_stride,
                None,
            )
            if not same or lp.index >= lc.index or not producer_ok(lp):
                return []
            srcs.append(Source(lp.index, lo - o.channel_offset, lo - v.channel_offset, hi - lo, k))
            covered += hi - lo
        return srcs if covered == v.channels else []

    out = {}
    for lc in sg.layers:
        if not (mvm_lines_ok(lc) or pool_lines_ok(lc)):
            continue
        srcs = sources(lc, 0)
        if lc.kind == LayerKind.GEMM and len(lc.inputs) > 1:
            srcs += sources(lc, 1)
        if srcs:
            out[lc.index] = srcs
    return out


def plan_noc(
    sg: SpatialGraph,
    element_bytes: int,
    local_bytes: int = 1 << 20,
    segments: int = ROW_SEGMENTS,
    segment_pixels: int = ROW_SEGMENT_PIXELS,
) -> NocPlan:
    """Choose the fed consumer units of `sg` (module docstring); needs cores assigned; nodes
    stream their rows in up to `segments` segments of at least `segment_pixels` pixels."""
    by_layer: dict[int, list[ComputeNode]] = {}
    for n in sg.nodes:
        by_layer.setdefault(n.layer, []).append(n)
    plan = NocPlan(
        element_bytes=element_bytes,
        local_bytes=local_bytes,
        segments=segments,
        segment_pixels=segment_pixels,
    )
    for ci, srcs in noc_edges(sg).items():
        lc = sg.layers[ci]
        plan.sources[ci] = srcs
        for src in srcs:
            lp = sg.layers[src.layer]
            if lp.kind == LayerKind.GEMM:
                roots = [n for n in by_layer.get(lp.index, []) if n.row_group == 0]
            else:
                roots = list(by_layer.get(lp.index, []))
            plan.width[lp.index] = lp.output.width
            prods = plan.producers[lp.index] = sorted(roots, key=lambda n: n.p0)
            ends = [n.p1 for n in prods]
            plan.producer_ends[lp.index] = ends if ends == sorted(ends) else None
        plan.width_out[ci] = lc.output.width
        if srcs[0].flat:
            plan.flat[ci] = srcs[0].channels
        units: dict[Unit, list[ComputeNode]] = {}
        for m in by_layer.get(lc.index, []):
            plan.rows[m.id] = input_rows(sg, m)
            units.setdefault(unit_of(m), []).append(m)
        for u, ms in units.items():
            by = {m.id: plan.fed_by(m) for m in ms}
            if any(by[m.id] - {m.core} for m in ms):
                plan.fed.add(u)
                plan.mixed |= {m.id for m in ms if m.core in by[m.id]}
        for m in by_layer.get(lc.index, []):
            # the root row group adds the residual; a column slice would need channel messages
            if m.kind != NodeKind.MVM or m.row_group or (m.c0, m.c1) != (0, lc.cols):
                continue
            cores = plan.fed_by(m, 1)
            if cores:
                plan.res_fed.add(m.id)
            if m.core in cores:
                plan.res_mixed.add(m.id)
    _derive(sg, plan)
    return plan


def demote_pairs(sg: SpatialGraph, plan: NocPlan, pairs: set[tuple[int, int]], why: str) -> int:
    """Return to host memory every fed unit with a node on core C fed by core P, for (P, C) in
    `pairs`; returns how many units were demoted."""
    gone: set[Unit] = set()
    res: set[int] = set()
    for m in sg.nodes:
        u = unit_of(m)
        if u in plan.fed and u not in gone and any((p, m.core) in pairs for p in plan.fed_by(m)):
            gone.add(u)
        if m.id in plan.res_fed and any((p, m.core) in pairs for p in plan.fed_by(m, 1)):
            res.add(m.id)
    plan.fed -= gone
    plan.res_fed -= res
    if gone or res:
        plan.demoted[why] = plan.demoted.get(why, 0) + len(gone) + len(res)
        _derive(sg, plan)
    return len(gone) + len(res)


# local memory a NoC node may spend on received input rows (else a ring of kernel-height rows) and
# on output rows waiting to be sent (else one row); measured at stop 43 on the 8 default latency
# cases: 384 KB of output rows gave the same latencies, a share of 0.75 a 0.7 % longer geometric
# mean
RING_BYTES = 512 * 1024
OUT_BYTES = 192 * 1024
PERSIST_SHARE = 0.6  # at most this share of a core's local memory holds persistent NoC buffers
RES_RING = 2  # residual row slots of a residual-fed node whose rows do not all fit


def _derive(sg: SpatialGraph, plan: NocPlan) -> None:
    """Targets of every producer node, sender units, persistent buffers and host-read buffers
    from `plan.fed`; fed units that do not fit their core's buffer share go back to host."""
    while True:
        _targets(sg, plan)
        over, over_res = _layout(sg, plan)
        # a residual whose own core's producer cannot keep its rows stays in host memory
        same = _unkept_readers(plan, 1) - over_res
        if not over and not over_res and not same:
            break
        plan.fed -= over
        plan.res_fed -= over_res | same
        plan.res_mixed -= over_res | same
        if over or over_res:
            plan.demoted["local memory"] = (
                plan.demoted.get("local memory", 0) + len(over) + len(over_res)
            )
        if same:
            n_same = plan.demoted.get("same core residual", 0) + len(same)
            plan.demoted["same core residual"] = n_same
    # a demoted unit's nodes load their whole window input from host memory: they are not mixed
    # any more, and synchronization must order every piece (token_views)
    fed = {n.id for n in sg.nodes if unit_of(n) in plan.fed}
    plan.mixed &= fed
    # a mixed node copies its own core's pieces locally when every producer of them keeps its rows
    by_host = _unkept_readers(plan, 0)
    plan.own_local = plan.mixed - by_host
    plan.senders = {
        unit_of(n)
        for ns in plan.producers.values()
        for n in ns
        if n.id in plan.targets or n.id in plan.keep_all
    }
    host: set[str] = set()
    for n in sg.nodes:
        for _, v in host_views(sg, n, plan):
            host.add(v.buffer)
    host.update(b for b, buf in sg.buffers.items() if buf.role != BufferRole.ACT)
    plan.host_buffers = host


def _unkept_readers(plan: NocPlan, k: int) -> set[int]:
    """Ids of the nodes reading pieces of their input k from a producer on their own core that
    does not keep its rows (so those pieces cannot be copied locally)."""
    return {
        m.id
        for p, ms in plan.own.items()
        if p not in plan.keep_all
        for m, si in ms
        if plan.sources[m.layer][si].input == k
    }


def _targets(sg: SpatialGraph, plan: NocPlan) -> None:
    """plan.targets: for every producer node, the (fed node, source) pairs on other cores that
    read one of its pixels, in the order of the fed nodes on their cores; plan.own: the same for
    the mixed readers on its own core (window pieces, and residual pieces of `res_mixed` nodes)."""
    plan.targets = {}
    plan.own = {}
    order = {n.id: i for nodes in sg.nodes_by_core().values() for i, n in enumerate(nodes)}
    fed_nodes = sorted(
        (m for m in sg.nodes if plan.receives(m)), key=lambda m: (m.core, order[m.id])
    )
    spans: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # layer -> p0, p1, core
    for m in fed_nodes:
        ks = plan.receives(m)
        for si, src in enumerate(plan.sources[m.layer]):
            if src.input not in ks:
                continue
            prods = plan.producers[src.layer]
            js = plan.readers.get((m.id, si))
            own = plan.reads_own(m, src.input)
            if js is None or own:
                if src.layer not in spans:
                    spans[src.layer] = tuple(
                        np.array([getattr(n, f) for n in prods], np.int64)
                        for f in ("p0", "p1", "core")
                    )
                p0, p1, core = spans[src.layer]
                reads = _reads_any(plan, m, src, p0, p1)
                if js is None:
                    js = plan.readers[m.id, si] = np.flatnonzero(reads & (core != m.core)).tolist()
                if own:  # its own core's producers: copied locally when they keep their rows
                    for j in np.flatnonzero(reads & (core == m.core)).tolist():
                        plan.own.setdefault(prods[j].id, []).append((m, si))
            for j in js:
                plan.targets.setdefault(prods[j].id, []).append((m, si))


def _reads_any(
    plan: NocPlan, m: ComputeNode, src: Source, p0: np.ndarray, p1: np.ndarray
) -> np.ndarray:
    """Whether fed node m reads, through `src`, any producer pixel of each range [p0, p1): the
    pixels it reads of the source layer, as sorted disjoint intervals (row pieces merged), so a
    range overlaps them iff the first interval ending after p0 starts before p1."""
    w = plan.width[src.layer]
    merged: list[list[int]] = []
    for a, b in sorted(
        (iy * w + x0, iy * w + x1)
        for iy in plan.input_rows(m, src.input)
        for x0, x1 in [plan.columns(m, src.input, iy)]
        if x0 < x1
    ):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    if not merged:
        return np.zeros(len(p0), bool)
    lo, hi = np.array(merged, np.int64).T
    i = np.searchsorted(hi, p0, "right")  # the first piece whose end lies after p0
    inside = i < len(hi)
    return inside & (lo[np.minimum(i, len(hi) - 1)] < p1) & (p0 < p1)


def _layout(sg: SpatialGraph, plan: NocPlan) -> tuple[set[Unit], set[int]]:
    """Place every core's persistent NoC buffers from the top of its local memory: all input rows
    of a fed node when they fit RING_BYTES (else a ring of kernel-height rows), all residual rows
    of a residual-fed node when they fit (else RES_RING rows), up to OUT_BYTES of a producer's
    output rows. A core over its PERSIST_SHARE first falls back to rings and single output rows;
    returns the fed units and residual-fed nodes that still do not fit (the largest buffer, one
    per core)."""
    eb = plan.element_bytes
    limit = int(plan.local_bytes * PERSIST_SHARE)
    plan.ring_rows, plan.ring_base, plan.ring_row_bytes, plan.ring_pad = {}, {}, {}, {}
    plan.keep_all = set()
    plan.out_rows, plan.out_base, plan.out_row_bytes, plan.persist = {}, {}, {}, {}
    plan.res_rows, plan.res_base, plan.res_row_bytes = {}, {}, {}
    over: set[Unit] = set()
    over_res: set[int] = set()
    for core, nodes in sg.nodes_by_core().items():
        fed = [m for m in nodes if plan.is_fed(m)]
        res = [m for m in nodes if m.id in plan.res_fed]
        # producers of their own core's mixed readers keep every output row when the rows fit
        keep = {
            n.id for n in nodes if n.id in plan.own and math.prod(_out_rows(sg, n, eb)) <= OUT_BYTES
        }
        send = [n for n in nodes if n.id in plan.targets or n.id in keep]
        if not fed and not send and not res:
            continue
        ring: dict[int, tuple[int, int, int]] = {}  # id -> (full rows, kernel rows, row bytes)
        for m in fed:
            ly = sg.layers[m.layer]
            rows = plan.rows[m.id][0]
            span = max(rows) - min(rows) + 1 if rows else 1
            wp = lines_geometry(ly, m)[4] if m.kind == NodeKind.MVM else ly.inputs[0].width
            rb = wp * ly.inputs[0].channels * eb
            full = span if span * rb <= RING_BYTES else ly.kernel_shape[0]
            ring[m.id] = (full, min(full, ly.kernel_shape[0]), rb)
            plan.ring_row_bytes[m.id] = rb
            plan.ring_pad[m.id] = ly.pads[1] if m.kind == NodeKind.MVM else 0
        outs: dict[int, tuple[int, int]] = {}  # id -> (rows, row bytes)
        for n in send:
            rows, rb = _out_rows(sg, n, eb)
            outs[n.id] = (max(1, min(rows, OUT_BYTES // rb)), rb)
            plan.out_row_bytes[n.id] = rb
        rres: dict[int, tuple[int, int, int]] = {}  # id -> (all rows, ring rows, row bytes)
        for m in res:
            ly = sg.layers[m.layer]
            w = ly.output.width
            span = (m.p1 - 1) // w - m.p0 // w + 1
            rb = w * ly.inputs[1].channels * eb
            full = span if span * rb <= RING_BYTES else min(span, RES_RING)
            rres[m.id] = (full, min(full, RES_RING), rb)
            plan.res_row_bytes[m.id] = rb
        slots = {i: full for i, (full, _, _) in ring.items()}
        rslots = {i: full for i, (full, _, _) in rres.items()}
        outn = {i: r for i, (r, _) in outs.items()}

        used = sum(k * ring[i][2] for i, k in slots.items())  # bytes the buffers take
        used += sum(k * rres[i][2] for i, k in rslots.items())
        used += sum(k * outs[i][1] for i, k in outn.items())
        # kept rows only take memory no other buffer needs: the largest go first (their readers
        # then load those pieces from host memory, a residual goes back there; a producer that
        # also sends keeps its sender's rows, which may shrink below like any sender's)
        for i in sorted(keep, key=lambda i: -outn[i] * outs[i][1]):
            if used <= limit:
                break
            keep.discard(i)
            if i not in plan.targets:  # no sends either: no output rows at all
                used -= outn.pop(i) * outs[i][1]
                plan.out_row_bytes.pop(i)
        for i in sorted(ring, key=lambda i: -ring[i][0] * ring[i][2]):
            if used <= limit:
                break
            used -= (slots[i] - ring[i][1]) * ring[i][2]
            slots[i] = ring[i][1]
        for i in sorted(rres, key=lambda i: -rres[i][0] * rres[i][2]):
            if used <= limit:
                break
            used -= (rslots[i] - rres[i][1]) * rres[i][2]
            rslots[i] = rres[i][1]
        for i in outn:
            if used > limit and i not in keep:
                used -= (outn[i] - 1) * outs[i][1]
                outn[i] = 1
        if used > limit:
            big = max(fed, key=lambda m: slots[m.id] * ring[m.id][2], default=None)
            big_r = max(res, key=lambda m: rslots[m.id] * rres[m.id][2], default=None)
            if big_r is not None and (
                big is None
                or rslots[big_r.id] * rres[big_r.id][2] > slots[big.id] * ring[big.id][2]
            ):
                over_res.add(big_r.id)
            elif big is not None:
                over.add(unit_of(big))
            else:  # only output rows: the consumers of the largest sender go back to host
                big_s = max((n for n in send if n.id in plan.targets), key=lambda n: outs[n.id][1])
                over.update(unit_of(m) for m, _ in plan.targets[big_s.id])
            continue
        plan.keep_all |= keep
        top = plan.local_bytes
        for n in nodes:
            if n.id in slots:
                top -= slots[n.id] * ring[n.id][2]
                plan.ring_base[n.id] = top
                plan.ring_rows[n.id] = slots[n.id]
            if n.id in rslots:
                top -= rslots[n.id] * rres[n.id][2]
                plan.res_base[n.id] = top
                plan.res_rows[n.id] = rslots[n.id]
            if n.id in outn:
                top -= outn[n.id] * outs[n.id][1]
                plan.out_base[n.id] = top
                plan.out_rows[n.id] = outn[n.id]
        plan.persist[core] = plan.local_bytes - top
    return over, over_res


def _out_rows(sg: SpatialGraph, n: ComputeNode, eb: int) -> tuple[int, int]:
    """(output rows, bytes of a whole output row) of producer node n."""
    ly = sg.layers[n.layer]
    w = ly.output.width
    return (n.p1 - 1) // w - n.p0 // w + 1, w * ly.cols * eb


def host_views(sg: SpatialGraph, n: ComputeNode, plan: NocPlan | None) -> list[tuple[int, object]]:
    """(input index, view) of what node n reads from host memory: a non-root row group reads only
    the window input; a fed unit's window input and a residual-fed node's residual arrive over
    the NoC (a mixed node still loads its own core's pieces of the window input)."""
    ly = sg.layers[n.layer]
    ks = [0] if (n.kind == NodeKind.MVM and n.row_group > 0) else range(len(ly.inputs))
    noc = plan.receives(n) if plan is not None else ()
    mixed = plan is not None and n.id in plan.mixed and n.id not in plan.own_local
    return [(k, ly.inputs[k]) for k in ks if k not in noc or (k == 0 and mixed)]


def token_views(sg: SpatialGraph, n: ComputeNode, plan: NocPlan | None) -> list[tuple[int, object]]:
    """The host views of node n whose order synchronization must guard: `host_views` without the
    window input of a mixed node, which reads from host memory only what its own core stored
    earlier in the same program (program order orders it, in every round)."""
    own = plan is not None and n.id in plan.mixed
    return [(k, v) for k, v in host_views(sg, n, plan) if not (k == 0 and own)]


@dataclass(frozen=True)
class NocDataflowPass:
    """Attach the NoC plan to the graph (`sg.noc`); lowering and synchronization follow it."""

    name: ClassVar[str] = "noc-dataflow"
    segments: int = ROW_SEGMENTS
    segment_pixels: int = ROW_SEGMENT_PIXELS

    def apply(self, arch: Arch, sg: SpatialGraph) -> SpatialGraph:
        out = replace(sg)
        mem = arch.core.local_memory.memory_size
        out.noc = plan_noc(sg, arch.element_bytes, mem, self.segments, self.segment_pixels)
        return out
