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

A node takes part only when the whole layer is plain: one row group, one column slice, no pixel
chunks, whole input rows, a line buffer, every node first on its core, and at least two
replicas; otherwise the layer loads as before. A pipelined program repeats the exchange at
the start of every round, before the layer's first output row of that round.

Measured (latency, 224x224): conv1 loads the image once (resnet18 arch-a host loads 1.25 ->
0.49 MB per inference), conv1 ends at 1.62 ms instead of 2.20, and the latency falls 12.47 ->
11.89 ms (resnet18 arch-b 13.71 -> 13.14, googlenet arch-a 12.62 -> 12.01, arch-b 13.91 ->
13.14). A first version whose replicas sent one after another (replica r sending only after
r - 1 had sent) took 0.9 ms for the exchange and gained 0.7 %.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from raptor.spatial.geometry import lines_geometry, lines_rows
from raptor.spatial.ir import BufferRole, ComputeNode, LayerKind, NodeKind, SpatialGraph


@dataclass(frozen=True)
class HaloNode:
    """One replica's part: rows it loads before its exchanges (`preload`), its exchanges in
    program order (send?, peer core, first row, end row), and the rows it receives
    (`received`, first and end row, in its halo buffer in that order)."""

    preload: tuple[int, ...]
    exchanges: tuple[tuple[bool, int, int, int], ...]
    received: tuple[int, int]


def halo_plan(sg: SpatialGraph, lines: Callable[[ComputeNode], bool]) -> dict[int, HaloNode]:
    """node id -> its part in a halo exchange, for every eligible layer (module docstring);
    `lines(node)`: the node is lowered over a line buffer."""
    by_core = sg.nodes_by_core()
    first_on_core = {ns[0].id for ns in by_core.values() if ns}
    by_layer: dict[int, list[ComputeNode]] = {}
    for n in sg.nodes:
        if n.kind == NodeKind.MVM:
            by_layer.setdefault(n.layer, []).append(n)
    out: dict[int, HaloNode] = {}
    for layer in sg.layers:
        if layer.kind != LayerKind.GEMM or layer.row_groups != 1:
            continue
        v = layer.inputs[0]
        if v.chw is not None or sg.buffers[v.buffer].role == BufferRole.ACT:
            continue
        nodes = by_layer.get(layer.index, [])
        if len(nodes) < 2 or not _plain(sg, layer, nodes, first_on_core):
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
            continue  # every replica reads a run of whole rows (no stride above the kernel)
        order = sorted(nodes, key=lambda n: (rows[n.id][0], n.p0))
        lo = [rows[n.id][0] for n in order]
        hi = [rows[n.id][1] for n in order]
        if any(b < a for a, b in zip(lo, lo[1:])) or any(b < a for a, b in zip(hi, hi[1:])):
            continue  # replicas' rows must move down the image in order
        own = [(lo[k], lo[k + 1] if k + 1 < len(order) else hi[k]) for k in range(len(order))]
        events: dict[int, list[tuple[int, bool, int, int, int]]] = {
            k: [] for k in range(len(order))
        }
        for k in range(len(order)):  # sender k, receiver p: rows k owns that p reads
            for p in range(k - 1, -1, -1):
                a, b = max(own[k][0], own[p][1]), min(own[k][1], hi[p])
                if a < b:
                    d = k - p
                    rnd = 2 * (d - 1) + (0 if (k // d) % 2 else 1)
                    events[k].append((rnd, True, order[p].core, a, b))
                    events[p].append((rnd, False, order[k].core, a, b))
        for k, n in enumerate(order):
            ev = sorted(events[k])
            if not ev:
                continue
            preload = sorted({iy for _, send, _, a, b in ev if send for iy in range(a, b)})
            got = [(a, b) for _, send, _, a, b in ev if not send]
            received = (min(a for a, _ in got), max(b for _, b in got)) if got else (0, 0)
            out[n.id] = HaloNode(
                tuple(preload), tuple((send, c, a, b) for _, send, c, a, b in ev), received
            )
    return out


def _plain(sg: SpatialGraph, layer, nodes: list[ComputeNode], first: set[int]) -> bool:
    noc = sg.noc
    for n in nodes:
        if n.id not in first or n.chunk or n.row_group or (n.c0, n.c1) != (0, layer.cols):
            return False
        if noc is not None and (noc.is_fed(n) or n.id in noc.res_fed):
            return False
        _, _, x0, x1, _ = lines_geometry(layer, n)
        if (x0, x1) != (0, layer.inputs[0].width):
            return False
    return True
