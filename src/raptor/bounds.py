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
"""

from __future__ import annotations

import heapq
import math
from pathlib import Path
from typing import Any

from raptor.arch.loader import Arch
from raptor.arch.timing import mvm_cost
from raptor.frontend.graph import Graph


def weight_layers(graph: Graph, arch: Arch) -> list[dict[str, Any]]:
    """Shape figures of every crossbar (weight-stationary) layer, in graph order."""
    layers = []
    for n in graph.nodes:
        if n.op == "Conv":
            cout, cin_g, kh, kw = n.params["W"].shape
            g = int(n.attrs.get("group", 1))
            out = graph.shapes[n.outputs[0]]
            rows, cols, pixels = kh * kw * cin_g, cout // g, out[2] * out[3]
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
        "replication_best": {ly["name"]: r for ly, r in zip(layers, reps)},
    }
