"""NoC message order: where every send and recv of the NoC dataflow goes in its core's program.

Send and recv are a rendezvous (pimsim-nn pairs them by source and destination in program order,
and at rob_size 1 a core waits at its send until the receiver reaches its recv), so the order of
the messages in each program decides whether the programs can deadlock and how long cores wait.
`order_messages` runs the whole program once on estimated times, without values, and appends
every event to the programs of the cores it involves as it happens; raptor.spatial.noc explains
why that one global order makes the programs deadlock-free whatever the real timing.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import NamedTuple

from raptor.arch import Arch
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


def row_segments(ow: int) -> list[int]:
    """Column cuts [0, ..., ow] of an output row into the segments a NoC node computes and sends
    one at a time (up to SEGMENTS_PER_ROW of at least two pixels), so that a consumer starts on
    the first columns of a row before its producers finished the row."""
    n = max(1, min(SEGMENTS_PER_ROW, ow // 2))
    return [round(i * ow / n) for i in range(n + 1)]


SEGMENTS_PER_ROW = 4


def row_steps(a: int, b: int, ow: int, cuts: list[int]) -> list[tuple[int, int, int]]:
    """(output row, first pixel, end pixel) of pixels [a, b) cut at whole rows and at `cuts`."""
    out = []
    for oy, (x0, x1) in row_spans(a, b, ow).items():
        edges = sorted({x0, x1, *(x for x in cuts if x0 < x < x1)})
        out += [(oy, oy * ow + e0, oy * ow + e1) for e0, e1 in zip(edges, edges[1:])]
    return out


def node_steps(sg: SpatialGraph, n: ComputeNode) -> list[Step]:
    """Steps of a node in program order: row segments for a NoC node (fed or sending), bands for
    every other node (raptor.pim.lowering follows the same split)."""
    bands = sg.bands.get(n.id, [(n.p0, n.p1)])
    plan = sg.noc
    if plan is None or not plan.uses_lines(n):
        return [Step(i, -1, a, b) for i, (a, b) in enumerate(bands)]
    ow = max(1, sg.layers[n.layer].output.width)
    cuts = row_segments(ow)
    return [
        Step(i, oy, pa, pb)
        for i, (a, b) in enumerate(bands)
        for oy, pa, pb in row_steps(a, b, ow, cuts)
    ]


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


class Comm(NamedTuple):
    """A send (to `peer`) or recv (from `peer`) of `size` bytes at local address `addr` (a
    producer's persistent output row, or a fed node's input row slot)."""

    send: bool
    peer: int
    addr: int
    size: int


class OrderStuck(Exception):
    """The greedy order found no core able to move: `pairs` are (producer, consumer) cores of
    the messages still waiting."""

    def __init__(self, pairs: set[tuple[int, int]]):
        super().__init__(f"{len(pairs)} core pairs stuck")
        self.pairs = pairs


INF = float("inf")


def _message(
    sg: SpatialGraph,
    plan: NocPlan,
    n: ComputeNode,
    m: ComputeNode,
    src: Source,
    r: int,
    x0: int,
    x1: int,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(address, bytes) of the sends on n's core and of the matching recvs on m's core that move
    columns [x0, x1) of row r from producer n's output rows into fed node m's row of input
    `src.input`: one message when whole pixels move, one per pixel for a channel slice."""
    eb = plan.element_bytes
    cp = sg.layers[n.layer].cols  # channels of a producer's output row pixel
    cc = sg.layers[m.layer].inputs[src.input].channels  # channels of a consumer's row pixel
    out = plan.out_row_addr(n, r)
    cr, shift = plan.consumer_row(src, r)
    ring = plan.in_row_addr(m, cr, src.input)
    pad = plan.ring_pad[m.id] if src.input == 0 else 0
    if src.flat:  # producer pixel p is channels [p*cp, (p+1)*cp) of the consumer's one pixel
        size = (x1 - x0) * cp * eb
        return [(out + x0 * cp * eb, size)], [(ring + (pad * cc + (shift + x0) * cp) * eb, size)]
    if src.channels == cp == cc:
        size = (x1 - x0) * cp * eb
        return [(out + x0 * cp * eb, size)], [(ring + (x0 + pad) * cc * eb, size)]
    xs = range(x0, x1)
    size = src.channels * eb
    sends = [(out + (x * cp + src.c0) * eb, size) for x in xs]
    recvs = [(ring + ((x + pad) * cc + src.dst) * eb, size) for x in xs]
    return sends, recvs


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


def order_messages(arch: Arch, sg: SpatialGraph) -> dict[tuple[int, int], list[Comm]]:
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
    order its producers deliver. Raises OrderStuck when the execution stops early."""
    from raptor.arch.timing import flits, link_latency_ns
    from raptor.spatial.cost import lane_ns

    plan: NocPlan = sg.noc
    plan.timeline = {}  # this execution's layer windows only
    by_core = sg.nodes_by_core()
    cores = sorted(by_core)
    steps = {n.id: node_steps(sg, n) for ns in by_core.values() for n in ns}
    lane = {n.id: lane_ns(arch, sg.layers[n.layer], n) for n in sg.nodes}
    # slots of the persistent rows a node receives (input 0: window rows, 1: residual rows): the
    # rows each step reads, the previous row in the same slot, the last step using a row
    need: dict[int, list[list[tuple[int, int, int]]]] = {}  # node -> step -> (input, row, mask)
    prev_in_slot: dict[tuple[int, int, int], int] = {}
    last_use: dict[tuple[int, int, int], int] = {}
    have: dict[tuple[int, int, int], int] = {}  # (node, row, source) -> received columns
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
        need[n.id] = [
            (window[j] if 0 in ks else []) + ([(1, s.oy, _step_mask(s, w))] if 1 in ks else [])
            for j, s in enumerate(steps[n.id])
        ]
        seen: dict[tuple[int, int], int] = {}  # (input, slot) -> last row loaded there
        for j, rows in enumerate(need[n.id]):
            for k, r, mask in rows:
                last_use[n.id, k, r] = j
                want[n.id, k, r] = want.get((n.id, k, r), 0) | mask
                if (n.id, k, r) not in prev_in_slot:
                    slot = (k, r % plan.slots(n, k))
                    prev_in_slot[n.id, k, r] = seen.get(slot, -1)
                    seen[slot] = r
                    for si in srcs_of[n.layer, k]:
                        have[n.id, r, si] = 0
                    if k == 0 and n.id in plan.mixed:  # its own core's pieces: from host memory
                        for core, a, b, si in plan.pieces(n, r):
                            if core == n.core:
                                have[n.id, r, si] |= (1 << b) - (1 << a)
    trees: dict[Unit, list[ComputeNode]] = {}
    for n in sg.nodes:
        if n.kind == NodeKind.MVM and sg.layers[n.layer].row_groups > 1:
            trees.setdefault(unit_of(n), []).append(n)
    gang = {m.id: ms for ms in trees.values() for m in ms}

    comm: dict[tuple[int, int], list[Comm]] = {}
    pos = {n.id: i for ns in by_core.values() for i, n in enumerate(ns)}
    ev: dict[int, dict[int, int]] = {c: {} for c in cores}
    ni = dict.fromkeys(cores, 0)  # index of the current node
    cur = {c: by_core[c][0] if by_core[c] else None for c in cores}  # the current node or None
    k = dict.fromkeys(cores, 0)  # steps of the current node done
    t = dict.fromkeys(cores, 0.0)  # when the core is free
    ver = dict.fromkeys(cores, 0)
    done = dict.fromkeys(cores, False)
    # pending messages: producer core -> destination core -> message id -> (producer, fed node,
    # producer row, x0, x1, source index, source, fed node's core, its position there, last step
    # reading the slot's previous row or None); a destination with none left is dropped
    to: dict[int, dict[int, dict[int, tuple]]] = {c: {} for c in cores}
    rows_out: dict[int, dict[int, int]] = {}  # producer node -> pending messages per output row
    inbound: dict[int, set[int]] = {c: set() for c in cores}  # producer cores holding rows for c
    heap: list[tuple] = []
    seq = 0
    now = 0.0

    def wait_counts(toks) -> tuple[tuple[int, int], ...]:
        """(event, count) a core must have received before it passes the waits of `toks`."""
        counts: dict[int, int] = {}
        for tk in toks:
            if tk.kind == TokenKind.WAIT:
                counts[tk.event] = counts.get(tk.event, 0) + tk.value
        return tuple(counts.items())

    def waits_ok(c: int, counts: tuple[tuple[int, int], ...]) -> bool:
        reg = ev[c]
        for e, v in counts:
            if reg.get(e, 0) < v:
                return False
        return True

    end_waits = {c: wait_counts(sg.tokens_end.get(c, [])) for c in cores}
    step_waits: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}  # (node, step) -> counts
    # the (have key, columns) each step of a fed node needs received
    need_cols = {
        n.id: [
            [((n.id, r, si), m) for x, r, m in rows for si in srcs_of[n.layer, x]]
            for rows in need[n.id]
        ]
        for n in sg.nodes
        if n.id in need
    }

    def before(n: ComputeNode, j: int) -> list:
        st = steps[n.id]
        toks = list(sg.tokens_before.get(n.id, [])) if j == 0 else []
        if j == 0 or st[j - 1].band != st[j].band:
            toks += sg.band_before.get((n.id, st[j].band), [])
        return toks

    def after(n: ComputeNode, j: int) -> list:
        st = steps[n.id]
        toks = []
        if j == len(st) - 1 or st[j + 1].band != st[j].band:
            toks += sg.band_after.get((n.id, st[j].band), [])
        if j == len(st) - 1:
            toks += sg.tokens_after.get(n.id, [])
        return toks

    # ready() of each core at its version: it reads only the core's own state (its node, step,
    # event registers, received columns, pending rows), and every change to that touches the core
    memo: dict[int, tuple[int, bool]] = {}
    # whether a reduction tree's members all sit at the same step of it, ready, while no event
    # runs (the same for whichever member asks): keyed by the tree's first node id
    tree_memo: dict[int, bool] = {}
    out_rows = plan.out_rows
    # the cores of each node's reduction tree, and half the time of each step (the margin by
    # which a due exchange holds a step back)
    gang_cores = {nid: tuple(m.core for m in ms) for nid, ms in gang.items()}
    half = {nid: [(s.pb - s.pa) * lane[nid] / 2 for s in st] for nid, st in steps.items()}
    heappush = heapq.heappush

    def ready(c: int) -> bool:
        r = memo.get(c)
        if r is None or r[0] != ver[c]:
            r = memo[c] = (ver[c], _ready(c))
        return r[1]

    def _ready(c: int) -> bool:
        """Core c can run its next event: a step (its output row slot free: the row computed
        out_rows steps earlier is sent), entering its next node, or ending its round."""
        if done[c]:
            return False
        n = cur[c]
        if n is None:
            return not to[c] and waits_ok(c, end_waits[c])
        nid = n.id
        j = k[c]
        st = steps[nid]
        if j == len(st):
            return True  # rows still to send stay in the node's persistent output rows
        keep = out_rows.get(nid)
        if keep is not None:
            per_row = rows_out.get(nid)
            if per_row:
                lim = st[j].oy - keep
                for r in per_row:
                    if r <= lim:
                        return False
        w = step_waits.get((nid, j))
        if w is None:
            w = step_waits[nid, j] = wait_counts(before(n, j))
        if w and not waits_ok(c, w):
            return False
        per_step = need_cols.get(nid)
        if per_step is None:
            return True
        for key, m in per_step[j]:
            if have[key] & m != m:
                return False
        return True

    def key(c: int) -> tuple[int, int]:
        """The message slot core c is in: after step k of its current node, or the end of its
        last node once all its nodes ran."""
        n = cur[c]
        if n is None:
            n = by_core[c][-1]
            return (n.id, len(steps[n.id]))
        return (n.id, k[c])

    # the time and versions of the last event pushed for each message id (an exchange: sender's
    # version, receiver's version, time) or core tuple (a step: time, version tuple): an
    # event equal to it is still in the heap, ahead of any copy pushed now, and whichever way it
    # pops (it runs and touches its cores, or it is stale) the copy would pop stale, so the copy
    # is not pushed. Heap entries: (time, is a step, push sequence, cores, their versions,
    # message id or None); at equal times exchanges go first: they are short and free both cores
    last: dict = {}
    # producer core -> consumer core -> (their versions, time of the pair's first free message or
    # INF when none is free) at the pair's last scan. Nothing a scan reads (the pair's pending
    # messages, the consumer's node and step, both cores' free times) changes without touching
    # one of the two cores, and the pushed event stays in the heap (a valid event runs only when
    # `now` reaches its time, and running touches both cores): with the same versions a new scan
    # finds the same message due at the same time, whose push would be a duplicate
    pair: dict[int, dict[int, tuple[int, int, float]]] = {c: {} for c in cores}

    def free_mid(msgs: dict[int, tuple], d: int) -> int | None:
        """Id of the first of `msgs` (pending messages to core d) whose slot is free: the
        persistent slot its row goes to (row r of input x of consumer m, m at position `at` on
        d; `lu` the last step of m that reads the slot's previous row, None when there is none)
        holds no row m still reads."""
        nd = ni[d]
        kd = k[d]
        for mid, msg in msgs.items():
            at, lu = msg[8], msg[9]
            if at >= nd and (lu is None or (at == nd and lu < kd)):
                return mid
        return None

    def push_exchange(p: int, d: int, vp: int, vd: int, when: float, mid: int) -> tuple:
        """Push the exchange of message `mid` from core p (version vp) to core d (version vd) at
        `when` unless the same event was the last pushed for it; returns (vp, vd, when)."""
        nonlocal seq
        e = (vp, vd, when)
        if last.get(mid) != e:
            last[mid] = e
            seq += 1
            heappush(heap, (when, False, seq, (p, d), (vp, vd), mid))
        return e

    def exchange_due(p: int, d: int, msgs: dict[int, tuple], vd: int) -> float:
        """Push the first free of `msgs` (pending from core p to core d, version vd) unless the
        pair was scanned at these versions; returns when it is due (INF: none is free)."""
        vp = ver[p]
        sent = pair[p]
        got = sent.get(d)
        if got is not None and got[0] == vp and got[1] == vd:
            return got[2]
        mid = free_mid(msgs, d)
        if mid is None:
            sent[d] = (vp, vd, INF)
            return INF
        tp, td = t[p], t[d]
        when = tp if tp > td else td
        when = when if when > now else now  # max(t[p], t[d], now)
        sent[d] = push_exchange(p, d, vp, vd, when, mid)
        return when

    def offer(c: int) -> None:
        """Push the events core c can take part in now. A step waits while one of the core's
        messages can be exchanged before half the step would be done: the peer would otherwise
        wait for the whole step (rendezvous)."""
        nonlocal seq
        soon = INF
        tc = t[c]
        vc = ver[c]
        base = tc if tc > now else now  # max(t[c], now)
        # the exchanges of one core pair are all due at the same time and the first one pushed
        # runs first and moves both cores on (staling the rest): push only that one
        # (pushed in message-id order, as a scan of all of c's pending messages would). A pair
        # whose two versions are those of its last scan is not scanned again: its first free
        # message is the same, already pushed at the same time (`pair` above)
        out = to[c]
        if out:
            first = []
            mine = pair[c]
            for d, msgs in out.items():
                vd = ver[d]
                got = mine.get(d)
                if got is not None and got[0] == vc and got[1] == vd:  # scanned at these versions
                    soon = got[2] if got[2] < soon else soon
                    continue
                mid = free_mid(msgs, d)
                if mid is None:
                    mine[d] = (vc, vd, INF)
                else:
                    first.append((mid, d, vd))
            first.sort()
            for mid, d, vd in first:
                td = t[d]
                when = td if td > base else base
                if when < soon:
                    soon = when
                mine[d] = push_exchange(c, d, vc, vd, when, mid)
        for p in inbound[c]:
            msgs = to[p].get(c)
            if not msgs:
                continue
            w = exchange_due(p, c, msgs, vc)
            if w < soon:
                soon = w
        if not ready(c):
            return
        n = cur[c]
        j = k[c]
        nid = None if n is None or j == len(steps[n.id]) else n.id
        members = gang.get(nid)
        if members is None:
            cs = (c,)
            start = base
            vs = (vc,)
        else:
            ok = tree_memo.get(members[0].id)
            if ok is None:
                ok = tree_memo[members[0].id] = all(
                    cur[m.core] is m and k[m.core] == j and ready(m.core) for m in members
                )
            if not ok:
                return
            cs = gang_cores[nid]
            start = max(now, *(t[x] for x in cs))
            vs = tuple([ver[x] for x in cs])
        if nid is not None and soon < start + half[nid][j]:
            return
        e = (start, vs)
        if last.get(cs) != e:
            last[cs] = e
            seq += 1
            heappush(heap, (start, True, seq, cs, vs, None))

    def run(c: int, when: float, woke: set[int]) -> None:
        n = cur[c]
        if n is None:
            for tk in sg.tokens_end.get(c, []):
                if tk.kind == TokenKind.WAIT:
                    ev[c][tk.event] -= tk.value
            done[c] = True
            return
        j = k[c]
        if j == len(steps[n.id]):
            ni[c] += 1
            cur[c] = by_core[c][ni[c]] if ni[c] < len(by_core[c]) else None
            k[c] = 0
            woke.update(inbound[c])
            return
        for tk in before(n, j):
            if tk.kind == TokenKind.WAIT:
                ev[c][tk.event] -= tk.value
        s = steps[n.id][j]
        t[c] = when + (s.pb - s.pa) * lane[n.id]
        span = plan.timeline.setdefault(n.layer, [when, 0.0])
        span[0], span[1] = min(span[0], when), max(span[1], t[c])
        for tk in after(n, j):
            if tk.kind == TokenKind.SYNC:
                reg = ev[tk.value]
                reg[tk.event] = reg.get(tk.event, 0) + 1
                woke.add(tk.value)
        k[c] = j + 1
        if plan.targets.get(n.id):
            seg = _step_mask(s, plan.width[n.layer])
            for m, si in plan.targets[n.id]:
                src = plan.sources[m.layer][si]
                cr, shift = plan.consumer_row(src, s.oy)
                x = src.input
                p = prev_in_slot.get((m.id, x, cr), -1)
                lu = last_use[m.id, x, p] if p >= 0 else None
                for a, b in _runs((seg << shift) & want.get((m.id, x, cr), 0)):
                    a, b = a - shift, b - shift
                    mid = next(ids)
                    msg = (n, m, s.oy, a, b, si, src, m.core, pos[m.id], lu)
                    to[c].setdefault(m.core, {})[mid] = msg
                    per_row = rows_out.setdefault(n.id, {})
                    per_row[s.oy] = per_row.get(s.oy, 0) + 1
                    inbound[m.core].add(c)
                    woke.add(m.core)

    ids = itertools.count()  # message ids
    for c in cores:
        for tk in sg.tokens_start.get(c, []):
            if tk.kind == TokenKind.SYNC:
                reg = ev[tk.value]
                reg[tk.event] = reg.get(tk.event, 0) + 1
    for c in cores:
        offer(c)
    heappop = heapq.heappop
    while heap:
        when, is_step, _, cs, vs, mid = heappop(heap)
        if is_step:
            if len(cs) == 1:
                if ver[cs[0]] != vs[0]:
                    continue
            elif tuple([ver[x] for x in cs]) != vs:
                continue
        else:
            p, d = cs
            if ver[p] != vs[0] or ver[d] != vs[1]:
                continue
        if when > now:
            now = when
        woke: set[int] = set(cs)
        if is_step:
            for c in cs:
                run(c, when, woke)
                ver[c] += 1
        else:
            to_d = to[p].get(d)
            if to_d is None or mid not in to_d:
                continue
            n, m, r, x0, x1, si, src = to_d.pop(mid)[:7]
            if not to_d:
                del to[p][d]
            per_row = rows_out[n.id]
            per_row[r] -= 1
            if not per_row[r]:
                del per_row[r]
            sends, recvs = _message(sg, plan, n, m, src, r, x0, x1)
            comm.setdefault(key(p), []).extend([Comm(True, d, a, z) for a, z in sends])
            comm.setdefault(key(d), []).extend([Comm(False, p, a, z) for a, z in recvs])
            cr, shift = plan.consumer_row(src, r)
            have[m.id, cr, si] |= (1 << (x1 + shift)) - (1 << (x0 + shift))
            size = sum(z for _, z in sends)
            t[p] = t[d] = when + (flits(arch, size) + len(sends) - 1) * link_latency_ns(arch, p, d)
            if d not in to[p]:
                inbound[d].discard(p)
            ver[p] += 1
            ver[d] += 1
        extra = set()
        for x in woke:
            if x not in cs:
                ver[x] += 1
            extra.update(inbound[x])
            n = cur[x]
            if n is not None:
                g = gang_cores.get(n.id)
                if g is not None:
                    extra.update(g)
        tree_memo.clear()
        for x in woke | extra:
            offer(x)
    if not all(done.values()):
        pairs = {(c, d) for c in cores for d in to[c]}
        if not pairs:  # blocked on rows not yet produced: every fed edge into a stuck core
            stuck = {c for c in cores if not done[c]}
            pairs = {
                (p, n.core)
                for n in sg.nodes
                if n.core in stuck
                for x in plan.receives(n)
                for p in plan.fed_by(n, x)
            }
        raise OrderStuck(pairs)
    plan.estimated_ns = max(t.values(), default=0.0)
    return comm
