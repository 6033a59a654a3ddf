"""Per-lane cost model of compute nodes, from pimsim-nn's unit formulas (raptor.arch.timing).

With rob_size 1 a core executes one instruction at a time, so a lane costs the sum of its
instructions: global-memory ld/st (ceil(bytes / data_width) beats of the shared global memory),
one MVM per row tile (compute + the local read pimsim-nn charges), and vector ops.
"""

from __future__ import annotations

import math

from raptor.arch import Arch
from raptor.arch.timing import memory_latency_ns, mvm_cost, mvm_local_read_bytes, vector_compute_ns
from raptor.spatial.ir import (
    ComputeNode,
    Layer,
    LayerKind,
    NodeKind,
    adds_bias,
    reduce_children,
)
from raptor.spatial.tiling import row_tiles, tile_pack

INSTRUCTION_OVERHEAD_NS = 6.0


def _ld_ns(arch: Arch, nbytes: int) -> float:
    return (
        memory_latency_ns(arch.global_memory, nbytes, False)
        + memory_latency_ns(arch.core.local_memory, nbytes, True)
        + arch.noc.global_memory_latency_ns
        + INSTRUCTION_OVERHEAD_NS
    )


def _st_ns(arch: Arch, nbytes: int) -> float:
    return (
        memory_latency_ns(arch.core.local_memory, nbytes, False)
        + memory_latency_ns(arch.global_memory, nbytes, True)
        + arch.noc.global_memory_latency_ns
        + INSTRUCTION_OVERHEAD_NS
    )


def _vec_ns(arch: Arch, length: int, operands: int = 2) -> float:
    lm = arch.core.local_memory
    eb = arch.element_bytes
    return (
        vector_compute_ns(arch, length)
        + operands * memory_latency_ns(lm, length * eb, False)
        + memory_latency_ns(lm, length * eb, True)
        + INSTRUCTION_OVERHEAD_NS
    )


def _noc_ns(arch: Arch, nbytes: int) -> float:
    """A send/recv of nbytes to a neighbour: local read/write plus flits at one hop."""
    lm = arch.core.local_memory
    flits = -(-nbytes // arch.noc.bus_width)
    return (
        memory_latency_ns(lm, nbytes, False)
        + memory_latency_ns(lm, nbytes, True)
        + (flits + 2) * (arch.noc.base_latency_ns + arch.noc.hop_latency_ns)
        + INSTRUCTION_OVERHEAD_NS
    )


def mvm_ns(arch: Arch) -> float:
    """One MVM on an array group: compute plus pimsim-nn's local-memory read of its input."""
    bits = arch.activation_bits
    lm = arch.core.local_memory
    return (
        mvm_cost(arch, bits).latency_ns
        + memory_latency_ns(lm, mvm_local_read_bytes(arch, 0, bits), False)
        + INSTRUCTION_OVERHEAD_NS
    )


def lane_ns(arch: Arch, layer: Layer, node: ComputeNode) -> float:
    """Estimated busy time of one lane (output pixel) of `node`: what its core executes for it
    (`plan_lane_ns` is what the planner charges)."""
    eb = arch.element_bytes
    act = {None: 0, "relu": 1, "sigmoid": 1, "silu": 2}[layer.activation]
    if node.kind == NodeKind.MVM:
        fan_in = len(reduce_children(node.row_group, layer.row_groups))
        return _mvm_lane_ns(arch, layer, node, fan_in, adds_bias(layer, node))
    if layer.kind == LayerKind.TENSOR:
        from raptor.spatial.tensor import lane_profile

        lds, vecs, sts, n = lane_profile(layer.spec)
        return lds * _ld_ns(arch, n * eb) + vecs * _vec_ns(arch, n) + sts * _st_ns(arch, n * eb)
    c = layer.output.channels
    if layer.kind in (LayerKind.MAXPOOL, LayerKind.AVGPOOL):
        kh, kw = layer.kernel_shape
        t = (
            kh * _ld_ns(arch, kw * c * eb)
            + (kh - 1) * _vec_ns(arch, kw * c)
            + (kw - 1) * _vec_ns(arch, c)
        )
        if layer.kind == LayerKind.AVGPOOL:
            t += _vec_ns(arch, c)
        return t + act * _vec_ns(arch, c) + _st_ns(arch, c * eb)
    n_in = len(layer.inputs)
    return n_in * _ld_ns(arch, c * eb) + (n_in - 1 + act) * _vec_ns(arch, c) + _st_ns(arch, c * eb)


def _mvm_lane_ns(arch: Arch, layer: Layer, node: ComputeNode, fan_in: int, bias: bool) -> float:
    """One lane of an MVM node that adds `fan_in` partial sums of its reduction-tree children
    and, if `bias`, the layer's bias: input loads, mvmuls and tile additions, the sums, then the
    send to its parent (row group > 0) or the residual, activation and store."""
    eb = arch.element_bytes
    cols = node.c1 - node.c0
    act = {None: 0, "relu": 1, "sigmoid": 1, "silu": 2}[layer.activation]
    kh, kw = layer.kernel_shape
    rows = node.r1 - node.r0
    seg = max(1, rows // kh)
    t = kh * _ld_ns(arch, seg * eb)
    tiles = math.ceil(rows / arch.matrix.rows)
    t += tiles * mvm_ns(arch) + (tiles - 1) * _vec_ns(arch, cols)
    a, b = row_tiles(arch, node.r0, node.r1)[-1]
    k = tile_pack(arch, a, b, layer.pack)
    if k > 1:  # the packed tile: its input copied to the pack, one mvmul per k pixels
        t += _vec_ns(arch, b - a) + (1 / k - 1) * mvm_ns(arch)
    t += fan_in * (_noc_ns(arch, cols * eb) + _vec_ns(arch, cols))
    if bias:
        t += _vec_ns(arch, cols)
    if node.row_group > 0:  # send to the parent
        return t + _noc_ns(arch, cols * eb)
    if len(layer.inputs) > 1:  # fused residual add
        t += _ld_ns(arch, cols * eb) + _vec_ns(arch, cols)
    return t + act * _vec_ns(arch, cols) + _st_ns(arch, cols * eb)


def plan_lane_ns(arch: Arch, layer: Layer, node: ComputeNode) -> float:
    """The time per lane the planner charges a node (replication, packing by load, the message
    order): `lane_ns`, but an MVM node of a multi-group layer as a group of a binomial reduction
    tree (group g adds the sums of g + 2^k for every k with g % 2^(k+1) == 0) whose root also
    adds the bias. The programs' tree (ir.reduce_children) leaves its root one sum to add and
    gives the bias to the last group, yet the root still waits for its subtree's sums before it
    can finish a pixel, which the heavier charge stands for. Measured on the 8 latency cases
    against stop 45 (latency, geometric mean): charging the planner like that 0.964, charging
    each node its own work (`lane_ns`) 0.993 (googlenet arch-b +9.5 %: the estimates then
    chose a pixel-chunk plan), charging the root its tree's critical path (its subtree's sums
    before its own finish) 0.986 (resnet18 arch-a +2.3 %)."""
    if node.kind != NodeKind.MVM or layer.row_groups == 1:
        return lane_ns(arch, layer, node)
    g, k, fan_in = node.row_group, 1, 0
    while g % (2 * k) == 0 and g + k < layer.row_groups:
        fan_in, k = fan_in + 1, 2 * k
    return _mvm_lane_ns(arch, layer, node, fan_in, g == 0)


def node_ns(arch: Arch, layer: Layer, node: ComputeNode) -> float:
    return lane_ns(arch, layer, node) * node.lanes


def lane_table(arch: Arch, layers: list[Layer], nodes: list[ComputeNode]) -> list[float]:
    """`plan_lane_ns` of every node of one graph (`layers` its layers), computed once per layer
    and node geometry (kind, rows, columns, row group: all it reads of a node)."""
    memo: dict[tuple, float] = {}
    out = []
    for n in nodes:
        key = (n.layer, n.kind, n.r0, n.r1, n.c0, n.c1, n.row_group)
        t = memo.get(key)
        if t is None:
            t = memo[key] = plan_lane_ns(arch, layers[n.layer], n)
        out.append(t)
    return out


def lane_bus_ns(arch: Arch, layer: Layer, node: ComputeNode) -> float:
    """Global-memory occupancy of one lane: the shared host memory serialises every ld/st, so
    this bounds how fast all replicas of a layer together can go."""
    from raptor.arch.timing import memory_latency_ns as ml

    eb, gm = arch.element_bytes, arch.global_memory
    cols = node.c1 - node.c0
    if node.kind == NodeKind.MVM:
        kh, kw = layer.kernel_shape
        sw = layer.strides[1]
        rows = node.r1 - node.r0
        seg = max(1, rows // kh) * (min(sw, kw) / kw)  # sliding windows load only new columns
        st = 0.0
        if node.row_group == 0:
            st = ml(gm, cols * eb, True) + (len(layer.inputs) - 1) * ml(gm, cols * eb, False)
        return kh * ml(gm, int(seg * eb), False) + st
    c = layer.output.channels
    kh, kw = layer.kernel_shape
    n_in = len(layer.inputs) if layer.kind in (LayerKind.ADD, LayerKind.ACT) else 1
    return n_in * kh * ml(gm, kw * c * eb, False) + ml(gm, c * eb, True)


def lane_profile_bytes(arch: Arch, layer: Layer, node: ComputeNode) -> int:
    """Approximate host-memory bytes (ld + st) of one lane of `node`."""
    eb = arch.element_bytes
    if layer.kind == LayerKind.TENSOR:
        from raptor.spatial.tensor import lane_profile

        lds, _, sts, n = lane_profile(layer.spec)
        return (lds + sts) * n * eb
    if node.kind == NodeKind.MVM:
        return (node.r1 - node.r0 + node.c1 - node.c0) * eb
    c = layer.output.channels
    kh, kw = layer.kernel_shape
    return (len(layer.inputs) * kh * kw * c + c) * eb
