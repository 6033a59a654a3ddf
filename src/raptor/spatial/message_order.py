"""NoC message order: where every send and recv of the NoC dataflow goes in its core's program.

Send and recv are a rendezvous (pimsim-nn pairs them by source and destination in program order,
and at rob_size 1 a core waits at its send until the receiver reaches its recv), so the order of
the messages in each program decides whether the programs can deadlock and how long cores wait.
`order_messages` runs the whole program once on estimated times, without values, and appends
every event to the programs of the cores it involves as it happens; raptor.spatial.noc explains
why that one global order makes the programs deadlock-free whatever the real timing.

The execution itself is compiled (message_order_kernel.py, numba): this module lays the plan out
in flat tables for it (`_tables`) and turns the exchange log it returns back into messages
(`MessageSlots`). Cores move in sorted order whenever several could, so the order depends on
nothing but the plan.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from raptor.arch import Arch
from raptor.spatial import message_order_kernel as K
from raptor.spatial.geometry import lines_geometry
from raptor.spatial.ir import ComputeNode, NodeKind, SpatialGraph, TokenKind
from raptor.spatial.noc import NocPlan, Source, Unit, row_spans, unit_of


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a node's program: output row `oy` (-1: a whole band) of band `band`, pixels
    [pa, pb); the unit between two steps is where the node's messages go."""

    band: int
    oy: int
    pa: int
    pb: int


def row_segments(ow: int, segments: int, least: int = 1) -> list[int]:
    """Column cuts [0, ..., ow] of an output row into the segments a NoC node computes and sends
    one at a time (up to `segments`, of at least `least` pixels: NocPlan.segment_pixels,
    raptor.options.ROW_SEGMENT_PIXELS), so that a consumer starts on the first columns of a row
    before its producers finished the row."""
    n = max(1, min(segments, ow // max(1, least)))
    return [round(i * ow / n) for i in range(n + 1)]


def row_steps(a: int, b: int, ow: int, cuts: list[int]) -> list[tuple[int, int, int]]:
    """(output row, first pixel, end pixel) of pixels [a, b) cut at whole rows and at `cuts`."""
    out = []
    for oy, (x0, x1) in row_spans(a, b, ow).items():
        edges = sorted({x0, x1, *(x for x in cuts if x0 < x < x1)})
        out += [(oy, oy * ow + e0, oy * ow + e1) for e0, e1 in zip(edges, edges[1:])]
    return out


def node_steps(sg: SpatialGraph, n: ComputeNode) -> tuple[Step, ...]:
    """Steps of a node in program order: row segments for a NoC node (fed or sending), bands for
    every other node (raptor.pim.lowering follows the same split)."""
    bands = tuple(sg.bands.get(n.id, [(n.p0, n.p1)]))
    plan = sg.noc
    if plan is None or not plan.uses_lines(n):
        return tuple(Step(i, -1, a, b) for i, (a, b) in enumerate(bands))
    ow = max(1, sg.layers[n.layer].output.width)
    return _line_steps(bands, ow, plan.segments, plan.segment_pixels)


@functools.lru_cache(maxsize=8192)
def _line_steps(
    bands: tuple[tuple[int, int], ...], ow: int, segments: int, least: int
) -> tuple[Step, ...]:
    """node_steps of a NoC node: each band's pixels cut at whole rows and row segments (one
    node's steps, asked for again by every candidate plan and by code generation)."""
    cuts = row_segments(ow, segments, least)
    return tuple(
        Step(i, oy, pa, pb)
        for i, (a, b) in enumerate(bands)
        for oy, pa, pb in row_steps(a, b, ow, cuts)
    )


def _step_mask(s: Step, w: int) -> int:
    """Bit mask of the columns of row segment s in its output row, w pixels wide."""
    return (1 << (s.pb - s.oy * w)) - (1 << (s.pa - s.oy * w))


def step_need(sg: SpatialGraph, n: ComputeNode, steps: list[Step]) -> list[list[tuple[int, int]]]:
    """(input row, bit mask of its columns) of the window input that each of `steps` of a
    line-buffer node reads."""
    ly = sg.layers[n.layer]
    v = ly.inputs[0]
    kh, kw = ly.kernel_shape
    sh, sw = ly.strides
    pt, pl = ly.pads[0], ly.pads[1]
    if n.kind == NodeKind.MVM:
        i0, i1, _, _, _ = lines_geometry(ly, n)
    else:
        i0, i1 = 0, kh
    ow = ly.output.width
    width, height = v.width, v.height
    out = []
    for s in steps:
        y = s.oy * sh - pt
        xa, xb = s.pa - s.oy * ow, s.pb - s.oy * ow
        a = max(0, xa * sw - pl)
        b = min(width, (xb - 1) * sw - pl + kw)
        mask = (1 << b) - (1 << a) if b > a else 0
        out.append([(y + i, mask) for i in range(i0, i1) if 0 <= y + i < height])
    return out


COMM_DTYPE = np.dtype(
    [("send", np.bool_), ("peer", np.int64), ("addr", np.int64), ("size", np.int64)]
)
"""One message of a slot: a send (to `peer`) or recv (from `peer`) of `size` bytes at local
address `addr` (a producer's persistent output row, or a fed node's input row slot)."""


class OrderStuck(Exception):
    """The greedy order found no core able to move: `pairs` are (producer, consumer) cores of
    the messages still waiting."""

    def __init__(self, pairs: set[tuple[int, int]]):
        super().__init__(f"{len(pairs)} core pairs stuck")
        self.pairs = pairs


def message_span(
    sg: SpatialGraph,
    plan: NocPlan,
    n: ComputeNode,
    m: ComputeNode,
    src: Source,
    r: int,
    x0: int,
    x1: int,
) -> tuple[int, int, int, int, int, int]:
    """The sends on n's core and the matching recvs on m's core that move columns [x0, x1) of
    row r from producer n's output rows into fed node m's row of input `src.input`: (count,
    bytes of each, first send address, send address step, first recv address, recv address
    step); one message when whole pixels move, one per pixel for a channel slice. The same
    copies, done by lmv, move a producer's rows to a mixed reader on its own core."""
    eb = plan.element_bytes
    cp = sg.layers[n.layer].cols  # channels of a producer's output row pixel
    cc = sg.layers[m.layer].inputs[src.input].channels  # channels of a consumer's row pixel
    out = plan.out_row_addr(n, r)
    cr, shift = plan.consumer_row(src, r)
    ring = plan.in_row_addr(m, cr, src.input)
    pad = plan.ring_pad[m.id] if src.input == 0 else 0
    count, size = _message_shape(src, cp, cc, eb, x1 - x0)
    if src.flat:  # producer pixel p is channels [p*cp, (p+1)*cp) of the consumer's one pixel
        return 1, size, out + x0 * cp * eb, 0, ring + (pad * cc + (shift + x0) * cp) * eb, 0
    if src.channels == cp == cc:
        return 1, size, out + x0 * cp * eb, 0, ring + (x0 + pad) * cc * eb, 0
    send0 = out + (x0 * cp + src.c0) * eb
    recv0 = ring + ((x0 + pad) * cc + src.dst) * eb
    return count, size // count, send0, cp * eb, recv0, cc * eb


def _message_shape(src: Source, cp: int, cc: int, eb: int, width: int) -> tuple[int, int]:
    """(sends, total bytes) of a message of `width` producer pixels of `src` (`message_span`): one
    send when whole pixels move (or a flat source), one per pixel for a channel slice; cp and cc
    are the producer's and the consumer's channels per pixel."""
    if src.flat or src.channels == cp == cc:
        return 1, width * cp * eb
    return width, width * src.channels * eb


def _runs(mask: int) -> list[tuple[int, int]]:
    """[start, end) runs of set bits of `mask`."""
    out = []
    x = 0
    while mask >> x:
        if not (mask >> x) & 1:
            low = (mask >> x) & -(mask >> x)
            x += low.bit_length() - 1
            continue
        inv = ~(mask >> x)
        length = (inv & -inv).bit_length() - 1
        out.append((x, x + length))
        x += length
    return out


def order_messages(arch: Arch, sg: SpatialGraph, flit_ns: float | None = None) -> MessageSlots:
    """Place every NoC message of `sg` (after synchronization) between the steps of its sender and
    receiver: returns the messages of each (node id, slot k), slot k lying after the node's step
    k - 1 (slot 0 after its prologue), in the order the node's core issues them.

    An execution on estimated times (spatial/cost.py lane costs, NoC flit latency) builds one
    global sequence of events: a core whose next step has its input columns received, its waits
    satisfied and the output row slot it writes free (the row that used it sent) runs that step
    (the row groups of one reduction tree run each step together, as one event); a row segment a
    producer holds is exchanged once the consumer's core is between two steps (of any node: the
    buffers persist) and the slot the row goes to holds no row still read; of all enabled events
    the earliest runs first. Every core's program lists its events in the order of
    that sequence, so the sequence is a global order all programs respect, and the programs
    cannot deadlock (module docstring); following estimated times keeps a core's recvs in the
    order its producers deliver. Raises OrderStuck when the execution stops early.

    `flit_ns`: one per-flit link latency for every core pair instead of the mesh's (what-if
    studies whose cores are not the chip's: benchmarks/unshared.py); programs use the mesh's."""
    from raptor.spatial.cost import lane_table

    plan: NocPlan = sg.noc
    plan.timeline = {}  # this execution's layer windows only
    by_core = sg.nodes_by_core()
    cores = sorted(by_core)
    steps = {n.id: node_steps(sg, n) for ns in by_core.values() for n in ns}
    lane = dict(zip((n.id for n in sg.nodes), lane_table(arch, sg.layers, sg.nodes)))
    # slots of the persistent rows a node receives (input 0: window rows, 1: residual rows): the
    # rows each step reads, the previous row in the same slot, the last step using a row
    prev_in_slot: dict[tuple[int, int, int], int] = {}
    last_use: dict[tuple[int, int, int], int] = {}
    have: dict[tuple[int, int, int], int] = {}  # (node, row, source) -> received columns
    keys: dict[tuple[int, int, int], int] = {}  # (node, row, source) -> its index in have
    need_cols: dict[int, list[list[tuple[int, int, int]]]] = {}  # node -> step -> (key, a, b)
    spans = _Spans()
    want: dict[tuple[int, int, int], int] = {}  # (node, input, row) -> columns it reads
    srcs_of = {
        (ci, k): [si for si, src in enumerate(srcs) if src.input == k]
        for ci, srcs in plan.sources.items()
        for k in (0, 1)
    }
    for n in sg.nodes:
        ks = plan.receives(n)
        if not ks:
            continue
        w = sg.layers[n.layer].output.width
        if n.layer in plan.flat:  # one step reading the producer pixels of its K range
            a, b = plan.columns(n, 0, 0)
            window = [[(0, 0, (1 << b) - (1 << a))] for _ in steps[n.id]]
        else:
            window = [[(0, r, mask) for r, mask in rows] for rows in step_need(sg, n, steps[n.id])]
        need = [  # step -> (input, row, mask)
            (window[j] if 0 in ks else []) + ([(1, s.oy, _step_mask(s, w))] if 1 in ks else [])
            for j, s in enumerate(steps[n.id])
        ]
        seen: dict[tuple[int, int], int] = {}  # (input, slot) -> last row loaded there
        per_step = need_cols[n.id] = []
        for j, rows in enumerate(need):
            cols = []
            for k, r, mask in rows:
                last_use[n.id, k, r] = j
                want[n.id, k, r] = want.get((n.id, k, r), 0) | mask
                if (n.id, k, r) not in prev_in_slot:
                    slot = (k, r % plan.slots(n, k))
                    prev_in_slot[n.id, k, r] = seen.get(slot, -1)
                    seen[slot] = r
                    for si in srcs_of[n.layer, k]:
                        keys[n.id, r, si] = len(have)
                        have[n.id, r, si] = 0
                    if plan.reads_own(n, k):  # its own core's pieces: copied, not messages
                        for core, a, b, si in plan.pieces(n, r, k):
                            if core == n.core:
                                have[n.id, r, si] |= (1 << b) - (1 << a)
                runs = spans[mask]
                for si in srcs_of[n.layer, k]:
                    key = keys[n.id, r, si]
                    cols += [(key, a, b) for a, b in runs]
            per_step.append(cols)
    trees: dict[Unit, list[ComputeNode]] = {}
    for n in sg.nodes:
        if n.kind == NodeKind.MVM and sg.layers[n.layer].row_groups > 1:
            trees.setdefault(unit_of(n), []).append(n)
    tb, templates, nodes, cores = _tables(
        arch, sg, by_core, steps, lane, need_cols, have, keys, spans, want, prev_in_slot,
        last_use, trees, flit_ns,
    )  # fmt: skip
    cap = 16 * (tb.s_oy.size + tb.t_dest.size) + 1024
    while True:
        st = K.new_state(tb, cap)
        status = K.run_order(tb, st)
        if status != K.FULL:
            break
        cap *= 4
    plan.timeline = {
        int(ly): [float(st.tl_start[ly]), float(st.tl_end[ly])]
        for ly in st.tl_order[: st.ic[K.IC_NTL]]
    }
    if status == K.STUCK:
        pending = np.argwhere(st.pr_cnt > 0)
        pairs = {(cores[i], cores[j]) for i, j in pending}
        if not pairs:  # blocked on rows not yet produced: every fed edge into a stuck core
            stuck = {cores[i] for i in np.flatnonzero(~st.done)}
            pairs = {
                (p, n.core)
                for n in sg.nodes
                if n.core in stuck
                for x in plan.receives(n)
                for p in plan.fed_by(n, x)
            }
        raise OrderStuck(pairs)
    plan.estimated_ns = float(st.t.max()) if st.t.size else 0.0
    return MessageSlots(sg, plan, templates, nodes, cores, st.xlog[: st.ic[K.IC_NX]].copy())


def _tokens(sg: SpatialGraph, n: ComputeNode, st: list[Step], j: int) -> tuple[list, list]:
    """The tokens before and after step j of node n (its steps st)."""
    before = list(sg.tokens_before.get(n.id, [])) if j == 0 else []
    if j == 0 or st[j - 1].band != st[j].band:
        before += sg.band_before.get((n.id, st[j].band), [])
    after = []
    if j == len(st) - 1 or st[j + 1].band != st[j].band:
        after += sg.band_after.get((n.id, st[j].band), [])
    if j == len(st) - 1:
        after += sg.tokens_after.get(n.id, [])
    return before, after


class _Csr:
    """Rows of tuples appended one row at a time, laid out as a pointer array and columns."""

    def __init__(self, width: int):
        self.ptr = [0]
        self.width = width
        self.items: list[tuple] = []

    def row(self, items) -> None:
        self.items.extend(items)
        self.ptr.append(len(self.items))

    def empty(self, rows: int) -> None:
        """`rows` empty rows."""
        self.ptr.extend([len(self.items)] * rows)

    def arrays(self) -> list[np.ndarray]:
        table = np.array(self.items, np.int64).reshape(-1, self.width)
        return [np.array(self.ptr, np.int64), *(table[:, i].copy() for i in range(self.width))]


def _span(mask: int) -> list[tuple[int, int]]:
    """[a, b) runs of a mask (one for the contiguous masks steps read)."""
    low = (mask & -mask).bit_length() - 1
    if mask == (1 << mask.bit_length()) - (1 << low):
        return [(low, mask.bit_length())]
    return _runs(mask)


class _Spans(dict):
    """`_span` of every mask asked for, each computed once (one table's masks repeat row after
    row); 0 has no runs."""

    def __missing__(self, mask: int) -> tuple[tuple[int, int], ...]:
        runs = self[mask] = tuple(_span(mask)) if mask else ()
        return runs


def _tables(
    arch: Arch, sg: SpatialGraph, by_core, steps, lane, need_cols, have, keys, spans, want,
    prev_in_slot, last_use, trees, flit_ns=None,
):  # fmt: skip
    """The flat tables of message_order_kernel for one order, the message templates (producer,
    fed node, row, x0, x1, source index, source) and the nodes and cores the indices stand for.
    `keys` numbers the keys of `have` in order and gets the keys only messages deliver;
    `flit_ns` (order_messages) replaces every pair's link latency."""
    from raptor.arch.timing import flits, link_costs

    plan: NocPlan = sg.noc
    nodes = list(sg.nodes)
    cores = sorted(by_core)
    cix = {c: i for i, c in enumerate(cores)}
    nix = {n.id: i for i, n in enumerate(nodes)}
    pos = {n.id: i for ns in by_core.values() for i, n in enumerate(ns)}
    events: dict[int, int] = {}

    def event(e: int) -> int:
        return events.setdefault(e, len(events))

    def waits(toks) -> list[tuple[int, int]]:
        counts: dict[int, int] = {}
        for tk in toks:
            if tk.kind == TokenKind.WAIT:
                counts[tk.event] = counts.get(tk.event, 0) + tk.value
        return [(event(e), v) for e, v in counts.items()]

    bits = list(have.values())
    top = max((b.bit_length() for b in (*have.values(), *want.values())), default=0)
    cs_of: dict[tuple[int, ...], int] = {(c,): c for c in range(len(cores))}
    for ms in trees.values():
        cs_of.setdefault(tuple(cix[m.core] for m in ms), len(cs_of))
    gang_of = {m.id: g for g, ms in enumerate(trees.values()) for m in ms}
    wait_rows, sync_rows, need_rows, tpl_rows = _Csr(2), _Csr(2), _Csr(3), _Csr(8)
    templates: list[tuple] = []
    n_sptr, n_rowoff, n_row0, n_nrows = [0], [0], [], []
    lat: set[tuple[int, int]] = set()  # core pairs a message links
    # flits + sends - 1 of a message by its width, per message shape (_message_shape's inputs)
    durs: dict[tuple, dict[int, int]] = {}
    eb = plan.element_bytes
    tokened = {*sg.tokens_before, *sg.tokens_after}
    tokened |= {nid for nid, _ in (*sg.band_before, *sg.band_after)}
    for n in nodes:
        st = steps[n.id]
        n_sptr.append(n_sptr[-1] + len(st))
        targets = plan.targets.get(n.id) or []
        oys = [s.oy for s in st]
        row0 = min(oys) if targets and oys else 0
        nrows = max(oys) - row0 + 1 if targets and oys else 0
        n_row0.append(row0)
        n_nrows.append(nrows)
        off = n_rowoff[-1]
        n_rowoff.append(off + nrows)
        per_step = need_cols.get(n.id)
        if n.id in tokened:
            for j in range(len(st)):
                before, after = _tokens(sg, n, st, j)
                wait_rows.row(waits(before))
                sync_rows.row(
                    (cix[tk.value], event(tk.event)) for tk in after if tk.kind == TokenKind.SYNC
                )
        else:
            wait_rows.empty(len(st))
            sync_rows.empty(len(st))
        if per_step:
            for cols_of_step in per_step:
                need_rows.row(cols_of_step)
        else:
            need_rows.empty(len(st))
        if not targets:
            tpl_rows.empty(len(st))
            continue
        cp = sg.layers[n.layer].cols
        per_target = []  # what a message to each target needs that no step changes
        for m, si in targets:
            src = plan.sources[m.layer][si]
            lat.add((n.core, m.core))
            cc = sg.layers[m.layer].inputs[src.input].channels
            dur = durs.setdefault((src.flat, src.channels, cp, cc), {})
            per_target.append((m, m.id, si, src, src.input, cix[m.core], pos[m.id], cc, dur))
        w = plan.width[n.layer]
        oy = None
        for s in st:
            if s.oy != oy:  # what a message of this row to each target needs
                oy = s.oy
                row = off + oy - row0
                per_row = []
                for m, mid, si, src, x, dc, at, cc, dur in per_target:
                    cr, shift = plan.consumer_row(src, oy)
                    p = prev_in_slot.get((mid, x, cr), -1)
                    lu = last_use[mid, x, p] if p >= 0 else -1
                    key = keys.get((mid, cr, si))
                    if key is None:
                        key = keys[mid, cr, si] = len(bits)
                        bits.append(0)
                    per_row.append(
                        (m, si, src, dc, at, cc, dur, lu, key, shift, want.get((mid, x, cr), 0))
                    )
            made = []
            seg = _step_mask(s, w)
            for m, si, src, dc, at, cc, dur, lu, key, shift, wanted in per_row:
                for a, b in spans[(seg << shift) & wanted]:
                    d = dur.get(b - a)  # flits of a message b - a pixels wide
                    if d is None:
                        count, size = _message_shape(src, cp, cc, eb, b - a)
                        d = dur[b - a] = flits(arch, size) + count - 1
                    made.append((dc, at, lu, key, a, b, row, d))
                    templates.append((n, m, oy, a - shift, b - shift, si, src))
            tpl_rows.row(made)
    words = top // 64 + 2
    have0 = np.zeros((max(1, len(bits)), words), np.uint64)
    mask = (1 << 64) - 1
    for i, v in enumerate(bits):
        w = 0
        while v:
            have0[i, w] = v & mask
            v >>= 64
            w += 1
    cn_ptr = np.cumsum([0, *(len(by_core[c]) for c in cores)])
    cn_nodes = [nix[n.id] for c in cores for n in by_core[c]]
    g_nodes = _Csr(1)
    for ms in trees.values():
        g_nodes.row((nix[m.id],) for m in ms)
    cs_cores = _Csr(1)
    for cs in cs_of:
        cs_cores.row((c,) for c in cs)
    end_rows = _Csr(2)
    for c in cores:
        end_rows.row(waits(sg.tokens_end.get(c, [])))
    starts = [
        (cix[tk.value], event(tk.event))
        for c in cores
        for tk in sg.tokens_start.get(c, [])
        if tk.kind == TokenKind.SYNC
    ]
    ev0 = np.zeros((len(cores), max(1, len(events))), np.int64)  # every event numbered by now
    for c, e in starts:
        ev0[c, e] += 1
    latm = np.zeros((len(cores), len(cores)), np.float64)
    if lat:
        ps, ds = np.array(sorted(lat), np.int64).T
        per_flit = link_costs(arch, ps, ds)[0] if flit_ns is None else flit_ns
        latm[[cix[p] for p in ps], [cix[d] for d in ds]] = per_flit
    wp, wev, wcnt = wait_rows.arrays()
    yp, ycore, yev = sync_rows.arrays()
    np_, nkey, na, nb = need_rows.arrays()
    mp, *tcols = tpl_rows.arrays()
    gp, gn = g_nodes.arrays()
    csp, csc = cs_cores.arrays()
    ep, eev, ecnt = end_rows.arrays()
    i64 = np.int64
    st_all = [s for n in nodes for s in steps[n.id]]
    tb = K.OrderTables(
        cn_ptr=np.asarray(cn_ptr, i64), cn_nodes=np.array(cn_nodes, i64),
        n_core=np.array([cix[n.core] for n in nodes], i64),
        n_layer=np.array([n.layer for n in nodes], i64),
        n_lane=np.array([lane[n.id] for n in nodes], np.float64),
        n_keep=np.array([plan.out_rows.get(n.id, -1) for n in nodes], i64),
        n_sptr=np.array(n_sptr, i64),
        n_gang=np.array([gang_of.get(n.id, -1) for n in nodes], i64),
        n_rowoff=np.array(n_rowoff, i64), n_row0=np.array(n_row0, i64),
        n_nrows=np.array(n_nrows, i64),
        s_oy=np.array([s.oy for s in st_all], i64), s_pa=np.array([s.pa for s in st_all], i64),
        s_pb=np.array([s.pb for s in st_all], i64),
        s_wptr=wp, s_wev=wev, s_wcnt=wcnt, s_yptr=yp, s_ycore=ycore, s_yev=yev,
        s_nptr=np_, s_nkey=nkey, s_na=na, s_nb=nb, s_mptr=mp,
        t_dest=tcols[0], t_at=tcols[1], t_lu=tcols[2], t_key=tcols[3], t_a=tcols[4],
        t_b=tcols[5], t_row=tcols[6], t_dur=tcols[7],
        g_ptr=gp, g_nodes=gn,
        g_cs=np.array([cs_of[tuple(cix[m.core] for m in ms)] for ms in trees.values()], i64),
        cs_ptr=csp, cs_cores=csc, end_wptr=ep, end_wev=eev, end_wcnt=ecnt, lat=latm,
        have0=have0, ev0=ev0, n_layers=len(sg.layers),
    )  # fmt: skip
    return tb, templates, nodes, cores


class MessageSlots(Mapping):
    """The messages of each (node id, slot k) an order placed (order_messages), a COMM_DTYPE
    array in the order the node's core issues them, built from the order's exchange log when
    first read: candidate plans are compared by their estimated end alone."""

    def __init__(self, sg, plan, templates, nodes, cores, xlog):
        # the plan's fields message_span reads as they are now: a later re-layout (demotion) assigns
        # new dicts to them instead of changing these
        self._args = (sg, copy.copy(plan), templates, nodes, cores, xlog)
        self._slots: dict[tuple[int, int], np.ndarray] | None = None

    def _built(self) -> dict[tuple[int, int], np.ndarray]:
        if self._slots is None:
            self._slots = self._build(*self._args)
            self._args = None
        return self._slots

    @staticmethod
    def _build(sg, plan, templates, nodes, cores, xlog) -> dict[tuple[int, int], np.ndarray]:
        """Each exchange of the log gives its sender's slot `count` sends and its receiver's slot
        as many recvs (message_span); a slot lists them exchange by exchange, sends before recvs."""
        slot_of: dict[tuple[int, int], int] = {}
        rows = []  # per exchange, sender side then receiver side
        for tp, pn, pk, dn, dk in xlog.tolist():
            n, m, r, x0, x1, si, src = templates[tp]
            count, size, send0, s_step, recv0, r_step = message_span(sg, plan, n, m, src, r, x0, x1)
            ks = slot_of.setdefault((nodes[pn].id, pk), len(slot_of))
            kr = slot_of.setdefault((nodes[dn].id, dk), len(slot_of))
            rows.append((ks, 1, m.core, count, size, send0, s_step))
            rows.append((kr, 0, n.core, count, size, recv0, r_step))
        if not rows:
            return {}
        slot, send, peer, count, size, addr0, step = np.array(rows, np.int64).T
        first = np.cumsum(count) - count  # each side's first message
        within = np.arange(int(count.sum())) - np.repeat(first, count)
        msgs = np.empty(within.size, COMM_DTYPE)
        msgs["send"] = np.repeat(send, count).astype(bool)
        msgs["peer"] = np.repeat(peer, count)
        msgs["addr"] = np.repeat(addr0, count) + np.repeat(step, count) * within
        msgs["size"] = np.repeat(size, count)
        by_slot = np.repeat(slot, count)
        order = np.argsort(by_slot, kind="stable")
        cuts = np.searchsorted(by_slot[order], np.arange(1, len(slot_of)))
        return dict(zip(slot_of, np.split(msgs[order], cuts)))

    def __getitem__(self, key):
        return self._built()[key]

    def __iter__(self):
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._built())
