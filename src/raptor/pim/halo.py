"""Halo rows shared over the NoC by the replicas of a layer that reads host memory.

A replicated weight layer whose window input is a host buffer (the network's first conv) loads,
on each replica, every input row its output rows' windows touch. Neighbouring replicas need the
same halo rows, so the single global-memory queue serves the image several times over (resnet18
and googlenet conv1: 82 replicas, 7.7 input rows for 1.37 output rows each, 2.8x the image).
Here each replica loads from host memory only the rows it owns, from its first row up to the
next replica's first row, and receives the rest of its window rows from the replicas owning
them, before its first output row.

Order. Replicas are numbered by their first row. In its prologue replica r loads its own rows
that earlier replicas need, then takes part in the exchanges, each a rendezvous between a sender
s and a receiver s - d (d >= 1). They run in rounds: round 2(d - 1) + (0 if floor(s / d) is odd
else 1) holds the pairs at distance d of that parity, a matching (s and s - d differ in the
parity of floor(. / d), so no replica is in two pairs of one round). Every replica lists its
exchanges in round order, so the rounds are one global order every program follows and the
exchanges cannot deadlock; with 2 x (largest distance) rounds they take a few message times,
not one per replica. They come first in each replica's program: the layer's nodes must be the
first nodes of their cores, and no core has another message before them.

A node takes part only when the whole layer is plain: one row group, every column, fed by
nothing over the NoC, a line buffer, every node reading a run of whole rows, at least two nodes,
and on each core the layer's nodes before any other; otherwise the layer loads as before. A
replica dealt its pixels in chunks (planning.choose_chunks: the first part of the image to every
replica, then the next part) has one node per chunk, all on its core; the nodes of the layer
are then numbered by first row as replicas are above, and each core's first node of the layer
runs the core's whole part before its first output row: the rows its nodes own that others
need, loaded from host memory, then its exchanges in the order of (round, sender) over all
nodes, one global order (a core can take part in several pairs of a round, one per node). Its
later nodes keep every input row they read in an area of their own below the core's persistent
NoC buffers (`halo_areas`), which the first node zeroes and fills; what they read besides, they
load there themselves when they run. A pipelined program keeps one of the layer's nodes per core
(`shared` off: a core whose replicas of the first conv share it deadlocked vgg8 arch-b's
pipeline 4) and repeats the exchange at the start of every round, before the layer's first
output row of that round. Exchanged rows are whole rows (a node inside one output row reads
fewer columns; the line buffer's rows are full width either way).

Measured (latency, 224x224): conv1 loads the image once (resnet18 arch-a host loads 1.25 ->
0.49 MB per inference), conv1 ends at 1.62 ms instead of 2.20, and the latency falls 12.47 ->
11.89 ms (resnet18 arch-b 13.71 -> 13.14, googlenet arch-a 12.62 -> 12.01, arch-b 13.91 ->
13.14). A first version whose replicas sent one after another (replica r sending only after
r - 1 had sent) took 0.9 ms for the exchange and gained 0.7 %.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from raptor.pim.memalloc import aligned
from raptor.spatial.geometry import lines_geometry, lines_rows, reads_host_rows
from raptor.spatial.ir import ComputeNode, NodeKind, SpatialGraph


@dataclass(frozen=True)
class HaloNode:
    """One node's part in its layer's exchange. `rows`: the input rows its windows read (first,
    end row); `received`: those it receives (first, end); `present`: the rows in its buffers once
    its core's exchanges ran. The first of the layer's nodes on a core (`lead`) runs the core's
    whole part before its first output row: it loads `preload` ((node id, row) pairs) from host
    memory, then takes part in `exchanges` ((send?, peer core, node id, first row, end row)) in
    the global order; `members` are the core's other nodes of the layer, whose rows it loads and
    receives into their areas (`halo_areas`) and zeroes first."""

    rows: tuple[int, int]
    received: tuple[int, int]
    present: frozenset[int]
    lead: bool
    preload: tuple[tuple[int, int], ...] = ()
    exchanges: tuple[tuple[bool, int, int, int, int], ...] = ()
    members: tuple[int, ...] = ()


def halo_plan(
    sg: SpatialGraph, lines: Callable[[ComputeNode], bool], shared: bool = True
) -> dict[int, HaloNode]:
    """node id -> its part in a halo exchange, for every eligible layer (module docstring);
    `lines(node)`: the node is lowered over a line buffer; `shared`: a core may hold several of
    the layer's nodes (not in a pipelined program)."""
    by_core = sg.nodes_by_core()
    by_layer: dict[int, list[ComputeNode]] = {}
    for n in sg.nodes:
        if n.kind == NodeKind.MVM:
            by_layer.setdefault(n.layer, []).append(n)
    out: dict[int, HaloNode] = {}
    for layer in sg.layers:
        if not reads_host_rows(sg, layer):
            continue
        nodes = by_layer.get(layer.index, [])
        if len(nodes) < 2 or not _plain(sg, layer, nodes, by_core, shared):
            continue
        if not all(lines(n) for n in nodes):
            continue
        rows = {}
        for n in nodes:
            i0, i1, *_ = lines_geometry(layer, n)
            rs = lines_rows(layer, n, i0, i1)
            rows[n.id] = (min(rs), max(rs) + 1) if rs else (0, 0)
        if any(len(range(*r)) == 0 for r in rows.values()) or any(
            len(lines_rows(layer, n, *lines_geometry(layer, n)[:2])) != len(range(*rows[n.id]))
            for n in nodes
        ):
            continue  # every node reads a run of whole rows (no stride above the kernel)
        order = sorted(nodes, key=lambda n: (rows[n.id][0], n.p0))
        lo = [rows[n.id][0] for n in order]
        hi = [rows[n.id][1] for n in order]
        if any(b < a for a, b in zip(lo, lo[1:])) or any(b < a for a, b in zip(hi, hi[1:])):
            continue  # nodes' rows must move down the image in order
        own = [(lo[k], lo[k + 1] if k + 1 < len(order) else hi[k]) for k in range(len(order))]
        # (round, sender), send?, peer core, node, first row, end row: per core
        events: dict[int, list[tuple[tuple[int, int], bool, int, int, int, int]]] = {}
        got: dict[int, list[tuple[int, int]]] = {}
        for k in range(len(order)):  # sender k, receiver p: rows k owns that p reads
            for p in range(k - 1, -1, -1):
                a, b = max(own[k][0], own[p][1]), min(own[k][1], hi[p])
                if a < b:
                    d = k - p
                    key = (2 * (d - 1) + (0 if (k // d) % 2 else 1), k)
                    s, r = order[k], order[p]
                    events.setdefault(s.core, []).append((key, True, r.core, s.id, a, b))
                    events.setdefault(r.core, []).append((key, False, s.core, r.id, a, b))
                    got.setdefault(r.id, []).append((a, b))
        for core, ev in events.items():
            ev.sort()
            mine = [n for n in by_core[core] if n.layer == layer.index]
            pre = {(nid, iy) for _, send, _, nid, a, b in ev if send for iy in range(a, b)}
            pos = {n.id: i for i, n in enumerate(mine)}
            preload = tuple(sorted(pre, key=lambda x: (pos[x[0]], x[1])))
            for n in mine:
                rcv = got.get(n.id, [])
                received = (min(a for a, _ in rcv), max(b for _, b in rcv)) if rcv else (0, 0)
                present = {iy for nid, iy in pre if nid == n.id} | set(range(*received))
                lead = n is mine[0]
                out[n.id] = HaloNode(
                    rows[n.id],
                    received,
                    frozenset(present),
                    lead,
                    preload if lead else (),
                    tuple((send, c, nid, a, b) for _, send, c, nid, a, b in ev) if lead else (),
                    tuple(m.id for m in mine[1:]) if lead else (),
                )
    return out


def halo_areas(
    sg: SpatialGraph, plan: dict[int, HaloNode], top: Callable[[int], int], eb: int
) -> tuple[dict[int, int], dict[int, int]]:
    """(node id -> local address of its rows, core -> bytes) of the areas that keep the input
    rows of every node of an exchange but the first on its core (HaloNode.members), stacked
    down from `top(core)` (below the core's persistent NoC buffers)."""
    area: dict[int, int] = {}
    used: dict[int, int] = {}
    for n in sg.nodes:
        h = plan.get(n.id)
        if h is None or h.lead:
            continue
        ly = sg.layers[n.layer]
        size = aligned((h.rows[1] - h.rows[0]) * row_bytes(ly, n, eb))
        used[n.core] = used.get(n.core, 0) + size
        area[n.id] = top(n.core) - used[n.core]
    return area, used


def row_bytes(layer, node: ComputeNode, eb: int) -> int:
    """Bytes of one padded input row of a line-buffer node (its ring, halo and area rows)."""
    return lines_geometry(layer, node)[4] * layer.inputs[0].channels * eb


def _plain(sg: SpatialGraph, layer, nodes: list[ComputeNode], by_core: dict, shared: bool) -> bool:
    """The layer's nodes are whole replicas (one row group, every column) that nothing feeds
    over the NoC, and on each core they come before any other node (one of them per core unless
    `shared`)."""
    noc = sg.noc
    for n in nodes:
        if n.row_group or (n.c0, n.c1) != (0, layer.cols):
            return False
        if noc is not None and (noc.is_fed(n) or n.id in noc.res_fed):
            return False
    for core in {n.core for n in nodes}:
        ns = by_core[core]
        k = sum(1 for m in ns if m.layer == layer.index)
        if (k > 1 and not shared) or any(m.layer != layer.index for m in ns[:k]):
            return False
    return True
