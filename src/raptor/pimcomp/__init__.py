"""pimcomp: our implementation of the published PIMCOMP algorithms, emitting Raptor's ISA.

Pipeline (PIMCOMP DAC'23 §IV, released PIMCOMP-NN `main.cpp`): node partitioning into array
groups, weight replication (balance / W0H0 / uniform), first-fit core mapping, then the HT
("batch", throughput mode) or LL ("element", latency mode) dataflow schedule. Host buffers, window
geometry, instruction emission, local allocation, synchronization tokens and program assembly are
Raptor's (one implementation each). Differences from the released C++ code: README.md.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from raptor.arch import Arch
from raptor.errors import PassFailedError
from raptor.frontend.graph import Graph
from raptor.isa.opcodes import Opcode
from raptor.options import CompileOptions
from raptor.pim.codegen import assemble_program, host_layout
from raptor.pimcomp.mapping import core_lists, first_fit
from raptor.pimcomp.partition import partition
from raptor.pimcomp.program import Plan, weight_tables
from raptor.pimcomp.replication import replicate
from raptor.pimcomp.schedule_ht import schedule_ht
from raptor.pimcomp.schedule_ll import schedule_ll
from raptor.result import (
    CompileResult,
    PassTimer,
    instruction_counts,
    program_counts,
    timing_fields,
)
from raptor.spatial.build import build_spatial
from raptor.spatial.ir import BufferRole, LayerKind, SpatialGraph
from raptor.spatial.tiling import TilingPass


def _spatial(graph: Graph, arch: Arch) -> SpatialGraph:
    """Raptor's host buffers and layers (+ average-pool reciprocals), without row groups."""
    sg = TilingPass().apply(arch, build_spatial(graph, arch.element_bytes))
    tensor = [ly.name for ly in sg.layers if ly.kind == LayerKind.TENSOR]
    if tensor:
        from raptor.errors import UnsupportedOpError

        raise UnsupportedOpError(
            f"pimcomp: {len(tensor)} layers need the vector-unit tensor ops (attention MatMul, "
            f"Softmax, Resize, DFL; first: {tensor[0]}); PIMCOMP supports none of them"
        )
    layers = [replace(ly, row_groups=1, scratch=None) for ly in sg.layers]
    buffers = {k: b for k, b in sg.buffers.items() if b.role != BufferRole.SCRATCH}
    return replace(sg, layers=layers, buffers=buffers, nodes=[], core_count=arch.core_count)


def plan_model(
    graph: Graph, arch: Arch, opts: CompileOptions, timed: PassTimer | None = None
) -> Plan:
    """Spatial layers, replication, partition and core mapping (times in `timed`)."""
    timed = timed if timed is not None else PassTimer()
    sg = timed("spatial-layers", _spatial, graph, arch)
    gemm = {n.name for n in graph.nodes if n.op == "Gemm"}
    fc = {ly.index for ly in sg.layers if ly.kind == LayerKind.GEMM and ly.name in gemm}
    reps = timed("replication", replicate, arch, sg.layers, opts.replication, False, fc)
    ags = timed("partition", partition, arch, sg.layers, reps)
    try:
        ags = timed("first-fit-mapping", first_fit, arch, ags)
    except PassFailedError:
        if opts.replication != "balance":
            raise
        # the released rule leaves first copies uncharged and can over-fill the chip: retry
        # with them charged (README: differences from the released code)
        reps = timed("replication", replicate, arch, sg.layers, "balance", True, fc)
        ags = timed("partition", partition, arch, sg.layers, reps)
        ags = timed("first-fit-mapping", first_fit, arch, ags)
    address, host_bytes = host_layout(sg)
    return Plan(arch, sg, address, host_bytes, reps, ags, core_lists(ags, arch.core_count))


def compile_model(graph: Graph, arch: Arch, opts: CompileOptions):
    """Compile with the PIMCOMP algorithms; same PimProgram layout and report fields as Raptor."""
    timed = PassTimer()
    plan = plan_model(graph, arch, opts, timed)
    if opts.mode == "throughput":
        cores, stats = timed("schedule-ht", schedule_ht, plan, opts)
    else:
        cores, stats = timed("schedule-ll", schedule_ll, plan, opts)
    t0 = time.perf_counter()
    ag_map, ag_w, mats = weight_tables(plan)
    meta = {"compiler": "pimcomp", "arch": arch.name, "mode": opts.mode, "pipeline": opts.pipeline}
    if stats.get("layer_spans"):  # HT only: LL interleaves layers per instruction group
        layers = [ly.name for ly in plan.sg.layers]
        meta["layer_spans"] = {"layers": layers, "cores": stats["layer_spans"]}
    prog = assemble_program(
        arch, plan.sg, plan.address, plan.host_bytes, cores, ag_map, ag_w, mats, meta
    )
    prog.verify()
    timed.times["assemble"] = round(time.perf_counter() - t0, 4)
    return CompileResult(prog, _report(plan, opts, prog, stats, timed.times))


def _hop_bytes(arch: Arch, cores: list[np.ndarray]) -> float:
    total = 0.0
    for c, s in enumerate(cores):
        m = s["opcode"] == Opcode.SEND
        for dst, size in zip(s["r2_or_imm"][m], s["generic3"][m]):
            total += float(size) * sum(arch.hops(c, int(dst)))
    return total


def _report(plan: Plan, opts, prog, stats: dict, times: dict) -> dict[str, Any]:
    arch, sg = plan.arch, plan.sg
    return {
        "compiler": "pimcomp",
        "model": sg.name,
        "arch": arch.name,
        "schedule": "HT" if opts.mode == "throughput" else "LL",
        **program_counts(arch, prog),
        "replication": {sg.layers[i].name: r for i, r in plan.replication.items()},
        "replication_method": opts.replication,
        "instruction_groups": stats.get("instruction_groups", plan.instruction_groups()),
        "nodes": len(sg.layers),
        "nodes_per_core": stats["nodes_per_core"],
        **instruction_counts(prog),
        "local_memory_peak_bytes": stats["local_memory_peak_bytes"],
        "host_memory_bytes": plan.host_bytes,
        "noc_hop_bytes_estimate": _hop_bytes(arch, prog.cores),
        "estimated_layer_ns": {},
        "estimated_core_ns_max": 0.0,
        "event_registers_max": stats.get("event_registers", 0),
        **timing_fields(opts, times),
    }
