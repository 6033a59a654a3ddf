"""HT ("batch") dataflow schedule (PIMCOMP DAC'23 Alg. 1, released `BatchPipelineSchedule.cpp`,
`DataReload.cpp`), emitting our ISA.

Per GEMM layer and core, instruction group (IG) t is output pixel p0 + t of every replica:
  phase 0  per AG on the core: lldi 0 of the window's padding, ld of its in-bounds input rows from
           the provider's host tensor, mvmul;
  phase 1  vvadd of the AGs of one (replica, column part) that share the core;
  phase 2  send of that partial sum to the core of the replica's AG 0, which recvs and vvadds
           (transfers in one global order, so blocking send/recv cannot deadlock);
  phase 3  on AG 0's core: vvadd bias, activation, st into the output tensor (concat by placement).
Unlike the released code (whose POST scheduler is never called), pool, Add, activation and
global-average-pool layers are scheduled too: each is split into pixel ranges spread round-robin
over the cores and lowered by Raptor's vector lowering, so the program computes the whole network.
Layers pass data through host memory; a core runs its layers in topological order, and
Raptor's synchronization pass orders writers and readers of every host buffer (and, with
pipeline N, keeps round r+1 from overwriting a buffer a reader of round r still needs).
"""

from __future__ import annotations

import math

import numpy as np

from raptor.isa.opcodes import Opcode
from raptor.pim.codegen import token_records
from raptor.pim.emit import (
    R_CONST,
    R_IN0,
    R_OUT,
    TEMPS,
    Block,
    Regs,
    emit_activation,
    emit_ld,
    emit_st,
    emit_vv,
    emit_zero,
)
from raptor.pim.lowering import lower_node
from raptor.pim.lowering_ctx import LowerCtx
from raptor.pim.memalloc import LocalAllocator
from raptor.pim.window import window_padding
from raptor.pimcomp.partition import ArrayGroup
from raptor.pimcomp.program import KeyedStream, Plan, finish_core, lane_key, synchronize
from raptor.spatial.geometry import window_classes
from raptor.spatial.ir import ComputeNode, LayerKind, NodeKind
from raptor.spatial.tiling import split_range

MAX_VECTOR_SPLIT = 8


def load_window(
    b: Block, regs: Regs, plan: Plan, cls, ag: ArrayGroup, win: int, base_reg: int
) -> None:
    """lldi 0 over the padded rows of the AG's window, then ld of its in-bounds rows."""
    eb = plan.arch.element_bytes
    layer = plan.sg.layers[ag.layer]
    segs, zeros = window_padding(layer, cls, ag.r0, ag.r1)
    for s, n in zeros:
        emit_zero(b, win + s * eb, n * eb)
    for s, n, host in segs:
        emit_ld(b, regs, win + (s - ag.r0) * eb, base_reg, host * eb, n * eb)


def gemm_segment(plan: Plan, core: int, layer_index: int, alloc: LocalAllocator) -> np.ndarray:
    """All IGs of one GEMM layer on one core (see module docstring)."""
    arch, eb = plan.arch, plan.arch.element_bytes
    ly = plan.sg.layers[layer_index]
    mine = [a for a in plan.per_core[core] if a.layer == layer_index]
    groups = plan.groups(layer_index)
    pro = [
        make_sldi(R_IN0, plan.address[ly.inputs[0].buffer]),
        make_sldi(R_OUT, plan.address[ly.output.buffer]),
        make_sldi(R_CONST, plan.address[ly.bias_buffer]),
    ]
    regs = Regs(pro)
    ks = KeyedStream()
    win = {a: alloc.alloc((a.r1 - a.r0) * eb, "window") for a in mine}
    psum = {a: alloc.alloc((a.c1 - a.c0) * eb, "psum") for a in mine}
    for k, a in enumerate(mine):
        p0, p1 = plan.pixel_range(ly, a.replica)
        for cls in window_classes(ly, p0, p1):
            b = Block(len(cls.pixels))
            load_window(b, regs, plan, cls, a, win[a], R_IN0)
            b.add(
                Opcode.MVMUL,
                rd=regs.loc(psum[a], b),
                r1=regs.loc(win[a], b),
                r2_or_imm=arch.weight_bits,
                generic2=plan.group_id[a],
            )
            ks.add(b, lane_key(cls.pixels - p0, 0, k))
    transfer = 0
    for gi, ((rep, _part), ags) in enumerate(sorted(groups.items())):
        acc_core = ags[0].core
        local = [a for a in ags if a.core == core]
        senders = sorted({a.core for a in ags if a.core != acc_core})
        p0, p1 = plan.pixel_range(ly, rep)
        t = np.arange(p1 - p0)
        cols = ags[0].c1 - ags[0].c0
        if local:
            head = psum[local[0]]
            if len(local) > 1:
                b = Block(len(t))
                for a in local[1:]:
                    emit_vv(b, regs, Opcode.VVADD, head, head, psum[a], cols)
                ks.add(b, lane_key(t, 1, gi))
            if core != acc_core:
                b = Block(len(t))
                b.add(
                    Opcode.SEND,
                    rd=regs.loc(head, b),
                    r2_or_imm=acc_core,
                    generic3=cols * eb,
                )
                ks.add(b, lane_key(t, 2, transfer + senders.index(core)))
        if core == acc_core:
            tmp = alloc.alloc(cols * eb, "recv")
            bias = alloc.alloc(cols * eb, "bias")
            pro += [make_sldi(TEMPS[0], bias), make_ld_const(TEMPS[0], ags[0].c0 * eb, cols * eb)]
            for s_i, s in enumerate(senders):
                b = Block(len(t))
                b.add(Opcode.RECV, rd=regs.loc(tmp, b), r2_or_imm=s, generic3=cols * eb)
                emit_vv(b, regs, Opcode.VVADD, head, head, tmp, cols)
                ks.add(b, lane_key(t, 2, transfer + s_i))
            b = Block(len(t))
            emit_vv(b, regs, Opcode.VVADD, head, head, bias, cols)
            emit_activation(b, regs, ly.activation, head, tmp, cols)
            out = ly.output
            host = (out.channel_offset + (p0 + t) * out.pixel_stride + ags[0].c0) * eb
            emit_st(b, regs, head, host, cols * eb)
            ks.add(b, lane_key(t, 3, gi))
        transfer += len(senders)
    body = ks.build()
    return np.concatenate(regs.flush() + [body]) if len(body) else body


def make_sldi(r: int, v: int) -> np.ndarray:
    from raptor.isa.table import make

    return make(Opcode.SLDI, rd=r, r2_or_imm=int(v))


def make_ld_const(rd: int, host_off: int, size: int) -> np.ndarray:
    from raptor.isa.opcodes import OFFSET_RS1
    from raptor.isa.table import make

    return make(Opcode.LD, rd=rd, r1=R_CONST, generic1=OFFSET_RS1, generic2=host_off, generic3=size)


def vector_nodes(plan: Plan, first_id: int) -> list[ComputeNode]:
    """Non-MVM layers split into pixel ranges, spread round-robin over the cores."""
    sg, arch = plan.sg, plan.arch
    ig = max(1, plan.instruction_groups())
    nodes, rr = [], 0
    for ly in sg.layers:
        if ly.kind == LayerKind.GEMM:
            continue
        parts = max(1, min(MAX_VECTOR_SPLIT, math.ceil(ly.out_pixels / ig)))
        for p0, p1 in split_range(ly.out_pixels, parts):
            nodes.append(
                ComputeNode(
                    first_id + len(nodes),
                    ly.index,
                    NodeKind.VECTOR,
                    p0,
                    p1,
                    0,
                    ly.cols,
                    core=rr % arch.core_count,
                )
            )
            rr += 1
    return nodes


def gemm_nodes(plan: Plan) -> list[ComputeNode]:
    """One stand-in node per (core, GEMM layer) for the synchronization pass."""
    seen = sorted({(a.core, a.layer) for a in plan.ags}, key=lambda cl: (cl[1], cl[0]))
    return [
        ComputeNode(i, layer, NodeKind.MVM, 0, 1, core=core) for i, (core, layer) in enumerate(seen)
    ]


def lower(plan: Plan, node: ComputeNode) -> tuple[np.ndarray, int]:
    """Instructions of one HT node (a GEMM layer's share of a core, or a vector range)."""
    if node.kind == NodeKind.VECTOR:
        return lower_node(LowerCtx(plan.arch, plan.sg, plan.address), node, 0)
    alloc = LocalAllocator(
        plan.arch.core.local_memory.memory_size,
        node.core,
        f"pimcomp HT layer {plan.sg.layers[node.layer].name}",
    )
    return gemm_segment(plan, node.core, node.layer, alloc), alloc.top


def schedule_ht(plan: Plan, opts) -> tuple[list[np.ndarray], dict]:
    """Per-core streams of the HT schedule and their statistics."""

    arch = plan.arch
    g = gemm_nodes(plan)
    nodes = g + vector_nodes(plan, len(g))
    sg = synchronize(plan, nodes, opts.pipeline if opts.mode == "throughput" else 1)
    by_core = sg.nodes_by_core()
    cores, peak, count = [], [0] * arch.core_count, [0] * arch.core_count
    spans: dict[str, list[list[int]]] = {}  # per core: [first pc, layer index] of each node
    for c in range(arch.core_count):
        segs = []
        starts = []
        for n in by_core.get(c, []):
            starts.append([sum(len(x) for x in segs), n.layer])
            code, top = lower(plan, n)
            peak[c] = max(peak[c], top)
            count[c] += 1
            segs += token_records(sg.tokens_before.get(n.id, []))
            segs.append(code)
            segs += token_records(sg.tokens_after.get(n.id, []))
        cores.append(finish_core(arch, segs, sg.tokens_start.get(c, [])))
        if segs:  # finish_core puts its head before the segments
            head = len(cores[-1]) - sum(len(x) for x in segs)
            spans[f"core{c}"] = [[head + pc, ly] for pc, ly in starts]
    return cores, {
        "layer_spans": spans,
        "local_memory_peak_bytes": peak,
        "nodes_per_core": count,
        "event_registers": sg.notes.event_registers,
    }
