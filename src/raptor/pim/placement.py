"""Mesh placement: relabel the cores of an emitted program so that its messages travel few hops.

Planning (spatial/planning.py) packs compute nodes onto cores by load and then numbers the cores
along a snake order of the mesh by the first layer each holds. With window packing a core holds
nodes of layers far apart in the graph (resnet34 arch-a: conv1, a layer1 conv, a layer2 conv and
a layer3 conv on one core), so its later nodes talk to cores anywhere on the mesh: 4.2 hops per
flit on average there. In this machine model (pimsim-nn's `Network`, `raptor.sim.transfer`) a
message of k flits holds its source switch for k x (base + hop x hops) ns, and a send queued
behind it waits that long ("send wait" on the critical path), so hops cost time, not only energy.

The cores of one architecture are interchangeable (the same crossbars and local memory; on one
chip the global memory is as far from every core), and a program names cores only in the core
operand of send, recv and sync. So any permutation of the core numbers is the same program, with
the same instructions, messages, message order and values; only each message's hop count (and,
across chips, its chip hops and the global memory's distance) changes. `place_cores` picks the
permutation that minimises the switches' total busy time,

    cost(p) = sum over messages m of flits(m) x L[p(src m), p(dst m)]
            + sum over cores c of global-memory flits(c) x G[p(c)]

(L: per-flit link latency between two cores, G: to the global memory,
`raptor.arch.timing.link_latency_ns`), a quadratic assignment problem, by steepest-descent pair
swaps from the planner's numbering: each sweep takes every core a in turn, evaluates swapping it
with every other core at once (below) and makes the best swap that cuts the cost; it stops when a
sweep makes none. With W = T + T' (T: flits from core to core, diagonal dropped) and M the
latency between the cores' current positions (zero diagonal), swapping a and b changes the cost
by

    sum_k (W[a,k] - W[b,k]) (M[b,k] - M[a,k]) + 2 W[a,b] M[a,b] + (g[a] - g[b]) (G[p_b] - G[p_a])

(the first sum over every k; the second term removes its k = a and k = b entries, where the pair's
own distance does not change). It runs in the compiler after code generation
(`raptor.compiler._program`); `--pim-disable-mesh-placement` keeps the snake numbering, and an
unplanned compile (`--pim-disable-spatial-planning`: cores in plain order) does not place.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from raptor.arch import Arch
from raptor.arch.timing import link_latency_ns
from raptor.isa.opcodes import Opcode
from raptor.isa.pimdir import PimProgram

MAX_SWEEPS = 100  # a safety stop; the descent ends well before (about 10-20 sweeps measured)


def traffic(prog: PimProgram, bus_width: int) -> tuple[np.ndarray, np.ndarray]:
    """(T, g): flits per inference round from core to core (T[src, dst], send and sync) and from
    each core to the global memory (ld: a one-flit request, st: its bytes), as the NoC model
    counts them (`raptor.sim.transfer.Noc.nflits`)."""
    n = prog.core_cnt
    t = np.zeros((n, n))
    g = np.zeros(n)
    for c, s in enumerate(prog.cores):
        op = s["opcode"]
        size = s["generic3"].astype(np.int64)
        msg = (op == Opcode.SEND) | (op == Opcode.SYNC)
        if msg.any():
            flits = np.where(op[msg] == Opcode.SEND, np.maximum(1, -(-size[msg] // bus_width)), 1)
            np.add.at(t[c], s["r2_or_imm"][msg].astype(np.int64), flits)
        st = op == Opcode.ST
        g[c] = float((op == Opcode.LD).sum()) + float(
            np.maximum(1, -(-size[st] // bus_width)).sum()
        )
    np.fill_diagonal(t, 0.0)
    return t, g


def latencies(arch: Arch, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(L, G): per-flit latency between cores 0..n-1 (zero diagonal) and from each to the global
    memory."""
    gm = arch.noc.global_memory_switch_id
    lat = np.array(
        [[link_latency_ns(arch, i, j) if i != j else 0.0 for j in range(n)] for i in range(n)]
    )
    return lat, np.array([link_latency_ns(arch, i, gm) for i in range(n)])


def placement_cost(
    t: np.ndarray, g: np.ndarray, lat: np.ndarray, glat: np.ndarray, p: np.ndarray
) -> float:
    """The switches' busy time (ns) with core c at position p[c] (module docstring)."""
    return float((t * lat[np.ix_(p, p)]).sum() + (g * glat[p]).sum())


def best_permutation(t: np.ndarray, g: np.ndarray, lat: np.ndarray, glat: np.ndarray) -> np.ndarray:
    """p (core -> position) from the identity by steepest-descent pair swaps (module docstring);
    deterministic."""
    n = len(t)
    w = t + t.T
    p = np.arange(n)
    m = lat.copy()  # m[i, k] = lat[p[i], p[k]]
    for _ in range(MAX_SWEEPS):
        swapped = False
        for a in range(n):
            delta = ((w[a][None, :] - w) * (m - m[a][None, :])).sum(1) + 2.0 * w[a] * m[a]
            delta += (g[a] - g) * (glat[p] - glat[p[a]])
            delta[a] = 0.0  # so the argmin is another core whenever a swap cuts the cost
            b = int(np.argmin(delta))
            if delta[b] >= -1e-6 * max(1.0, abs(float(delta[b]))):
                continue
            p[[a, b]] = p[[b, a]]
            m[[a, b]] = m[[b, a]]
            m[:, [a, b]] = m[:, [b, a]]
            swapped = True
        if not swapped:
            break
    return p


def relabel_program(prog: PimProgram, p: np.ndarray) -> PimProgram:
    """The same program with core c renumbered p[c]: streams, array groups, their weights, the
    core operands of send/recv/sync and the layer spans of config.json."""
    n = prog.core_cnt
    inv = np.empty(n, np.int64)
    inv[p] = np.arange(n)
    cores = []
    for k in range(n):
        s = prog.cores[int(inv[k])].copy()
        named = np.isin(s["opcode"], (Opcode.SEND, Opcode.RECV, Opcode.SYNC))
        s["r2_or_imm"][named] = p[s["r2_or_imm"][named].astype(np.int64)]
        cores.append(s)
    meta = dict(prog.meta)
    spans = meta.get("layer_spans")
    if spans:
        by_core = spans.get("cores", {})
        moved = {f"core{int(p[int(key[4:])])}": v for key, v in by_core.items()}
        meta["layer_spans"] = {
            **spans,
            "cores": dict(sorted(moved.items(), key=lambda kv: int(kv[0][4:]))),
        }
    return replace(
        prog,
        cores=cores,
        array_group_map=[prog.array_group_map[int(inv[k])] for k in range(n)],
        array_group_weights=[prog.array_group_weights[int(inv[k])] for k in range(n)]
        if prog.array_group_weights
        else [],
        meta=meta,
    )


def place_cores(arch: Arch, prog: PimProgram, sg):
    """(program, graph, stats) with the cores renumbered by `best_permutation`; the graph's nodes
    carry their new cores (for the compile report; its token tables were consumed by code
    generation and keep the old numbers). stats: the switches' busy time (`placement_cost`) and
    the mean link latency of a core-to-core flit, before and after (ns)."""
    t, g = traffic(prog, arch.noc.bus_width)
    lat, glat = latencies(arch, prog.core_cnt)
    ident = np.arange(prog.core_cnt)
    p = best_permutation(t, g, lat, glat)
    flits = float(t.sum()) or 1.0

    def per_flit(q: np.ndarray) -> float:
        return float((t * lat[np.ix_(q, q)]).sum()) / flits

    stats = {
        "switch_busy_ns_before": round(placement_cost(t, g, lat, glat, ident), 1),
        "switch_busy_ns": round(placement_cost(t, g, lat, glat, p), 1),
        "flit_latency_ns_before": round(per_flit(ident), 3),
        "flit_latency_ns": round(per_flit(p), 3),
    }
    graph = sg.with_nodes([replace(nd, core=int(p[nd.core])) for nd in sg.nodes])
    return relabel_program(prog, p), graph, stats
