"""Ideal bounds of a model on a chip, from the same timing model the simulator uses.

Method (anchors §6): for every weight layer l, rows R = kh*kw*Cin/g, columns C = Cout/g, g groups,
P = output pixels (1 for Gemm); X = physical crossbars per replica (depthwise groups packed
block-diagonally, floor(xbar_rows / R) groups per crossbar row block); t = one MVM at the
activation width; W = sum P*X crossbar-MVMs; CP = longest chain of dependent weight layers;
B = the chip's crossbars.

* latency_lb_unlimited_ns = CP * t (every output pixel its own replica)
* latency_lb_no_replication_ns = max P * t
* latency_lb_budget_ns = t * max(CP, T_B, ceil(W / B)), T_B = min over replications r (sum r*X <= B)
  of max ceil(P / r), found by water-filling on the bottleneck (optimal for this min-max problem)
* throughput_ub_per_s = 1 / (t * max(T_B, W / B))
* mvm_energy_floor_uj = sum P * X * (MVM energy per crossbar): the crossbar (mostly ADC) energy no
  schedule can avoid

The ideal bounds let every crossbar run at once. The *machine* bounds hold for any program on this
machine model that feeds each output pixel its own window (`machine_bounds`): every input entry
of an mvmul belongs to one output pixel's window, as in Raptor's and PIMCOMP's im2col mappings.
An mvmul drives one array group: one input vector of at most xbar_rows entries, into at most one
core's crossbars. Layers that read the same input with the same window (siblings: googlenet's
inception 1x1 convs) can share one input vector, so they count once, as a *window set*; and
windows shorter than a crossbar (a row tile's remainder: 19 of conv1's 147 rows, 64 of a
576-row 3x3 conv) can share one mvmul block-diagonally, several pixels or layers at a time, as
depthwise groups do. So a window set of P pixels, g groups, R rows and C columns per group feeds
at least P*g*R input entries and performs P*g*R*C multiply-adds, and an mvmul takes at most
xbar_rows entries and xbar_rows x crossbars_per_core x (xbar_cols / cells per weight) of them:

* mvmuls >= I = max(sum P*g*R / xbar_rows, sum P*g*R*C / (that many multiply-adds))

A core keeps at most rob_size instructions in flight (one at rob_size 1, the value of every
shipped architecture), each mvmul occupying it for t_core = MVM latency + its local-memory input
read; the network input must be loaded and the output stored through the single global-memory
request queue. Mappings that let one input entry serve several overlapping windows (a Toeplitz
weight layout, many more crossbars per copy) are outside this bound.

Two more costs of that model no program avoids, each charged at its cheapest:

* every mvmul writes its outputs to local memory, cols x cell_precision / weight bits x output
  bytes per crossbar it drives; a pixel's window of R rows takes at least T = ceil(R / xbar_rows)
  input vectors, each of whose C outputs a crossbar column block writes: at least
  P*g*T*C*cells/xbar_cols crossbar writes per window set, W_mvm = their write time at the local
  memory's bytes per beat and write cycles;
* an mvmul cannot add into its destination, so the T >= ceil(R / xbar_rows) blocks of a window
  leave T - 1 partial sums per output element to add: W_add = sum P*g*(T-1)*C element additions
  at the vector unit's cheapest per element cost (two local reads, one write, ceil(len / width)
  x latency cycles, all taken per element: no vector is shorter than its length). Summing
  partial sums on crossbars instead costs at least one t_core per xbar_rows inputs, far more per
  element.

With the core's busy work W = I * t_core + W_mvm + W_add (one instruction at a time on
rob_size 1; divided by rob otherwise, which only lowers the bound):

* latency_lb_machine_ns = max(CP * t_core, W / (cores * rob), t_gm(in) + t_gm(out))
* throughput_ub_machine_per_s = 1 / max(W / (cores * rob), t_gm(in) + t_gm(out))

`program_bound` is the same argument for one compiled program: every core issues its own mvmuls
and injects its own send flits (at least one link latency per flit) one after the other, and the
queue serves every ld and st: latency >= max(max over cores of both, the queue's service time).
"""

from __future__ import annotations

import heapq
import math
from pathlib import Path
from typing import Any

import numpy as np

from raptor.arch.loader import Arch
from raptor.arch.timing import memory_latency_ns, mvm_cost, mvm_local_read_bytes
from raptor.frontend.graph import Graph

_WINDOW_DEFAULTS = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1)}


def weight_layers(graph: Graph, arch: Arch) -> list[dict[str, Any]]:
    """Shape figures of every crossbar (weight-stationary) layer, in graph order."""
    layers = []
    for n in graph.nodes:
        if n.op == "Conv":
            cout, cin_g, kh, kw = n.params["W"].shape
            g = int(n.attrs.get("group", 1))
            out = graph.shapes[n.outputs[0]]
            rows, cols, pixels = kh * kw * cin_g, cout // g, out[2] * out[3]
            window = (
                n.inputs[0], kh, kw, g,
                *(tuple(n.attrs.get(k) or d) for k, d in _WINDOW_DEFAULTS.items()),
            )  # fmt: skip
            if g > 1 and cols == 1 and rows <= arch.matrix.rows:
                per_block = arch.matrix.rows // rows  # depthwise: groups packed block-diagonally
                xbars = arch.crossbars_for(per_block * rows, per_block) * math.ceil(g / per_block)
                naive = g * arch.crossbars_for(rows, cols)
            else:
                xbars = naive = g * arch.crossbars_for(rows, cols)
        elif n.op == "Gemm":
            rows, cols = n.params["W"].shape
            g, pixels = 1, 1
            xbars = naive = arch.crossbars_for(rows, cols)
            window = (n.inputs[0], "gemm")
        else:
            continue
        layers.append(
            {
                "name": n.name,
                "op": n.op,
                "rows": rows,
                "cols": cols,
                "groups": g,
                "pixels": pixels,
                "crossbars": xbars,
                "crossbars_naive": naive,
                "inputs": n.inputs,
                "outputs": n.outputs,
                "window": window,
            }
        )
    return layers


def critical_path(graph: Graph) -> int:
    """Longest chain of weight layers along any path of the graph."""
    depth: dict[str, int] = {t: 0 for t in graph.inputs}
    for n in graph.nodes:
        d = max((depth.get(t, 0) for t in n.inputs), default=0)
        d += 1 if n.op in ("Conv", "Gemm") else 0
        for t in n.outputs:
            depth[t] = d
    return max((depth.get(t, 0) for t in graph.outputs), default=0)


def water_fill(pixels: list[int], crossbars: list[int], budget: int) -> tuple[int, list[int]]:
    """Replications r >= 1 minimising max ceil(P/r) with sum r*X <= budget; returns (T_B, r)."""
    reps = [1] * len(pixels)
    used = sum(crossbars)
    if used > budget:
        raise ValueError(f"model needs {used} crossbars, chip has {budget}")
    heap = [(-p, i) for i, p in enumerate(pixels)]
    heapq.heapify(heap)
    while heap:
        neg, i = heap[0]
        if -neg <= 1 or used + crossbars[i] > budget:
            break
        heapq.heappop(heap)
        reps[i] += 1
        used += crossbars[i]
        heapq.heappush(heap, (-math.ceil(pixels[i] / reps[i]), i))
    t_b = max((math.ceil(p / r) for p, r in zip(pixels, reps)), default=0)
    return t_b, reps


def compute_bounds(model: str | Path | Graph, arch: Arch) -> dict[str, Any]:
    """Bounds of `model` (an ONNX path or a Graph) on `arch`; JSON-ready."""
    if isinstance(model, Graph):
        graph = model
    else:
        from raptor.frontend import load_graph

        graph = load_graph(model)
    layers = weight_layers(graph, arch)
    cost = mvm_cost(arch, arch.activation_bits)
    t = cost.latency_ns
    budget = arch.total_crossbars
    pixels = [ly["pixels"] for ly in layers]
    xbars = [ly["crossbars"] for ly in layers]
    work = sum(p * x for p, x in zip(pixels, xbars))
    cp = critical_path(graph)
    t_b, reps = water_fill(pixels, xbars, budget)
    return {
        "model": graph.name,
        "arch": arch.name,
        "mvm_ns": t,
        "weight_layers": len(layers),
        "crossbars_needed": sum(xbars),
        "crossbars_needed_naive_depthwise": sum(ly["crossbars_naive"] for ly in layers),
        "crossbars_available": budget,
        "work_crossbar_mvms": work,
        "critical_path_layers": cp,
        "bottleneck_mvms_best_replication": t_b,
        "latency_lb_unlimited_ns": cp * t,
        "latency_lb_no_replication_ns": max(pixels, default=0) * t,
        "latency_lb_budget_ns": t * max(cp, t_b, math.ceil(work / budget)),
        "throughput_ub_per_s": 1e9 / (t * max(t_b, work / budget)) if layers else None,
        "mvm_energy_floor_uj": work * cost.energy_per_crossbar_pj / 1e6,
        **machine_bounds(graph, arch, layers, cp),
        "replication_best": {ly["name"]: r for ly, r in zip(layers, reps)},
    }


def mvm_occupancy_ns(arch: Arch) -> float:
    """How long one mvmul at the activation width holds a core at rob_size 1: the MVM itself
    plus pimsim-nn's local-memory read of its input (no pipeline overhead: a lower bound)."""
    bits = arch.activation_bits
    read = mvm_local_read_bytes(arch, 0, bits)
    return mvm_cost(arch, bits).latency_ns + memory_latency_ns(arch.core.local_memory, read, False)


def mvm_write_ns(arch: Arch, crossbars: float) -> float:
    """Least local-memory write time of the outputs of `crossbars` crossbars driven by mvmuls
    (pimsim-nn's write size per crossbar, beats and crossbars taken fractionally: a lower
    bound)."""
    m, lm = arch.matrix, arch.core.local_memory
    per_xbar = m.cols * m.cell_precision / arch.weight_bits * math.ceil(arch.activation_bits / 8)
    return crossbars * per_xbar / lm.data_width * lm.write_latency_cycle * lm.period


def add_element_ns(arch: Arch) -> float:
    """Least vector-unit time per element of an element-wise add (vvadd: two operand reads and
    one write of the element, and its share of ceil(len / width) x latency cycles)."""
    lm, c = arch.core.local_memory, arch.core
    beat = arch.element_bytes / lm.data_width * lm.period
    return (
        beat * (2 * lm.read_latency_cycle + lm.write_latency_cycle)
        + c.vector_latency_cycle / c.vector_width
    )


def window_sets(layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Weight layers grouped by the input vectors they can share: the same input read with the
    same window (siblings), in graph order; each set with its pixels P, groups g, window rows R,
    summed columns C and its layers' names (module docstring)."""
    sets: dict[tuple, dict[str, Any]] = {}
    for ly in layers:
        ws = sets.get(ly["window"])
        if ws is None:
            sets[ly["window"]] = {
                "layers": [ly["name"]],
                **{k: ly[k] for k in ("pixels", "groups", "rows", "cols")},
            }
        else:
            ws["layers"].append(ly["name"])
            ws["cols"] += ly["cols"]
    return list(sets.values())


def machine_bounds(
    graph: Graph, arch: Arch, layers: list[dict[str, Any]] | None = None, cp: int | None = None
) -> dict[str, Any]:
    """Bounds every program on this machine model obeys (module docstring)."""
    layers = weight_layers(graph, arch) if layers is None else layers
    cp = critical_path(graph) if cp is None else cp
    t = mvm_occupancy_ns(arch)
    m = arch.matrix
    cells = arch.weight_bits / m.cell_precision  # cell columns per weight
    macs_per_mvm = m.rows * arch.crossbars_per_core * m.cols / cells
    sets = window_sets(layers)
    entries = sum(ws["pixels"] * ws["groups"] * ws["rows"] for ws in sets)
    macs = sum(ws["pixels"] * ws["groups"] * ws["rows"] * ws["cols"] for ws in sets)
    instr = math.ceil(max(entries / m.rows, macs / macs_per_mvm))
    slots = arch.core_count * arch.core.rob_size
    issue = instr * t / slots
    blocks = [ws["pixels"] * ws["groups"] * math.ceil(ws["rows"] / m.rows) for ws in sets]
    xbar_writes = sum(b * ws["cols"] * cells / m.cols for b, ws in zip(blocks, sets))
    writes = mvm_write_ns(arch, xbar_writes) / slots
    partial = sum(ws["pixels"] * ws["groups"] * ws["cols"] for ws in sets)
    adds = (sum(b * ws["cols"] for b, ws in zip(blocks, sets)) - partial) * add_element_ns(arch)
    adds /= slots
    work = issue + writes + adds
    eb = arch.element_bytes
    gm = arch.global_memory
    io = sum(
        memory_latency_ns(gm, int(np.prod(graph.shapes[x])) * eb, False) for x in graph.inputs
    ) + sum(memory_latency_ns(gm, int(np.prod(graph.shapes[x])) * eb, True) for x in graph.outputs)
    return {
        "mvm_occupancy_ns": t,
        "mvm_instructions_min": instr,
        "window_sets": len(sets),
        "mvm_issue_ns": issue,
        "mvm_write_ns": writes,
        "partial_sum_ns": adds,
        "core_work_ns": work,
        "global_memory_io_ns": io,
        "latency_lb_machine_ns": max(cp * t, work, io),
        "throughput_ub_machine_per_s": 1e9 / max(work, io) if instr else None,
    }


def program_bound(prog: Any, arch: Arch) -> dict[str, float]:
    """Lower bound of one compiled program's latency on this machine model (module docstring)."""
    from raptor.isa.opcodes import Opcode

    t = mvm_occupancy_ns(arch) / arch.core.rob_size
    flit_ns = arch.noc.base_latency_ns + arch.noc.hop_latency_ns
    bus = arch.noc.bus_width
    gm = arch.global_memory
    core_ns, queue_ns = 0.0, 0.0
    for s in prog.cores:
        op, size = s["opcode"], s["generic3"].astype(np.int64)
        sends = size[op == Opcode.SEND]
        busy = int((op == Opcode.MVMUL).sum()) * t + float(np.ceil(sends / bus).sum()) * flit_ns
        core_ns = max(core_ns, busy)
        for code, write in ((Opcode.LD, False), (Opcode.ST, True)):
            beats = np.ceil(size[op == code] / gm.data_width).sum()
            cycles = gm.write_latency_cycle if write else gm.read_latency_cycle
            queue_ns += float(beats) * cycles * gm.period
    return {
        "core_issue_ns": core_ns,
        "global_memory_queue_ns": queue_ns,
        "latency_lb_program_ns": max(core_ns, queue_ns),
    }


def format_bounds(b: dict[str, Any]) -> str:
    """The figures of `compute_bounds` as a short text: what each bound is and which term sets
    it (`raptor bounds`; --json prints them all)."""
    ms = 1e6

    def tp(x: float | None) -> str:
        return "-" if x is None else f"{x:,.1f} inferences/s"

    chain = b["critical_path_layers"] * b["mvm_occupancy_ns"]
    terms = {
        "layer chain": chain,
        "core work": b["core_work_ns"],
        "global-memory I/O": b["global_memory_io_ns"],
    }
    sets = max(terms, key=terms.get)
    return "\n".join(
        [
            f"bounds of {b['model']} on {b['arch']}: {b['weight_layers']} weight layers, "
            f"{b['crossbars_needed']} of {b['crossbars_available']} crossbars for one copy, "
            f"critical path {b['critical_path_layers']} layers",
            f"ideal (every crossbar computes at once, one MVM {b['mvm_ns']:g} ns):",
            f"  latency    >= {b['latency_lb_budget_ns'] / ms:.4f} ms "
            f"(no replication {b['latency_lb_no_replication_ns'] / ms:.4f} ms, unlimited "
            f"crossbars {b['latency_lb_unlimited_ns'] / ms:.4f} ms)",
            f"  throughput <= {tp(b['throughput_ub_per_s'])}",
            f"  energy     >= {b['mvm_energy_floor_uj']:,.1f} uJ per inference (crossbar MVMs)",
            "machine (any program on this machine model; an mvmul holds its core "
            f"{b['mvm_occupancy_ns']:g} ns):",
            f"  latency    >= {b['latency_lb_machine_ns'] / ms:.4f} ms, set by the {sets}",
            f"    layer chain        {chain / ms:.4f} ms",
            f"    core work          {b['core_work_ns'] / ms:.4f} ms = mvm issue "
            f"{b['mvm_issue_ns'] / ms:.4f} + output writes {b['mvm_write_ns'] / ms:.4f} + "
            f"partial sums {b['partial_sum_ns'] / ms:.4f} "
            f"({b['mvm_instructions_min']:,} mvmuls at least, {b['window_sets']} window sets)",
            f"    global-memory I/O  {b['global_memory_io_ns'] / ms:.4f} ms",
            f"  throughput <= {tp(b['throughput_ub_machine_per_s'])}",
        ]
    )
