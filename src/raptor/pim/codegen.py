"""Code generation: host layout, per-core streams, array groups, weights, memory image, meta.

Every non-empty core's stream is: setbw (ibiw = obiw = activation bits), sldi r0 0, its credit
syncs, then its nodes in program order, each wrapped in its wait/sync tokens, with the loads of
its constant area between them (raptor.pim.constants), then its end-of-round credit waits. Array
groups are allocated per node and row tile (the pixel chunks of one replica share its groups);
weight matrices are deduplicated by (layer, rows, columns), so replicas share one matrix. A
stream never ends in a scalar/setbw (pimsim-nn would not finish it).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from raptor.arch import Arch
from raptor.errors import PassFailedError
from raptor.isa.opcodes import Opcode
from raptor.isa.pimdir import PimProgram
from raptor.isa.table import concat, make
from raptor.pim.constants import const_area, load_positions, load_records, node_constants
from raptor.pim.halo import halo_areas, halo_plan
from raptor.pim.lowering import lower_node_bands
from raptor.pim.lowering_ctx import LowerCtx
from raptor.pim.lowering_lines import use_line_buffer
from raptor.pim.lowering_noc import noc_prologue
from raptor.spatial.ir import BufferRole, NodeKind, SpatialGraph, SyncToken, TokenKind
from raptor.spatial.tiling import row_tiles, tile_crossbars, tile_pack

HOST_ALIGN_BYTES = 64


def host_layout(sg: SpatialGraph) -> tuple[dict[str, int], int]:
    """Byte address of every buffer: inputs, constants, then activations/outputs/scratch."""
    order = sorted(
        sg.buffers.values(), key=lambda b: (min(int(b.role), 2), list(sg.buffers).index(b.name))
    )
    addr, top = {}, 0
    for b in order:
        addr[b.name] = top
        top += -(-b.size_bytes // HOST_ALIGN_BYTES) * HOST_ALIGN_BYTES
    return addr, top


def token_records(tokens: list[SyncToken]) -> list[np.ndarray]:
    """sync/wait records of `tokens` (shared with raptor.pimcomp)."""
    out = []
    for t in tokens:
        if t.kind == TokenKind.SYNC:
            out.append(make(Opcode.SYNC, r2_or_imm=t.value, generic1=t.event))
        else:
            out.append(make(Opcode.WAIT, generic1=t.event, generic2=t.value))
    return out


def lower_core(
    ctx: LowerCtx, core: int, nodes: list, ag_bases: list[int], constants: bool = True
) -> tuple[list[np.ndarray], list[int]]:
    """Every node of `core` lowered band by band with its tokens, and each node's local-memory
    peak, with the core's constant area (raptor.pim.constants) if the nodes fit beside it."""
    sg = ctx.sg
    area = const_area(ctx, core, nodes) if constants else {}
    if area:
        ctx.consts[core] = area
    try:
        codes, peaks = [], []
        for n, ag_base in zip(nodes, ag_bases):
            bands = sg.bands.get(n.id, [(n.p0, n.p1)])
            # the node's own tokens go with its first and last band (after the prologue, which
            # reads only constants), where the NoC message order (spatial/message_order.py)
            # expects them
            before = [token_records(sg.band_before.get((n.id, i), [])) for i in range(len(bands))]
            after = [token_records(sg.band_after.get((n.id, i), [])) for i in range(len(bands))]
            before[0] = token_records(sg.tokens_before.get(n.id, [])) + before[0]
            after[-1] = after[-1] + token_records(sg.tokens_after.get(n.id, []))
            code, peak = lower_node_bands(ctx, n, ag_base, bands, before, after)
            codes.append(code)
            peaks.append(peak)
        return codes, peaks
    except PassFailedError:
        if not ctx.consts.pop(core, None):
            raise
        return lower_core(ctx, core, nodes, ag_bases, constants=False)


def generate(
    arch: Arch, sg: SpatialGraph, meta: dict[str, Any], line_buffers: bool = True
) -> tuple[PimProgram, dict[str, Any]]:
    """Emit the program; returns it with codegen statistics (local-memory peaks, host bytes).
    `line_buffers` False: line buffers only where the NoC dataflow needs them."""
    address, host_bytes = host_layout(sg)
    if host_bytes > arch.global_memory.memory_size:
        raise PassFailedError(
            f"host memory needs {host_bytes} bytes, {arch.name} global memory has {arch.global_memory.memory_size}"
        )
    ctx = LowerCtx(arch, sg, address, sg.reduce_links(), line_buffers=line_buffers)
    if sg.noc is not None:
        shared = meta.get("pipeline", 1) == 1
        ctx.halo = halo_plan(sg, partial(use_line_buffer, ctx), shared)
        ctx.halo_area, ctx.halo_bytes = halo_areas(
            sg, ctx.halo, ctx.persist_top, arch.element_bytes
        )
    by_core = sg.nodes_by_core()
    n_cores = arch.core_count
    cores: list[np.ndarray] = []
    ag_map: list[list[int]] = []
    ag_weights: list[list[int]] = []
    matrices: list[np.ndarray] = []
    matrix_index: dict[tuple[int, int, int, int, int], int] = {}
    local_peak = [0] * n_cores
    host_ld: dict[str, int] = {}  # host bytes loaded per layer per inference
    spans: dict[str, list[list[int]]] = {}  # per core: [first pc, layer index] of each node
    for core in range(n_cores):
        nodes = by_core.get(core, [])
        ags: list[int] = []
        mats: list[int] = []
        if not nodes:
            cores.append(make(0, 0))
            ag_map.append(ags)
            ag_weights.append(mats)
            continue
        blocks = [
            make(Opcode.SETBW, generic1=arch.activation_bits, generic2=arch.activation_bits),
            make(Opcode.SLDI, rd=0, r2_or_imm=0),
        ]
        blocks += token_records(sg.tokens_start.get(core, []))
        blocks += noc_prologue(ctx, core)
        shared: dict[tuple[int, int, int, int], int] = {}  # a replica's array groups on this core
        ag_bases = []
        for n in nodes:
            ag_base = len(ags)
            if n.kind == NodeKind.MVM:
                ag_base = shared.setdefault((n.layer, n.replica, n.c0, n.r0), ag_base)
            if n.kind == NodeKind.MVM and ag_base == len(ags):
                layer = sg.layers[n.layer]
                for a, b in row_tiles(arch, n.r0, n.r1):
                    k = tile_pack(arch, a, b, layer.pack)
                    key = (n.layer, a, b, n.c0, n.c1)
                    if key not in matrix_index:
                        matrix_index[key] = len(matrices)
                        w = layer.weight[a:b, n.c0 : n.c1]
                        if k > 1:  # k pixels' copies, block-diagonal (spatial/tiling.py)
                            w = np.kron(np.eye(k, dtype=w.dtype), w)
                        matrices.append(np.ascontiguousarray(w, dtype=np.float32))
                    ags.append(tile_crossbars(arch, a, b, n.c1 - n.c0, layer.pack))
                    mats.append(matrix_index[key])
            ag_bases.append(ag_base)
        codes, peaks = lower_core(ctx, core, nodes, ag_bases)
        area = ctx.consts.get(core, {})
        loads = load_positions(ctx, nodes, codes) if area else {}
        persist = arch.core.local_memory.memory_size - ctx.persist_top(core)
        persist += ctx.halo_bytes.get(core, 0)
        core_spans = spans.setdefault(f"core{core}", [])
        for i, (n, code, peak) in enumerate(zip(nodes, codes, peaks)):
            blocks += load_records(ctx, area, loads.get(i, []))
            core_spans.append([sum(len(b) for b in blocks), n.layer])
            local_peak[core] = max(local_peak[core], peak + persist)
            blocks.append(code)
            lname = sg.layers[n.layer].name
            host_ld[lname] = host_ld.get(lname, 0) + int(
                code["generic3"][code["opcode"] == Opcode.LD].sum()
            )
        first: dict = {}  # a slice of the area counts for the first node that reads it
        for n in nodes if area else ():
            for c in node_constants(ctx, n):
                first.setdefault(c, sg.layers[n.layer].name)
        for c, lname in first.items():
            host_ld[lname] = host_ld.get(lname, 0) + c.size
        local_peak[core] += ctx.capacity(core, with_constants=False) - ctx.capacity(core)
        core_spans.append([sum(len(b) for b in blocks), -1])
        blocks += token_records(sg.tokens_end.get(core, []))
        if sum(ags) > arch.crossbars_per_core:
            raise PassFailedError(
                f"core {core} needs {sum(ags)} crossbars, {arch.name} cores have {arch.crossbars_per_core}"
            )
        cores.append(concat(blocks))
        ag_map.append(ags)
        ag_weights.append(mats)
    meta = {**meta, "layer_spans": {"layers": [ly.name for ly in sg.layers], "cores": spans}}
    prog = assemble_program(
        arch, sg, address, host_bytes, cores, ag_map, ag_weights, matrices, meta
    )
    stats = {
        "local_memory_peak_bytes": local_peak,
        "host_memory_bytes": host_bytes,
        "host_load_bytes": host_ld,
        "halo_nodes": len(ctx.halo),
        "halo_rows_received": sum(b - a for h in ctx.halo.values() for a, b in [h.received]),
        "host_buffers": {
            b: {
                "address": address[b],
                "size_bytes": sg.buffers[b].size_bytes,
                "role": sg.buffers[b].role.name.lower(),
            }
            for b in sg.buffers
            if sg.buffers[b].role != BufferRole.CONST
        },
    }
    return prog, stats


def assemble_program(
    arch: Arch,
    sg: SpatialGraph,
    address: dict[str, int],
    host_bytes: int,
    cores: list[np.ndarray],
    ag_map: list[list[int]],
    ag_weights: list[list[int]],
    matrices: list[np.ndarray],
    meta: dict[str, Any],
) -> PimProgram:
    """The PimProgram of per-core streams: host memory image (constants at their addresses) and
    input/output metadata (shared with raptor.pimcomp)."""
    eb = arch.element_bytes
    memory = np.zeros(host_bytes // eb, np.float32)
    for name, values in sg.const_values.items():
        a = address[name] // eb
        memory[a : a + values.size] = values
    io = lambda items: [  # noqa: E731
        {
            "name": t,
            "address": address[b],
            "shape": list(shape),
            "layout": "NHWC" if len(shape) == 4 else "flat",
        }
        for t, b, shape in items
    ]
    # where each intermediate would sit in host memory (buffers the passes fused away are left
    # out; the simulator reads back only those the program really stored)
    tensors = [
        {"name": t, "address": address[b] + off * eb, "shape": list(shape), "strides": list(st)}
        for t, (b, off, shape, st) in sg.notes.tensor_views.items()
        if b in address
    ]
    return PimProgram(
        cores=cores,
        array_group_map=ag_map,
        weight_matrices=matrices,
        array_group_weights=ag_weights,
        memory=memory,
        meta={
            **meta,
            "element_bytes": eb,
            "inputs": io(sg.inputs),
            "outputs": io(sg.outputs),
            "tensors": tensors,
        },
    )
