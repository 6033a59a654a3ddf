"""NoC dataflow: which activation edges travel core to core with send/recv instead of host memory.

A *producer* is a node of a layer that computes its output rows in order: the root row group of a
GEMM layer over full columns, or a max/average pool, both lowered over line buffers
(raptor.pim.lowering). A *consumer unit* is a line-buffer MVM reduction tree (all row groups of one
layer, replica, column slice and pixel range) or a line-buffer pool node whose `inputs[0]` is
exactly one producer layer's output view (`noc_edges`). A consumer unit is *fed* over the NoC when
every piece of input it loads comes from producer nodes on other cores: instead of an `ld` of an
input row into its line buffer it `recv`s each producer's segment of that row, and the producer
`send`s the segment from its local output rows right after computing it. Everything else (network
inputs, constants, outputs, residual reads, flattened/strided/concat views, same-core edges) stays
in host memory, ordered by the synchronization pass's tokens; a producer also `st`s its rows when
its buffer keeps a host reader.

Granularity and buffers. NoC nodes compute one row segment per step (up to SEGMENTS_PER_ROW per
output row), so a consumer starts on the first columns of a row before its producers finished it.
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

import heapq
from dataclasses import dataclass, field, replace
from typing import ClassVar

from raptor.arch import Arch
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
    kh, kw = layer.kernel_shape
    sh, sw = layer.strides
    return layer.kind == LayerKind.GEMM and not (
        v.chw is not None or v.pixels <= 1 or sw > kw or sh > kh
    )


def pool_lines_ok(layer: Layer) -> bool:
    """Geometry that the line-buffer pool lowering handles."""
    return layer.kind in (LayerKind.MAXPOOL, LayerKind.AVGPOOL) and not (
        layer.inputs[0].chw is not None or layer.strides[1] > layer.kernel_shape[1]
    )


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
    producer_layer: dict[int, int] = field(default_factory=dict)  # consumer layer -> producer
    width: dict[int, int] = field(default_factory=dict)  # producer layer -> output row width
    producers: dict[int, list[ComputeNode]] = field(default_factory=dict)  # root nodes by p0
    rows: dict[int, tuple[list[int], frozenset[int], int, int]] = field(default_factory=dict)
    targets: dict[int, list[ComputeNode]] = field(default_factory=dict)  # producer id -> fed
    senders: set[Unit] = field(default_factory=set)  # units of producers with targets
    host_buffers: set[str] = field(default_factory=set)  # activation buffers with a host reader
    ring_rows: dict[int, int] = field(default_factory=dict)  # fed node -> input row slots
    out_rows: dict[int, int] = field(default_factory=dict)  # producer node -> output row slots
    element_bytes: int = 2
    comm: dict[tuple[int, int], list] = field(default_factory=dict)  # order_messages
    estimated_ns: float = 0.0  # end of the estimated execution order_messages followed
    timeline: dict[int, list[float]] = field(default_factory=dict)  # layer -> [start, end] ns
    demoted: dict[str, int] = field(default_factory=dict)  # units sent back to host, by reason

    def is_fed(self, n: ComputeNode) -> bool:
        return unit_of(n) in self.fed

    def uses_lines(self, n: ComputeNode) -> bool:
        """n's unit is fed or sends rows, so it must be lowered over line buffers."""
        u = unit_of(n)
        return u in self.fed or u in self.senders

    def pieces(self, m: ComputeNode, iy: int) -> list[tuple[int, int, int]]:
        """(producer core, x0, x1) segments of input row iy that fed consumer m receives, by
        producer pixel."""
        _, _, x0, x1 = self.rows[m.id]
        lp = self.producer_layer[m.layer]
        w = self.width[lp]
        lo, hi = iy * w + x0, iy * w + x1
        out = []
        for n in self.producers[lp]:
            a, b = max(lo, n.p0), min(hi, n.p1)
            if a < b:
                out.append((n.core, a - iy * w, b - iy * w))
        return out

    def sends(self, n: ComputeNode, oy: int, xa: int, xb: int) -> list[tuple[int, int, int]]:
        """(consumer core, x0, x1) segments of output row oy (columns [xa, xb), computed by
        producer n) that n sends, in canonical consumer order."""
        out = []
        for m in self.targets.get(n.id, ()):
            _, rowset, x0, x1 = self.rows[m.id]
            a, b = max(xa, x0), min(xb, x1)
            if oy in rowset and a < b:
                out.append((m.core, a, b))
        return out

    def fed_by(self, m: ComputeNode) -> set[int]:
        """Producer cores of a fed consumer node."""
        return {c for iy in self.rows[m.id][0] for c, _, _ in self.pieces(m, iy)}


def noc_edges(sg: SpatialGraph) -> dict[int, int]:
    """Consumer layer -> producer layer of every edge the NoC can carry (module docstring): the
    consumer reads, over a line buffer, exactly the output view of one producer layer that
    computes every output channel of its rows in order. Needs tiling (column slices)."""
    writers: dict[str, list[Layer]] = {}
    for ly in sg.layers:
        writers.setdefault(ly.output.buffer, []).append(ly)
    full = {
        n.layer
        for n in sg.nodes
        if n.kind == NodeKind.MVM and (n.c0, n.c1) != (0, sg.layers[n.layer].cols)
    }
    out = {}
    for lc in sg.layers:
        v = lc.inputs[0]
        if not (mvm_lines_ok(lc) or pool_lines_ok(lc)):
            continue
        ws = writers.get(v.buffer, [])
        if len(ws) != 1 or ws[0].output != v or ws[0].index >= lc.index:
            continue
        lp = ws[0]
        if sg.buffers[v.buffer].role not in (BufferRole.ACT, BufferRole.OUTPUT):
            continue
        if (lp.kind == LayerKind.GEMM and mvm_lines_ok(lp) and lp.index not in full) or (
            lp.kind != LayerKind.GEMM and pool_lines_ok(lp)
        ):
            out[lc.index] = lp.index
    return out


def plan_noc(sg: SpatialGraph, element_bytes: int) -> NocPlan:
    """Choose the fed consumer units of `sg` (module docstring); needs cores assigned."""
    by_layer: dict[int, list[ComputeNode]] = {}
    for n in sg.nodes:
        by_layer.setdefault(n.layer, []).append(n)
    plan = NocPlan(element_bytes=element_bytes)
    for ci, pi in noc_edges(sg).items():
        lc, lp = sg.layers[ci], sg.layers[pi]
        if lp.kind == LayerKind.GEMM:
            roots = [n for n in by_layer.get(lp.index, []) if n.row_group == 0]
        else:
            roots = list(by_layer.get(lp.index, []))
        plan.producer_layer[lc.index] = lp.index
        plan.width[lp.index] = lp.output.width
        plan.producers[lp.index] = sorted(roots, key=lambda n: n.p0)
        units: dict[Unit, list[ComputeNode]] = {}
        for m in by_layer.get(lc.index, []):
            rows, x0, x1 = input_rows(sg, m)
            plan.rows[m.id] = (rows, frozenset(rows), x0, x1)
            units.setdefault(unit_of(m), []).append(m)
        for u, ms in units.items():
            cores = {c for m in ms for c in plan.fed_by(m)}
            if cores and not any(m.core in cores for m in ms):
                plan.fed.add(u)
            elif cores:
                plan.demoted["same core"] = plan.demoted.get("same core", 0) + 1
    _derive(sg, plan)
    while True:
        bad = _mismatched_pairs(sg, plan)
        if not bad:
            break
        demote_pairs(sg, plan, bad, "message order")
    return plan


def demote_pairs(sg: SpatialGraph, plan: NocPlan, pairs: set[tuple[int, int]], why: str) -> int:
    """Return to host memory every fed unit with a node on core C fed by core P, for (P, C) in
    `pairs`; returns how many units were demoted."""
    gone: set[Unit] = set()
    for m in sg.nodes:
        u = unit_of(m)
        if u in plan.fed and u not in gone and any((p, m.core) in pairs for p in plan.fed_by(m)):
            gone.add(u)
    plan.fed -= gone
    if gone:
        plan.demoted[why] = plan.demoted.get(why, 0) + len(gone)
        _derive(sg, plan)
    return len(gone)


# local memory a NoC node may spend on received input rows (else a ring of kernel-height rows) and
# on output rows waiting to be sent (else one row)
RING_BYTES = 512 * 1024
OUT_BYTES = 192 * 1024


def _derive(sg: SpatialGraph, plan: NocPlan) -> None:
    """Targets of every producer node, sender units and host-read buffers from `plan.fed`."""
    plan.targets = {}
    order = {n.id: i for nodes in sg.nodes_by_core().values() for i, n in enumerate(nodes)}
    fed_nodes = sorted(
        (m for m in sg.nodes if unit_of(m) in plan.fed), key=lambda m: (m.core, order[m.id])
    )
    for m in fed_nodes:
        lp = plan.producer_layer[m.layer]
        w = plan.width[lp]
        rows, _, x0, x1 = plan.rows[m.id]
        for n in plan.producers[lp]:
            if any(max(iy * w + x0, n.p0) < min(iy * w + x1, n.p1) for iy in rows):
                plan.targets.setdefault(n.id, []).append(m)
    plan.senders = {
        unit_of(n) for ns in plan.producers.values() for n in ns if n.id in plan.targets
    }
    eb = plan.element_bytes
    plan.ring_rows = {}
    for m in fed_nodes:
        ly = sg.layers[m.layer]
        rows = plan.rows[m.id][0]
        span = max(rows) - min(rows) + 1 if rows else 1
        wp = lines_geometry(ly, m)[4] if m.kind == NodeKind.MVM else ly.inputs[0].width
        fits = span * wp * ly.inputs[0].channels * eb <= RING_BYTES
        plan.ring_rows[m.id] = span if fits else ly.kernel_shape[0]
    plan.out_rows = {}
    for ps in plan.producers.values():
        for n in ps:
            if n.id in plan.targets:
                w = sg.layers[n.layer].output.width
                rows = (n.p1 - 1) // w - n.p0 // w + 1
                row_bytes = w * sg.layers[n.layer].cols * eb
                plan.out_rows[n.id] = max(1, min(rows, OUT_BYTES // row_bytes))
    host: set[str] = set()
    for n in sg.nodes:
        for _, v in host_views(sg, n, plan):
            host.add(v.buffer)
    host.update(b for b, buf in sg.buffers.items() if buf.role != BufferRole.ACT)
    plan.host_buffers = host


def host_views(sg: SpatialGraph, n: ComputeNode, plan: NocPlan | None) -> list[tuple[int, object]]:
    """(input index, view) of what node n reads from host memory: a non-root row group reads only
    the window input; a fed unit's window input arrives over the NoC."""
    ly = sg.layers[n.layer]
    ks = [0] if (n.kind == NodeKind.MVM and n.row_group > 0) else range(len(ly.inputs))
    fed = plan is not None and plan.is_fed(n)
    return [(k, ly.inputs[k]) for k in ks if not (k == 0 and fed)]


def _mismatched_pairs(sg: SpatialGraph, plan: NocPlan) -> set[tuple[int, int]]:
    """Core pairs (P, C) whose send order on P differs from the recv order on C."""
    sent: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    got: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for core, nodes in sg.nodes_by_core().items():
        for n in nodes:
            ms = plan.targets.get(n.id)
            if ms:
                w = plan.width[n.layer]
                for oy in range(n.p0 // w, (n.p1 - 1) // w + 1):
                    xa, xb = max(n.p0, oy * w) - oy * w, min(n.p1, (oy + 1) * w) - oy * w
                    for m in ms:
                        _, rowset, x0, x1 = plan.rows[m.id]
                        if oy in rowset and max(xa, x0) < min(xb, x1):
                            sent.setdefault((core, m.core), []).append((n.id, m.id, oy))
            if unit_of(n) in plan.fed:
                prod = plan.producers[plan.producer_layer[n.layer]]
                w = plan.width[plan.producer_layer[n.layer]]
                rows, _, x0, x1 = plan.rows[n.id]
                for iy in rows:
                    for p in prod:
                        if max(iy * w + x0, p.p0) < min(iy * w + x1, p.p1):
                            got.setdefault((p.core, core), []).append((p.id, n.id, iy))
    return {k for k in set(sent) | set(got) if sent.get(k) != got.get(k)}


@dataclass(frozen=True)
class NocDataflowPass:
    """Attach the NoC plan to the graph (`sg.noc`); lowering and synchronization follow it."""

    name: ClassVar[str] = "noc-dataflow"

    def apply(self, arch: Arch, sg: SpatialGraph) -> SpatialGraph:
        out = replace(sg)
        out.noc = plan_noc(sg, arch.element_bytes)
        return out


# ---------------------------------------------------------------------------------------------
# Message order: one global sequence that every core's program is a projection of


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
    for oy in range(a // ow, (b - 1) // ow + 1):
        lo, hi = max(a, oy * ow), min(b, (oy + 1) * ow)
        edges = sorted({lo, hi, *(oy * ow + x for x in cuts if lo < oy * ow + x < hi)})
        out += [(oy, e0, e1) for e0, e1 in zip(edges, edges[1:])]
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


def step_need(sg: SpatialGraph, n: ComputeNode, s: Step) -> list[tuple[int, int]]:
    """(input row, bit mask of its columns) that step s of a fed line-buffer node reads."""
    ly = sg.layers[n.layer]
    v = ly.inputs[0]
    kh, kw = ly.kernel_shape
    sh, sw = ly.strides
    if n.kind == NodeKind.MVM:
        i0, i1, _, _, _ = lines_geometry(ly, n)
    else:
        i0, i1 = 0, kh
    y = s.oy * sh - ly.pads[0]
    ow = ly.output.width
    xa, xb = s.pa - s.oy * ow, s.pb - s.oy * ow
    a = max(0, xa * sw - ly.pads[1])
    b = min(v.width, (xb - 1) * sw - ly.pads[1] + kw)
    mask = (1 << b) - (1 << a) if b > a else 0
    return [(y + i, mask) for i in range(i0, i1) if 0 <= y + i < v.height]


@dataclass(frozen=True, slots=True)
class Comm:
    """A send (to `peer`) of output row `row` columns [x0, x1), or a recv (from `peer`) of input
    row `row` columns [x0, x1) into the node's ring."""

    send: bool
    peer: int
    row: int
    x0: int
    x1: int


class OrderStuck(Exception):
    """The greedy order found no core able to move: `pairs` are (producer, consumer) cores of
    the messages still waiting."""

    def __init__(self, pairs: set[tuple[int, int]]):
        super().__init__(f"{len(pairs)} core pairs stuck")
        self.pairs = pairs


INF = float("inf")


def order_messages(arch: Arch, sg: SpatialGraph) -> dict[tuple[int, int], list[Comm]]:
    """Place every NoC message of `sg` (after synchronization) between the steps of its sender and
    receiver: returns the messages of each (node id, slot k), slot k lying after the node's step
    k - 1 (slot 0 after its prologue), in the order the node's core issues them.

    An execution on estimated times (spatial/cost.py lane costs, NoC flit latency) builds one
    global sequence of events: a core whose next step has its rows received, its waits satisfied
    and its previous step's rows sent runs that step (the row groups of one reduction tree run
    each step together, as one event); a row a producer holds is exchanged once its consumer's
    core is between two steps of that node and the ring slot the row goes to is free; of all
    enabled events the earliest runs first. Every core's program lists its events in the order of
    that sequence, so the sequence is a global order all programs respect, and the programs
    cannot deadlock (module docstring); following estimated times keeps a core's recvs in the
    order its producers deliver. Raises OrderStuck when the execution stops early."""
    from raptor.arch.timing import flits, link_latency_ns
    from raptor.spatial.cost import lane_ns

    plan: NocPlan = sg.noc
    by_core = sg.nodes_by_core()
    cores = sorted(by_core)
    steps = {n.id: node_steps(sg, n) for ns in by_core.values() for n in ns}
    lane = {n.id: lane_ns(arch, sg.layers[n.layer], n) for n in sg.nodes}
    eb = arch.element_bytes
    # ring slots: rows a fed node loads, the previous row in the same slot, last step using it
    need: dict[int, list[list[tuple[int, int]]]] = {}
    prev_in_slot: dict[tuple[int, int], int] = {}
    last_use: dict[tuple[int, int], int] = {}
    have: dict[tuple[int, int], int] = {}  # (node, row) -> bit mask of received columns
    for n in sg.nodes:
        if not plan.is_fed(n):
            continue
        kh = plan.ring_rows[n.id]
        need[n.id] = [step_need(sg, n, s) for s in steps[n.id]]
        seen: dict[int, int] = {}  # slot -> last row loaded there
        for j, rows in enumerate(need[n.id]):
            for r, _ in rows:
                last_use[n.id, r] = j
                if (n.id, r) not in have:
                    prev_in_slot[n.id, r] = seen.get(r % kh, -1)
                    seen[r % kh] = r
                    have[n.id, r] = 0
    trees: dict[Unit, list[ComputeNode]] = {}
    for n in sg.nodes:
        if n.kind == NodeKind.MVM and sg.layers[n.layer].row_groups > 1:
            trees.setdefault(unit_of(n), []).append(n)
    gang = {m.id: ms for ms in trees.values() for m in ms}

    comm: dict[tuple[int, int], list[Comm]] = {}
    ev: dict[int, dict[int, int]] = {c: {} for c in cores}
    ni = dict.fromkeys(cores, 0)  # index of the current node
    k = dict.fromkeys(cores, 0)  # steps of the current node done
    t = dict.fromkeys(cores, 0.0)  # when the core is free
    ver = dict.fromkeys(cores, 0)
    done = dict.fromkeys(cores, False)
    pending: dict[int, dict[int, tuple]] = {c: {} for c in cores}  # message id -> message
    inbound: dict[int, set[int]] = {c: set() for c in cores}  # producer cores holding rows for c
    heap: list[tuple] = []
    seq = 0
    now = 0.0

    def current(c: int) -> ComputeNode | None:
        ns = by_core[c]
        return ns[ni[c]] if ni[c] < len(ns) else None

    def waits_ok(c: int, toks) -> bool:
        want: dict[int, int] = {}
        for tk in toks:
            if tk.kind == "wait":
                want[tk.event] = want.get(tk.event, 0) + tk.value
        return all(ev[c].get(e, 0) >= v for e, v in want.items())

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

    def ready(c: int) -> bool:
        """Core c can run its next event: a step (its output row slot free: the row computed
        out_rows steps earlier is sent), entering its next node, or ending its round."""
        if done[c]:
            return False
        n = current(c)
        if n is None:
            return not pending[c] and waits_ok(c, sg.tokens_end.get(c, []))
        j = k[c]
        if j == len(steps[n.id]):
            return not pending[c]
        if pending[c]:
            keep = plan.out_rows[n.id]
            oy = steps[n.id][j].oy
            if any(msg[2] <= oy - keep for msg in pending[c].values()):
                return False
        if not waits_ok(c, before(n, j)):
            return False
        return n.id not in need or all(have[n.id, r] & m == m for r, m in need[n.id][j])

    def slot_free(m: ComputeNode, r: int) -> bool:
        d = m.core
        if current(d) is not m:
            return False
        p = prev_in_slot[m.id, r]
        return p < 0 or last_use[m.id, p] < k[d]

    def push(when: float, what: str, cs: tuple[int, ...], arg=None) -> None:
        nonlocal seq
        seq += 1
        # at equal times exchanges go first: they are short and free both cores
        heapq.heappush(heap, (when, what == "step", seq, what, cs, tuple(ver[x] for x in cs), arg))

    def offer(c: int) -> None:
        """Push the events core c can take part in now. A step waits while one of the core's
        messages can be exchanged before half the step would be done: the peer would otherwise
        wait for the whole step (rendezvous)."""
        soon = INF
        for mid, (_, m, r, _, _, _) in pending[c].items():
            if slot_free(m, r):
                when = max(t[c], t[m.core], now)
                soon = min(soon, when)
                push(when, "xchg", (c, m.core), mid)
        for p in inbound[c]:
            for mid, (_, m, r, _, _, _) in pending[p].items():
                if m.core == c and slot_free(m, r):
                    when = max(t[p], t[c], now)
                    soon = min(soon, when)
                    push(when, "xchg", (p, c), mid)
        if not ready(c):
            return
        n = current(c)
        members = gang.get(n.id) if n is not None and k[c] < len(steps[n.id]) else None
        if members is None:
            cs = (c,)
        elif all(current(m.core) is m and k[m.core] == k[c] and ready(m.core) for m in members):
            cs = tuple(m.core for m in members)
        else:
            return
        start = max(now, *(t[x] for x in cs))
        if n is not None and k[c] < len(steps[n.id]):
            s = steps[n.id][k[c]]
            if soon < start + (s.pb - s.pa) * lane[n.id] / 2:
                return
        push(start, "step", cs)

    def touch(c: int) -> None:
        ver[c] += 1

    def run(c: int, when: float, woke: set[int]) -> None:
        n = current(c)
        if n is None:
            for tk in sg.tokens_end.get(c, []):
                if tk.kind == "wait":
                    ev[c][tk.event] -= tk.value
            done[c] = True
            return
        j = k[c]
        if j == len(steps[n.id]):
            ni[c] += 1
            k[c] = 0
            woke.update(inbound[c])
            return
        for tk in before(n, j):
            if tk.kind == "wait":
                ev[c][tk.event] -= tk.value
        s = steps[n.id][j]
        t[c] = when + (s.pb - s.pa) * lane[n.id]
        span = plan.timeline.setdefault(n.layer, [when, 0.0])
        span[0], span[1] = min(span[0], when), max(span[1], t[c])
        for tk in after(n, j):
            if tk.kind == "sync":
                reg = ev[tk.value]
                reg[tk.event] = reg.get(tk.event, 0) + 1
                woke.add(tk.value)
        k[c] = j + 1
        if plan.targets.get(n.id):
            w = plan.width[n.layer]
            for m in plan.targets[n.id]:
                _, rowset, x0, x1 = plan.rows[m.id]
                a, b = max(s.pa - s.oy * w, x0), min(s.pb - s.oy * w, x1)
                if s.oy in rowset and a < b:
                    nonlocal_mid[0] += 1
                    pending[c][nonlocal_mid[0]] = (n, m, s.oy, a, b, j)
                    inbound[m.core].add(c)
                    woke.add(m.core)

    nonlocal_mid = [0]
    for c in cores:
        for tk in sg.tokens_start.get(c, []):
            if tk.kind == "sync":
                reg = ev[tk.value]
                reg[tk.event] = reg.get(tk.event, 0) + 1
    for c in cores:
        offer(c)
    while heap:
        when, _, _, what, cs, vs, mid = heapq.heappop(heap)
        if any(ver[x] != v for x, v in zip(cs, vs)):
            continue
        now = max(now, when)
        woke: set[int] = set(cs)
        if what == "step":
            for c in cs:
                run(c, when, woke)
                touch(c)
        else:
            p, d = cs
            if mid not in pending[p]:
                continue
            n, m, r, x0, x1, _ = pending[p].pop(mid)
            comm.setdefault((n.id, k[p]), []).append(Comm(True, d, r, x0, x1))
            comm.setdefault((m.id, k[d]), []).append(Comm(False, p, r, x0, x1))
            have[m.id, r] |= (1 << x1) - (1 << x0)
            size = (x1 - x0) * sg.layers[n.layer].cols * eb
            t[p] = t[d] = when + flits(arch, size) * link_latency_ns(arch, p, d)
            if not any(msg[1].core == d for msg in pending[p].values()):
                inbound[d].discard(p)
            touch(p)
            touch(d)
        for x in woke:
            if x in cs:
                continue
            touch(x)
        extra = set()
        for x in woke:
            extra.update(inbound[x])
            n = current(x)
            if n is not None and n.id in gang:
                extra.update(m.core for m in gang[n.id])
        for x in woke | extra:
            offer(x)
    if not all(done.values()):
        pairs = {(c, msg[1].core) for c in cores for msg in pending[c].values()}
        if not pairs:  # blocked on rows not yet produced: every fed edge into a stuck core
            stuck = {c for c in cores if not done[c]}
            pairs = {
                (p, n.core)
                for n in sg.nodes
                if n.core in stuck and plan.is_fed(n)
                for p in plan.fed_by(n)
            }
        raise OrderStuck(pairs)
    plan.estimated_ns = max(t.values(), default=0.0)
    return comm
