"""The Spatial IR: weight-stationary layers, host buffers and compute nodes placed on cores.

A weight layer (Conv, Gemm) is a GEMM whose rows are the (kh, kw, cin) window of an NHWC input
pixel; it becomes compute nodes = (layer, replica, column slice [c0, c1), row group [r0, r1),
output-pixel range [p0, p1)). The pixel range is a batch of identical lanes (Raptor's
`spat.compute_batch`), never one object per pixel. Vector layers (pools, Add, activations) become
vector nodes over pixel ranges. Every activation tensor lives in a host buffer in NHWC order;
a `TensorView` says where a tensor sits inside its buffer (channel offset, pixel stride), so a
Concat is free and Flatten is a view.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum, StrEnum

import numpy as np

from raptor.errors import IRVerifyError


class LayerKind(IntEnum):
    GEMM = 0  # Conv or Gemm lowered to a GEMM over output pixels
    MAXPOOL = 1
    AVGPOOL = 2  # AveragePool and GlobalAveragePool
    ADD = 3
    ACT = 4  # standalone activation
    TENSOR = 5  # generic vector-unit tensor op over strided views (raptor.spatial.tensor)


class NodeKind(IntEnum):
    MVM = 0  # crossbar node of a GEMM layer
    REDUCE = 1  # adds the row-group partial sums of a GEMM layer (+bias, activation)
    VECTOR = 2  # node of a vector layer


class BufferRole(IntEnum):
    INPUT = 0
    CONST = 1
    ACT = 2
    OUTPUT = 3
    SCRATCH = 4


@dataclass(frozen=True, slots=True)
class Buffer:
    """A host-memory buffer; `address` (bytes) is set by the host layout."""

    name: str
    size_bytes: int
    role: BufferRole
    address: int = -1


@dataclass(frozen=True, slots=True)
class TensorView:
    """Where an NHWC tensor of `channels` x `height` x `width` lives: pixel p, channel c is element
    `channel_offset + p * pixel_stride + c` of `buffer`. `chw` is set on a flat view of a 4-D
    tensor (Flatten/Reshape): the ONNX (c, h, w) shape it came from."""

    buffer: str
    channels: int
    height: int
    width: int
    channel_offset: int = 0
    pixel_stride: int = 0
    chw: tuple[int, int, int] | None = None

    @property
    def pixels(self) -> int:
        return self.height * self.width

    @property
    def contiguous(self) -> bool:
        return self.pixel_stride == self.channels


@dataclass(frozen=True, eq=False)
class Layer:
    """One layer of the network after lowering to the spatial form.

    GEMM: `weight` is (K, N) with K = kh*kw*cin rows in (kh, kw, cin) order; `bias` (N,); an
    optional `inputs[1]` is a residual added after the bias (a fused Add, spatial/fusion.py).
    Pools/Add/ACT: no weights. `activation`: None | "relu" | "sigmoid" | "silu"."""

    index: int
    name: str
    kind: LayerKind
    inputs: tuple[TensorView, ...]
    output: TensorView
    kernel_shape: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    activation: str | None = None
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None
    bias_buffer: str | None = None
    count_include_pad: bool = False
    row_groups: int = 1
    # pixels one mvmul of the short last row tile serves (its weights block-diagonal k times:
    # spatial/tiling.py pack_factor); 1 = one mvmul per pixel and tile
    pack: int = 1
    scratch: str | None = None  # buffer of row-group partial sums (pixels x groups x N)
    spec: object | None = None  # TENSOR layers: a raptor.spatial.tensor.TensorSpec

    @property
    def rows(self) -> int:
        return 0 if self.weight is None else int(self.weight.shape[0])

    @property
    def cols(self) -> int:
        return self.output.channels

    @property
    def out_pixels(self) -> int:
        return self.output.pixels


@dataclass(frozen=True, slots=True)
class ComputeNode:
    """A batch of identical lanes (output pixels p0..p1) of one layer on one core."""

    id: int
    layer: int
    kind: NodeKind
    p0: int
    p1: int
    c0: int = 0
    c1: int = 0
    r0: int = 0
    r1: int = 0
    row_group: int = 0
    replica: int = 0
    crossbars: int = 0
    core: int = -1
    # pixel chunk of the replica (spatial/tiling.py make_nodes): chunk 0 holds the replica's
    # crossbars, later chunks run on its core with the same array groups (crossbars 0)
    chunk: int = 0

    @property
    def lanes(self) -> int:
        return self.p1 - self.p0


class TokenKind(StrEnum):
    """A `sync event, target` or a `wait event, count` token."""

    SYNC = "sync"
    WAIT = "wait"


@dataclass(frozen=True, slots=True)
class SyncToken:
    """`sync event, target` (kind SYNC) or `wait event, count` (kind WAIT) attached before or
    after a node on `core`; `buffer` names the host buffer it orders."""

    core: int
    kind: TokenKind
    event: int
    value: int  # target core for sync, count for wait
    buffer: str


@dataclass(frozen=True)
class DepthwiseGroup:
    """One depthwise Conv packed block-diagonally (spatial/build.py)."""

    name: str
    channels: int
    kernel: int  # kh * kw
    per_block: int  # channels per crossbar row block


@dataclass(frozen=True)
class SpatialNotes:
    """What the passes record about the graph for the compile report and codegen."""

    depthwise: tuple[DepthwiseGroup, ...] = ()  # packed depthwise Convs (build)
    # strided views of TENSOR layer outputs: tensor -> (buffer, offset, shape, strides) (build)
    tensor_views: dict[str, tuple[str, int, tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=dict
    )
    fused_adds: int = 0  # residual Adds fused into GEMM layers (fusion)
    merged_siblings: int = 0  # sibling GEMM layers merged away (sibling)
    event_registers: int = 0  # event registers per core, the most any core uses (sync)
    band_tokens: bool | None = None  # sync used row-band tokens; None: sync did not run
    # message-order estimate (ns) of each plan the compiler tried: "contiguous", "chunked" and
    # their window-packing rounds ("chunked_repacked1", ...; raptor.compiler._plan)
    plan_estimates_ns: dict[str, float] = field(default_factory=dict)


def reduce_children(g: int, size: int) -> list[int]:
    """Row groups whose partial sums group g of a `size`-group reduction tree receives, in the
    order it adds them. The root (group 0) receives only group 1's sum: besides its own row
    tiles it adds the residual, applies the activation and sends the output, so it is the
    tree's slowest node; groups 1..size-1 form a binary heap below it (group 1 + h receives
    from 1 + 2h + 2, then 1 + 2h + 1, the smaller subtree first), so no group adds more than
    two sums. Measured against the binomial tree rooted at group 0 (the root receiving
    log2(size) sums), on the 8 latency cases with the same plans: latency -1.1 to -5.2 %
    (raptor.pim.lowering_mvm; a tree's last group adds the bias, bias_nodes)."""
    if g == 0:
        return [1] if size > 1 else []
    h, m = g - 1, size - 1
    return [k + 1 for k in (2 * h + 2, 2 * h + 1) if k < m]


def adds_bias(layer: Layer, node: ComputeNode) -> bool:
    """Whether MVM node `node` adds its layer's bias: the only group of a one-group layer, else
    the last row group of its tree, a leaf of `reduce_children`, which adds it to its partial sum
    before sending; the root, which also adds its child's sum and the residual, applies the
    activation and sends the output, is the tree's busiest node."""
    return node.kind == NodeKind.MVM and node.row_group == layer.row_groups - 1


def reduce_parent(g: int) -> int:
    """The group that group g > 0 sends its partial sum to (`reduce_children`)."""
    return 0 if g == 1 else (g - 2) // 2 + 1


@dataclass
class SpatialGraph:
    """Layers in topological order, their host buffers, compute nodes and (after planning and
    synchronization) core assignment and sync tokens."""

    name: str
    layers: list[Layer]
    buffers: dict[str, Buffer]
    inputs: list[tuple[str, str, tuple[int, ...]]]  # (onnx name, buffer, onnx shape)
    outputs: list[tuple[str, str, tuple[int, ...]]]
    nodes: list[ComputeNode] = field(default_factory=list)
    core_count: int = 0
    # tokens per node id: (before, after); "start" tokens per core open the program
    tokens_before: dict[int, list[SyncToken]] = field(default_factory=dict)
    tokens_after: dict[int, list[SyncToken]] = field(default_factory=dict)
    tokens_start: dict[int, list[SyncToken]] = field(default_factory=dict)
    tokens_end: dict[int, list[SyncToken]] = field(default_factory=dict)  # close each round
    # row-band tokens (spatial/sync.py, bands=True): a node's output pixel bands in program order,
    # and the tokens before/after band i of node id, keyed (id, i)
    bands: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    band_before: dict[tuple[int, int], list[SyncToken]] = field(default_factory=dict)
    band_after: dict[tuple[int, int], list[SyncToken]] = field(default_factory=dict)
    const_values: dict[str, np.ndarray] = field(default_factory=dict)
    replication: dict[str, int] = field(default_factory=dict)
    crossbar_share: float = 1.0  # share of the chip's crossbars the replication could buy
    crossbar_fill: bool = False  # the rest then bought replicas of the slowest layer
    # latency objective: vector layers split to 1/N of the slowest GEMM node (options.VECTOR_SPLIT)
    vector_split: int | None = None
    notes: SpatialNotes = field(default_factory=SpatialNotes)
    noc: object | None = None  # raptor.spatial.noc.NocPlan: edges carried over the NoC

    def with_nodes(self, nodes: list[ComputeNode]) -> SpatialGraph:
        return replace(self, nodes=nodes)

    def nodes_by_core(self) -> dict[int, list[ComputeNode]]:
        """Nodes of each core in program order (topological layer order, then pixel range)."""
        out: dict[int, list[ComputeNode]] = {}
        for n in sorted(
            self.nodes, key=lambda n: (n.layer, n.kind == NodeKind.REDUCE, n.p0, n.c0, n.r0)
        ):
            out.setdefault(n.core, []).append(n)
        return out

    def reduce_links(self) -> dict[int, tuple[tuple[int, ...], int]]:
        """Row-group reduction tree of every MVM node of a multi-group layer: (cores it receives
        partial sums from, in order; core it sends its sum to, -1 for the root). The groups of one
        (layer, replica, column slice, pixel chunk) form the tree of `reduce_children`."""
        trees: dict[tuple[int, int, int, int], dict[int, ComputeNode]] = {}
        for n in self.nodes:
            if n.kind == NodeKind.MVM and self.layers[n.layer].row_groups > 1:
                trees.setdefault((n.layer, n.replica, n.c0, n.p0), {})[n.row_group] = n
        out = {}
        for tree in trees.values():
            size = len(tree)
            for g, n in tree.items():
                srcs = tuple(tree[k].core for k in reduce_children(g, size))
                out[n.id] = (srcs, tree[reduce_parent(g)].core if g else -1)
        return out

    def bias_nodes(self) -> set[int]:
        """MVM nodes that add their layer's bias (`adds_bias`)."""
        return {n.id for n in self.nodes if adds_bias(self.layers[n.layer], n)}

    def verify(self) -> None:
        for i, layer in enumerate(self.layers):
            if layer.index != i:
                raise IRVerifyError(f"layer {layer.name} has index {layer.index}, expected {i}")
            for v in (*layer.inputs, layer.output):
                if v.buffer not in self.buffers:
                    raise IRVerifyError(f"layer {layer.name} uses unknown buffer {v.buffer!r}")
            if layer.kind == LayerKind.GEMM and (
                layer.weight is None or layer.weight.shape[1] != layer.cols
            ):
                raise IRVerifyError(f"GEMM layer {layer.name} has no (K, {layer.cols}) weight")
        ids = set()
        for n in self.nodes:
            if n.id in ids:
                raise IRVerifyError(f"duplicate node id {n.id}")
            ids.add(n.id)
            layer = self.layers[n.layer]
            if not 0 <= n.p0 < n.p1 <= layer.out_pixels:
                raise IRVerifyError(
                    f"node {n.id} of {layer.name}: pixel range [{n.p0},{n.p1}) outside 0..{layer.out_pixels}"
                )
            if n.kind == NodeKind.MVM and not (
                0 <= n.c0 < n.c1 <= layer.cols and 0 <= n.r0 < n.r1 <= layer.rows
            ):
                raise IRVerifyError(
                    f"node {n.id} of {layer.name}: bad slice cols [{n.c0},{n.c1}) rows [{n.r0},{n.r1})"
                )
            if self.core_count and not 0 <= n.core < self.core_count:
                raise IRVerifyError(
                    f"node {n.id} of {layer.name} is on core {n.core}, chip has {self.core_count}"
                )
        if self.core_count:
            # a core runs its nodes one after another, so two nodes of one layer's reduction trees
            # on one core could wait on each other's rendezvous: at most one tree position per
            # core and layer (the pixel chunks of one replica and row group run on the same cores
            # in the same order, so they may share one)
            seen: dict[tuple[int, int], tuple[int, int, int]] = {}
            for n in self.nodes:
                if n.kind == NodeKind.MVM and self.layers[n.layer].row_groups > 1:
                    pos = (n.replica, n.c0, n.row_group)
                    if seen.setdefault((n.core, n.layer), pos) != pos:
                        raise IRVerifyError(
                            f"core {n.core} holds two row-group reduction nodes of layer "
                            f"{self.layers[n.layer].name}"
                        )
        # every output pixel x column of each layer is produced exactly once per row group
        for layer in self.layers:
            mine = [n for n in self.nodes if n.layer == layer.index and n.kind != NodeKind.REDUCE]
            if not mine and self.nodes:
                raise IRVerifyError(f"layer {layer.name} has no compute nodes")
            if layer.kind == LayerKind.GEMM and mine:
                cover = np.zeros((layer.row_groups, layer.cols), np.int64)
                for n in mine:
                    cover[n.row_group, n.c0 : n.c1] += n.p1 - n.p0
                if (cover != layer.out_pixels).any():
                    raise IRVerifyError(
                        f"layer {layer.name}: nodes do not cover every output pixel and column once"
                    )

    def dump(self) -> str:
        lines = [f"spatial {self.name} cores={self.core_count}"]
        for b in self.buffers.values():
            lines.append(f"  buffer {b.name} {b.role.name.lower()} {b.size_bytes}B @{b.address}")
        for layer in self.layers:
            ins = ", ".join(
                f"{v.buffer}[{v.channel_offset}:+{v.channels}/{v.pixel_stride}]"
                for v in layer.inputs
            )
            o = layer.output
            lines.append(
                f"  layer {layer.index} {layer.name} {layer.kind.name.lower()} ({ins}) -> "
                f"{o.buffer}[{o.channel_offset}:+{o.channels}/{o.pixel_stride}] {o.height}x{o.width}"
                f" rows={layer.rows} groups={layer.row_groups} act={layer.activation}"
            )
        for n in self.nodes:
            lines.append(
                f"  node {n.id} L{n.layer} {n.kind.name.lower()} r{n.replica}.{n.chunk} px[{n.p0},{n.p1}) "
                f"cols[{n.c0},{n.c1}) rows[{n.r0},{n.r1}) xb={n.crossbars} core={n.core}"
            )
        return "\n".join(lines)
