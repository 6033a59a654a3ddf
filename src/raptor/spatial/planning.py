"""Spatial planning: replication per layer, merging nodes into cores, placement on the mesh.

Replication water-fills the bottleneck: the GEMM layer whose node time (pixels / replicas x lane
cost) is largest gets one more replica, while the chip's crossbars allow and while that time is
above the ideal per-core load (total work / cores), beyond which replicas cannot help. Vector
layers and row-group reductions are split into pixel ranges of about the same time. Nodes are
packed into cores crossbars-first, least-loaded core (merging.py), then cores are renumbered so that consecutive layers sit on
neighbouring cores along a snake order of the mesh (cuts hop-bytes). Assumes tiling has run.
With `chunks`, the pixels of a layer fed over the NoC are dealt to its replicas round-robin in
chunks (`choose_chunks`, tiling.make_nodes), so the replicas move down the image together and a
consumer gets its first rows early: with one contiguous range per replica, a consumer replica
waits for the end of the producer replica above it, and latency adds up layer after layer.
With `windows` (layer -> start/end of an estimated execution), nodes are packed by the load
within their layers' windows, so layers that compute at the same time get different cores; the
compiler repacks each plan that way and keeps the one whose message order ends first
(raptor.compiler._plan, _repack). Disabled, `PlainAssignmentPass` (`plain_assignment`) gives every layer one replica and first-fit cores in program order.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from raptor.arch import Arch
from raptor.arch.timing import memory_latency_ns
from raptor.errors import PassFailedError
from raptor.options import VECTOR_SPLIT
from raptor.spatial.cost import lane_bus_ns, lane_table, node_ns, plan_lane_ns
from raptor.spatial.geometry import reads_host_rows
from raptor.spatial.ir import ComputeNode, LayerKind, NodeKind, SpatialGraph
from raptor.spatial.merging import flat_groups_at_producers, pack_balanced, pack_plain
from raptor.spatial.noc import noc_edges
from raptor.spatial.tiling import gemm_slices, make_nodes


def _effective_crossbars(arch: Arch, xb: int) -> float:
    """Crossbars a node really takes from the budget: a node that leaves a core's remainder too
    small for a second copy wastes that remainder."""
    cap = arch.crossbars_per_core
    return cap / (cap // xb) if xb else 0.0


def choose_replication(
    arch: Arch,
    sg: SpatialGraph,
    budget_scale: float = 1.0,
    latency: bool = False,
    noc: bool = False,
    fill_scale: float | None = None,
    vector_split: int = VECTOR_SPLIT,
) -> tuple[dict[int, int], dict[int, int]]:
    """(replicas per GEMM layer, splits per vector layer / reduce step) by water-filling. With
    `noc` (the NoC dataflow follows), a layer fed core to core puts no load on global memory and
    any other reads its input rows once through line buffers. With `fill_scale`, the crossbars
    between `budget_scale` and `fill_scale` of the chip's then buy replicas of the slowest layer,
    one at a time, until it no longer fits (`SpatialPlanningPass.fill_slowest`). In latency mode
    a vector layer is split until its nodes take at most 1 / `vector_split` of the slowest GEMM
    node's time (raptor.options.VECTOR_SPLIT)."""
    fed = noc_edges(sg) if noc else {}
    gemm = {}
    total_work = bus_total = 0.0
    for ly in sg.layers:
        if ly.kind != LayerKind.GEMM:
            continue
        _, slices = gemm_slices(arch, ly.rows, ly.cols, ly.row_groups, ly.pack)
        s = slices[0]
        probe = ComputeNode(0, ly.index, NodeKind.MVM, 0, 1, s.c0, s.c1, s.r0, s.r1, s.row_group)
        t = plan_lane_ns(arch, ly, probe)
        xb = sum(_effective_crossbars(arch, sl.crossbars) for sl in slices)
        if not noc:
            bus = lane_bus_ns(arch, ly, probe) * ly.out_pixels * len(slices)
        elif ly.index in fed:
            bus = 0.0
        else:
            v = ly.inputs[0]
            row = memory_latency_ns(
                arch.global_memory, v.width * v.channels * arch.element_bytes, False
            )
            bus = v.height * row
        gemm[ly.index] = (t, ly.out_pixels, xb, bus)
        bus_total += bus
        total_work += t * ly.out_pixels * len(slices)
    vec_work = {}
    for n in sg.nodes:
        if n.kind != NodeKind.MVM:
            vec_work[n.layer] = vec_work.get(n.layer, 0.0) + node_ns(arch, sg.layers[n.layer], n)
    total_work += sum(vec_work.values())
    floor_ns = max(total_work / arch.core_count, bus_total)
    budget = arch.total_crossbars * budget_scale - sum(x for _, _, x, _ in gemm.values())
    reps = {i: 1 for i in gemm}

    def layer_ns(i: int, r: int) -> float:
        t, p, _, bus = gemm[i]
        return max(t * math.ceil(p / r), bus)

    if latency:
        # latency: layers run one after another, so buy the largest time cut per crossbar
        heap = [(-(layer_ns(i, 1) - layer_ns(i, 2)) / g[2], i) for i, g in gemm.items()]
    else:
        # throughput: shave the slowest node until it reaches the per-core/bus floor
        heap = [(-layer_ns(i, 1), i) for i in gemm]
    heapq.heapify(heap)
    while heap:
        neg, i = heapq.heappop(heap)
        _, p, xb, _ = gemm[i]
        if -neg <= (0.0 if latency else floor_ns):
            break
        if xb > budget or reps[i] >= p:
            continue
        reps[i] += 1
        budget -= xb
        r = reps[i]
        key = -(layer_ns(i, r) - layer_ns(i, r + 1)) / xb if latency else -layer_ns(i, r)
        heapq.heappush(heap, (key, i))
    if fill_scale is not None and gemm:
        budget += arch.total_crossbars * (fill_scale - budget_scale)
        while True:
            i = max(gemm, key=lambda i: layer_ns(i, reps[i]))
            _, p, xb, _ = gemm[i]
            if xb > budget or reps[i] >= p:
                break
            reps[i] += 1
            budget -= xb
    slowest = max([t * math.ceil(p / reps[i]) for i, (t, p, _, _) in gemm.items()], default=0.0)
    # latency: layers overlap by row bands, so a vector layer is split (options.VECTOR_SPLIT)
    target = slowest / vector_split if latency and slowest > 0 else max(floor_ns, slowest)
    splits = {
        i: max(1, min(sg.layers[i].out_pixels, math.ceil(w / target))) for i, w in vec_work.items()
    }
    return reps, splits


# Pixel chunks per replica (tiling.make_nodes) when the planner interleaves replicas: at most
# CHUNKS_MAX chunks of at least CHUNK_PIXELS pixels. Measured arch-a latency, chunks on vs off:
# vgg8 4.96 -> 3.25 ms, resnet18 24.8 -> 21.5 ms, resnet34 70.3 -> 51.1 ms; 8 chunks of 8 pixels
# gained no more on vgg8 (3.05 ms) and doubled the message-order time; googlenet measured 3 %
# slower, which is why the compiler keeps the plan whose estimated schedule is shorter.
CHUNKS_MAX = 4
CHUNK_PIXELS = 8


def choose_chunks(
    sg: SpatialGraph, reps: dict[int, int], fed: dict, host: int = 1
) -> dict[int, int]:
    """Pixel chunks per replica of every replicated GEMM layer whose window input comes over the
    NoC (`fed`, noc.noc_edges), and `host` chunks per replica of a layer that reads the network
    input from host memory in rows (geometry.reads_host_rows: the first conv). The chunks of such
    a layer share their halo rows over the NoC as whole replicas do (raptor.pim.halo), so the
    image is still loaded once, and its first rows of output come after 1 / `host` of its work:
    resnet18 arch-a's conv1 (64 replicas of 1.75 output rows, 1.2 ms each) finished no row of
    maxpool's input before 1.1 ms and layer1 began at 1.7 ms; in two chunks it began at 1.15 ms."""
    out = {}
    for i, r in reps.items():
        if r >= 2 and i in fed:
            per = sg.layers[i].out_pixels / r
            out[i] = max(1, min(CHUNKS_MAX, math.ceil(per / CHUNK_PIXELS)))
        elif r >= 2 and host > 1 and reads_host_rows(sg, sg.layers[i]):
            out[i] = host
    return out


# Row chunks (`choose_row_chunks`): a chunked layer is cut into whole output rows when each of
# its replicas gets at least ROW_CHUNK_MIN_ROWS of them. Measured with every chunked layer cut
# into rows where it could be (latency, arch-a / arch-b, against pixel chunks): at least 2 rows
# per replica resnet18 -7.4 / -3.3 %, resnet34 -3.0 / -6.9 %, vgg8 +2.6 / +0.0 %, googlenet +2.7
# / -3.7 %; at least 1 row, vgg8 +9.1 / +5.2 %; chunks of 2 rows, geometric mean +9.7 %; the
# last rows of each replica spread over all replicas as pixel ranges, -3.6 to +1.7 %, 0.987.
# As kept, a `rows` candidate beside the pixel chunks (raptor.compiler._search): geometric mean of
# the 8 latency cases 0.969 with 2, 0.972 with 1.5, 0.985 with 3. The rows dealt round-robin
# leave a replica at most one row more than another.
ROW_CHUNK_MIN_ROWS = 2


def choose_row_chunks(
    sg: SpatialGraph, reps: dict[int, int], chunks: dict[int, int]
) -> frozenset[int]:
    """The chunked layers (`choose_chunks`) whose replicas each get at least ROW_CHUNK_MIN_ROWS
    output rows: their chunks are whole rows (tiling.make_nodes)."""
    return frozenset(
        i
        for i, k in chunks.items()
        if k > 1 and sg.layers[i].output.height >= ROW_CHUNK_MIN_ROWS * reps[i]
    )


def hop_matrix(arch: Arch) -> np.ndarray:
    n = arch.core_count
    pos = np.array([arch.core_position(c) for c in range(n)])
    hops = np.abs(pos[:, None, 1] - pos[None, :, 1]) + np.abs(pos[:, None, 2] - pos[None, :, 2])
    if arch.chips > 1:
        chip = np.array([arch.chip_position(int(c)) for c in pos[:, 0]])
        hops = (
            hops
            + np.abs(chip[:, None, 0] - chip[None, :, 0])
            + np.abs(chip[:, None, 1] - chip[None, :, 1])
        )
    return hops


def snake_order(arch: Arch) -> list[int]:
    rows, cols = arch.core_layout
    order = []
    for chip in range(arch.chips):
        for y in range(rows):
            xs = range(cols) if y % 2 == 0 else range(cols - 1, -1, -1)
            order += [
                chip * arch.cores_per_chip + y * cols + x
                for x in xs
                if y * cols + x < arch.cores_per_chip
            ]
    return order


def place_snake(arch: Arch, nodes: list[ComputeNode]) -> list[ComputeNode]:
    """Renumber cores so cores holding earlier layers come first along the snake order."""
    first: dict[int, float] = {}
    for n in nodes:
        first[n.core] = min(first.get(n.core, math.inf), n.layer + n.p0 / 1e9)
    used = sorted(first, key=lambda c: first[c])
    snake = snake_order(arch)
    remap = {c: snake[k] for k, c in enumerate(used)}
    return [replace(n, core=remap[n.core]) for n in nodes]


@dataclass(frozen=True)
class SpatialPlanningPass:
    """Replicate, merge and place compute nodes (see module docstring)."""

    latency: bool = False  # plan for one input's latency rather than pipeline throughput
    span: int | None = None  # layer window per core (merging.pack_balanced), pipelined mode
    noc: bool = False  # the NoC dataflow pass follows (spatial/noc.py)
    span_share: float | None = None  # span = this share of the graph's layers (overrides span)
    chunks: bool = False  # interleave each replica's pixels in chunks (choose_chunks)
    # with chunks: cut the layers that have rows enough into whole output rows (choose_row_chunks)
    row_chunks: bool = False
    # with chunks: chunks per replica of a layer that reads the network input from host memory
    host_chunks: int = 1
    # layer -> (start, end) ns of an estimated execution: pack by load within each layer's window
    # (merging.pack_balanced) instead of total load
    windows: dict[int, tuple[float, float]] | None = field(default=None, compare=False)
    # with windows: pack by how long a core's nodes would hold each other back in layer order
    # (merging.pack_balanced order_delay) instead of by their load within the windows
    order_delay: bool = False
    # share of the chip's crossbars replication may buy (raptor.options.CROSSBAR_SHARES_LATENCY)
    crossbar_share: float = 1.0
    # then spend the rest of the crossbars on replicas of the slowest layer (choose_replication)
    fill_slowest: bool = False
    # with the latency objective: vector layers split to 1 / this of the slowest GEMM node
    vector_split: int = VECTOR_SPLIT
    name: ClassVar[str] = "spatial-planning"

    def apply(self, arch: Arch, sg: SpatialGraph) -> SpatialGraph:
        span = self.span
        if self.span_share is not None:
            span = max(1, int(len(sg.layers) * self.span_share))
        last_err: PassFailedError | None = None
        fed = noc_edges(sg) if self.chunks and self.noc else None
        for scale in (1.0, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.0):
            fill = scale if self.fill_slowest else None
            share = scale * self.crossbar_share
            reps, splits = choose_replication(
                arch, sg, share, self.latency, self.noc, fill, self.vector_split
            )
            chunks = choose_chunks(sg, reps, fed, self.host_chunks) if fed is not None else {}
            rows = choose_row_chunks(sg, reps, chunks) if self.row_chunks else frozenset()
            try:
                return self.place(arch, sg, reps, splits, chunks, span, rows=rows)
            except PassFailedError as e:
                last_err = e
        raise last_err  # type: ignore[misc]

    def place(
        self,
        arch: Arch,
        sg: SpatialGraph,
        reps: dict[int, int],
        splits: dict[int, int],
        chunks: dict[int, int],
        span: int | None = None,
        fixed: dict[int, int] | None = None,
        rows: frozenset[int] = frozenset(),
    ) -> SpatialGraph:
        """sg with the nodes of this replication (tiling.make_nodes) packed onto cores
        (merging.pack_balanced, by the pass's windows; `fixed`: node index -> core for nodes
        placed as given) and renumbered along the snake; raises PassFailedError when they do not
        fit."""
        nodes = make_nodes(sg, arch, reps, splits, chunks, rows)
        lanes = np.array(lane_table(arch, sg.layers, nodes))
        times = lanes * np.array([n.lanes for n in nodes], np.float64)
        placed, _ = pack_balanced(arch, nodes, times, span, self.windows, fixed, self.order_delay)
        placed = flat_groups_at_producers(sg, placed)
        out = replace(
            sg,
            nodes=place_snake(arch, placed),
            core_count=arch.core_count,
            crossbar_share=self.crossbar_share,
            crossbar_fill=self.fill_slowest,
            vector_split=self.vector_split if self.latency else None,
        )
        out.replication = {sg.layers[i].name: r for i, r in reps.items()}
        return out


@dataclass(frozen=True)
class PlainAssignmentPass:
    """What runs when planning is disabled (`plain_assignment`)."""

    name: ClassVar[str] = "plain-assignment"

    def apply(self, arch: Arch, sg: SpatialGraph) -> SpatialGraph:
        return plain_assignment(arch, sg)


def plain_assignment(arch: Arch, sg: SpatialGraph) -> SpatialGraph:
    """What runs when planning is disabled: one replica per layer, first-fit cores in order."""
    nodes = pack_plain(arch, make_nodes(sg, arch, {}, {}))
    out = replace(sg, nodes=nodes, core_count=arch.core_count)
    out.replication = {ly.name: 1 for ly in sg.layers if ly.kind == LayerKind.GEMM}
    return out


def estimates(arch: Arch, sg: SpatialGraph) -> dict:
    """Per-layer time (slowest node), per-core load and a NoC hop-bytes estimate (bytes a consumer
    core reads times its mean hop distance to the buffer's producer cores)."""
    eb = arch.element_bytes
    layer_ns: dict[str, float] = {}
    core_ns = np.zeros(arch.core_count)
    writers: dict[str, list[int]] = {}
    for n in sg.nodes:
        ly = sg.layers[n.layer]
        t = node_ns(arch, ly, n)
        layer_ns[ly.name] = max(layer_ns.get(ly.name, 0.0), t)
        core_ns[n.core] += t
        if n.kind != NodeKind.MVM or n.row_group == 0:
            writers.setdefault(ly.output.buffer, []).append(n.core)
    hops = hop_matrix(arch)
    hop_bytes = 0.0
    for n in sg.nodes:
        ly = sg.layers[n.layer]
        if n.kind == NodeKind.MVM:
            reads = [(ly.inputs[0].buffer, n.lanes * (n.r1 - n.r0) * eb)]
        else:
            reads = [
                (v.buffer, n.lanes * ly.cols * eb * max(1, ly.kernel_shape[0] * ly.kernel_shape[1]))
                for v in ly.inputs
            ]
        for buf, nbytes in reads:
            prod = writers.get(buf)
            if prod:
                hop_bytes += nbytes * float(hops[n.core, prod].mean())
    return {"layer_ns": layer_ns, "core_ns": core_ns, "hop_bytes": hop_bytes}
