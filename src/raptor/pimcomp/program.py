"""What both PIMCOMP schedules share: the plan (layers, host layout, mapped AGs), keyed
instruction blocks merged into one program order per core, and the per-core AG/weight tables.

A schedule emits `Block`s (raptor.pim.emit: one instruction template over lanes) together with
an int64 sort key per lane; `KeyedStream.build` orders all records by key with a stable sort, so
each lane's instructions stay contiguous and blocks built separately (AGs, padding classes,
replicas) interleave in instruction-group order without a Python object per instruction.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from raptor.arch import Arch
from raptor.isa.opcodes import Opcode
from raptor.isa.table import concat, make
from raptor.pim.codegen import token_records
from raptor.pim.emit import Block
from raptor.pimcomp.partition import ArrayGroup
from raptor.spatial.ir import Layer, SpatialGraph
from raptor.spatial.sync import SynchronizationPass
from raptor.spatial.tiling import split_range

KEY_SUB = 1 << 22  # sub-slots of one (instruction group, phase) key


def lane_key(t: np.ndarray | int, phase: int, sub: int) -> np.ndarray:
    """Sort key of (instruction group t, phase, sub-order)."""
    return (np.asarray(t, dtype=np.int64) * 8 + phase) * KEY_SUB + sub


class KeyedStream:
    """Blocks with one sort key per lane, merged by key (stable) into one stream."""

    def __init__(self) -> None:
        self.keys: list[np.ndarray] = []
        self.code: list[np.ndarray] = []

    def add(self, block: Block, keys: np.ndarray) -> None:
        if block.lanes == 0 or not block.slots:
            return
        keys = np.broadcast_to(np.asarray(keys, dtype=np.int64), (block.lanes,))
        self.keys.append(np.repeat(keys, len(block.slots)))
        self.code.append(block.build())

    def add_records(self, records: np.ndarray, key: int) -> None:
        self.keys.append(np.full(len(records), key, dtype=np.int64))
        self.code.append(records)

    def build(self) -> np.ndarray:
        if not self.code:
            return make(0, 0)
        keys = np.concatenate(self.keys)
        code = concat(self.code)
        return code[np.argsort(keys, kind="stable")]


@dataclass
class Plan:
    """Everything a schedule needs: spatial layers and buffers, host layout, mapped AGs."""

    arch: Arch
    sg: SpatialGraph
    address: dict[str, int]
    host_bytes: int
    replication: dict[int, int]
    ags: list[ArrayGroup]
    per_core: list[list[ArrayGroup]]
    group_id: dict[ArrayGroup, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for lst in self.per_core:
            for j, ag in enumerate(lst):
                self.group_id[ag] = j

    def pixel_range(self, layer: Layer, replica: int) -> tuple[int, int]:
        """Output pixels of a replica: an even contiguous share of the windows."""
        return split_range(layer.out_pixels, self.replication.get(layer.index, 1))[replica]

    def groups(self, layer: int) -> dict[tuple[int, int], list[ArrayGroup]]:
        """(replica, part) -> its AGs in index order; AG 0's core accumulates."""
        out: dict[tuple[int, int], list[ArrayGroup]] = {}
        for ag in self.ags:
            if ag.layer == layer:
                out.setdefault((ag.replica, ag.part), []).append(ag)
        return out

    def instruction_groups(self) -> int:
        """max over AGs of ceil(windows / replicas) (released BatchPipelineSchedule)."""
        return max(
            (-(-self.sg.layers[a.layer].out_pixels // self.replication[a.layer]) for a in self.ags),
            default=0,
        )


def weight_tables(plan: Plan) -> tuple[list[list[int]], list[list[int]], list[np.ndarray]]:
    """(array_group_map, array_group_weights, matrices); replicas share one matrix per slice."""
    arch, layers = plan.arch, plan.sg.layers
    index: dict[tuple[int, int, int, int, int], int] = {}
    matrices: list[np.ndarray] = []
    ag_map, ag_w = [], []
    for lst in plan.per_core:
        ag_map.append([a.crossbars for a in lst])
        ws = []
        for a in lst:
            key = (a.layer, a.r0, a.r1, a.c0, a.c1)
            if key not in index:
                index[key] = len(matrices)
                w = layers[a.layer].weight
                matrices.append(np.ascontiguousarray(w[a.r0 : a.r1, a.c0 : a.c1], np.float32))
            ws.append(index[key])
        ag_w.append(ws)
    _ = arch
    return ag_map, ag_w, matrices


def finish_core(arch: Arch, segments: list[np.ndarray], start_tokens) -> np.ndarray:
    """setbw, sldi r0 0, start tokens, then the segments (empty core: empty stream)."""
    if not segments:
        return make(0, 0)
    head = [
        make(Opcode.SETBW, generic1=arch.activation_bits, generic2=arch.activation_bits),
        make(Opcode.SLDI, rd=0, r2_or_imm=0),
    ]
    return concat(head + token_records(start_tokens) + segments)


def synchronize(plan: Plan, nodes, pipeline: int) -> SpatialGraph:
    """Raptor's synchronization pass over the schedule's per-core nodes."""
    sg = replace(plan.sg, nodes=nodes, core_count=plan.arch.core_count)
    return SynchronizationPass(pipeline=pipeline).apply(plan.arch, sg)
