"""Merging compute nodes into cores under each core's crossbar budget.

`pack_balanced`: nodes by decreasing crossbars, then decreasing estimated time, each to the
least-loaded core that still has the crossbars it needs. Given layer time windows (when each
layer computes in an estimated execution of the program), "least loaded" counts only the load
that overlaps the node's window: nodes of layers that run at the same time (the branches of an
inception block, a pool and its sibling convolution) then go to different cores, while layers far
apart in time share cores freely; with `order_delay`, "least loaded" is instead how long the
node and the nodes already on a core would hold each other back, a core running its nodes in
layer order (raptor.compiler._delay_repack). `pack_plain` is the unplanned baseline:
nodes in program order, first fit by crossbars (vector nodes stay on the current core). Both keep
at most one node of a layer's row-group chains per core (ir.SpatialGraph.verify says why).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from raptor.arch import Arch
from raptor.errors import PassFailedError
from raptor.spatial.ir import ComputeNode, NodeKind, SpatialGraph
from raptor.spatial.tiling import flat_producer


def _no_room(arch: Arch, node: ComputeNode, used: np.ndarray) -> PassFailedError:
    return PassFailedError(
        f"node {node.id} (layer {node.layer}) needs {node.crossbars} crossbars; no core of {arch.name} has "
        f"room left ({int(used.sum())} of {arch.total_crossbars} crossbars in use)"
    )


def _chain_layers(nodes: list[ComputeNode]) -> set[int]:
    return {n.layer for n in nodes if n.row_group > 0}


def pack_balanced(
    arch: Arch,
    nodes: list[ComputeNode],
    times: np.ndarray,
    span: int | None = None,
    windows: dict[int, tuple[float, float]] | None = None,
    fixed: dict[int, int] | None = None,
    order_delay: bool = False,
) -> tuple[list[ComputeNode], np.ndarray]:
    """Balanced packing; returns the placed nodes (input order) and the estimated load per core (ns).

    `span` (pipelined throughput): a core only takes nodes whose layers lie within `span` layers
    of each other while some core with room allows it. A core restarts the next input only after
    its last node of this one, so a core holding conv1 and fc would tie the pipeline period to
    the whole latency.

    The later pixel chunks of a replica (`ComputeNode.chunk` > 0) share chunk 0's array groups:
    they go where chunk 0 goes, and chunk 0 is placed with the time of all of them.

    `windows` (layer -> (start, end) ns): a node goes to the core whose load within the node's
    layer window is least, each placed node counting as its time spread evenly over its own
    layer's window (ties: the least total load). A layer without a window counts as overlapping
    every other. `order_delay`: by `_WindowLoad.delay` instead of the load within the window.

    `fixed` (node index -> core; chunk 0 and vector nodes): placed first, on their cores as given (a
    planning experiment's own placement, benchmarks/stripes.py), and the others around them."""
    cores, cap = arch.core_count, arch.crossbars_per_core
    owner: dict[tuple[int, int, int, int], int] = {}
    for k, n in enumerate(nodes):
        if n.kind == NodeKind.MVM and n.chunk == 0:
            owner[(n.layer, n.replica, n.c0, n.row_group)] = k
    followers: dict[int, list[int]] = {}
    times = times.copy()
    for k, n in enumerate(nodes):
        if n.kind == NodeKind.MVM and n.chunk > 0:
            o = owner[(n.layer, n.replica, n.c0, n.row_group)]
            followers.setdefault(o, []).append(k)
            times[o] += times[k]
    load = np.zeros(cores)
    used = np.zeros(cores, dtype=np.int64)
    placed: list[ComputeNode | None] = [None] * len(nodes)
    chain = _chain_layers(nodes)
    holds: dict[int, np.ndarray] = {i: np.zeros(cores, bool) for i in chain}
    # big crossbar users first (bin-packing feasibility), then by time (load balance)
    order = [
        k
        for k in np.lexsort((-times, -np.array([n.crossbars for n in nodes])))
        if nodes[k].kind != NodeKind.MVM or nodes[k].chunk == 0
    ]
    lo = np.full(cores, np.inf)
    hi = np.full(cores, -np.inf)
    overlap = _WindowLoad(windows or {}, cores)
    fixed = fixed or {}
    for k in [*fixed, *(k for k in order if k not in fixed)]:
        n = nodes[k]
        ok = used + n.crossbars <= cap
        if n.layer in holds:
            ok &= ~holds[n.layer]
        if k in fixed:
            c = fixed[k]
            if not ok[c]:
                raise _no_room(arch, n, used)
        else:
            if not ok.any():
                raise _no_room(arch, n, used)
            if span is not None:
                near = ~np.isfinite(lo) | (
                    (np.maximum(hi, n.layer) - np.minimum(lo, n.layer)) <= span
                )
                if (ok & near).any():
                    ok &= near
            if windows is None:
                c = int(np.argmin(np.where(ok, load, np.inf)))
            else:
                busy = overlap.delay(n.layer) if order_delay else overlap.load(n.layer)
                c = int(np.lexsort((np.where(ok, load, np.inf), np.where(ok, busy, np.inf)))[0])
        if windows is not None:
            overlap.add(c, n.layer, times[k])
        lo[c] = min(lo[c], n.layer)
        hi[c] = max(hi[c], n.layer)
        if n.layer in holds:
            holds[n.layer][c] = True
        load[c] += times[k]
        used[c] += n.crossbars
        placed[k] = replace(n, core=c)
        for f in followers.get(k, ()):
            placed[f] = replace(nodes[f], core=c)
    return placed, load  # type: ignore[return-value]


def flat_groups_at_producers(sg: SpatialGraph, nodes: list[ComputeNode]) -> list[ComputeNode]:
    """`nodes` with the row groups of every classifier that reads a flattened map of several
    pixels (tiling.flat_producer, the classifiers tiling.last_rows_at_root flips: vgg8's fc0) moved among their own cores so that a core
    also holding a node of the map's producer holds a group whose rows are that node's pixels,
    the group nearest the tree's root first, for the producer nodes of the last pixels first.

    A core runs its nodes one after another, so a group sharing a core with the producer node of
    the map's last pixels starts only when that node has ended. Placed there by the packing, a
    leaf group reading an earlier pixel sent its sum up the whole tree after the last pixel (vgg8
    arch-b fc0: group 15 of 64, pixel 12, four levels above it); holding the last pixel's group
    instead, the core computes the sum it would wait for anyway. The groups swapped hold the same
    crossbars, and each core still holds one group of the tree."""
    out = list(nodes)
    for layer in sg.layers:
        prod = flat_producer(sg, layer)
        if prod is None:
            continue
        ch = prod.output.channels  # rows of one producer pixel (rows in (h, w, c) order)
        spans: dict[int, list[tuple[int, int]]] = {}
        for n in out:
            if n.layer == prod.index:
                spans.setdefault(n.core, []).append((n.p0 * ch, n.p1 * ch))
        trees: dict[tuple[int, int, int], list[int]] = {}
        for k, n in enumerate(out):
            if n.layer == layer.index and n.kind == NodeKind.MVM:
                trees.setdefault((n.replica, n.c0, n.chunk), []).append(k)
        for ks in trees.values():
            ks.sort(key=lambda k: out[k].row_group)
            hosts = sorted(
                {out[k].core for k in ks} & spans.keys(), key=lambda c: -max(spans[c])[1]
            )
            taken: set[int] = set()
            for core in hosts:
                here = next(k for k in ks if out[k].core == core)
                want = next(
                    (
                        k
                        for k in ks
                        if k not in taken
                        and out[k].crossbars == out[here].crossbars
                        and any(a < out[k].r1 and out[k].r0 < b for a, b in spans[core])
                    ),
                    here,
                )
                if want != here:
                    out[here], out[want] = (
                        replace(out[here], core=out[want].core),
                        replace(out[want], core=core),
                    )
                taken.add(want)
    return out


class _WindowLoad:
    """Per core, the time of its placed nodes spread over their layers' windows: `load(layer)`
    is each core's time falling inside `layer`'s window."""

    def __init__(self, windows: dict[int, tuple[float, float]], cores: int):
        self.windows = windows
        self.per_layer: dict[int, np.ndarray] = {}  # layer -> time placed per core
        self.cores = cores

    def load(self, layer: int) -> np.ndarray:
        out = np.zeros(self.cores)
        w = self.windows.get(layer)
        for other, t in self.per_layer.items():
            v = self.windows.get(other)
            share = 1.0
            if w is not None and v is not None:
                cut = min(w[1], v[1]) - max(w[0], v[0])
                span = v[1] - v[0]
                share = max(0.0, cut) / span if span > 0 else float(cut >= 0)
            if share:
                out += share * t
        return out

    def delay(self, layer: int) -> np.ndarray:
        """Per core, how long its placed nodes hold back a node of `layer` or are held back by
        it, a core running its nodes in layer order: an earlier layer's node whose window ends
        after `layer`'s starts delays it by the difference, a later layer's node starting before
        `layer`'s window ends waits that long, a node of `layer` itself runs before or after it
        (its time). A layer without a window holds back nothing."""
        out = np.zeros(self.cores)
        w = self.windows.get(layer)
        for other, t in self.per_layer.items():
            if other == layer:
                out += t
                continue
            v = self.windows.get(other)
            if w is None or v is None:
                continue
            d = v[1] - w[0] if other < layer else w[1] - v[0]
            if d > 0:
                out += np.where(t > 0, d, 0.0)
        return out

    def add(self, core: int, layer: int, t: float) -> None:
        self.per_layer.setdefault(layer, np.zeros(self.cores))[core] += t


def pack_plain(arch: Arch, nodes: list[ComputeNode]) -> list[ComputeNode]:
    """First fit in node order: move to the next core when the crossbars run out."""
    cap = arch.crossbars_per_core
    chain = _chain_layers(nodes)
    core, used = 0, 0
    held: set[int] = set()  # chain layers with a node on the current core
    out = []
    for n in nodes:
        if used + n.crossbars > cap or (n.layer in chain and n.layer in held):
            core, used = core + 1, 0
            held = set()
        if n.layer in chain:
            held.add(n.layer)
        if core >= arch.core_count:
            raise _no_room(arch, n, np.full(arch.core_count, cap))
        used += n.crossbars
        out.append(replace(n, core=core))
    return out
