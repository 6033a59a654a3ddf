"""Merging compute nodes into cores under each core's crossbar budget.

`pack_balanced`: nodes by decreasing crossbars, then decreasing estimated time, each to the
least-loaded core that still has the crossbars it needs. `pack_plain` is the unplanned baseline:
nodes in program order, first fit by crossbars (vector nodes stay on the current core).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from raptor.arch import Arch
from raptor.errors import PassFailedError
from raptor.spatial.ir import ComputeNode


def _no_room(arch: Arch, node: ComputeNode, used: np.ndarray) -> PassFailedError:
    return PassFailedError(
        f"node {node.id} (layer {node.layer}) needs {node.crossbars} crossbars; no core of {arch.name} has "
        f"room left ({int(used.sum())} of {arch.total_crossbars} crossbars in use)"
    )


def pack_balanced(
    arch: Arch, nodes: list[ComputeNode], times: np.ndarray
) -> tuple[list[ComputeNode], np.ndarray]:
    """Balanced packing; returns the placed nodes (input order) and the estimated load per core (ns)."""
    cores, cap = arch.core_count, arch.crossbars_per_core
    load = np.zeros(cores)
    used = np.zeros(cores, dtype=np.int64)
    placed: list[ComputeNode | None] = [None] * len(nodes)
    # big crossbar users first (bin-packing feasibility), then by time (load balance)
    order = np.lexsort((-times, -np.array([n.crossbars for n in nodes])))
    for k in order:
        n = nodes[k]
        ok = used + n.crossbars <= cap
        if not ok.any():
            raise _no_room(arch, n, used)
        c = int(np.argmin(np.where(ok, load, np.inf)))
        load[c] += times[k]
        used[c] += n.crossbars
        placed[k] = replace(n, core=c)
    return placed, load  # type: ignore[return-value]


def pack_plain(arch: Arch, nodes: list[ComputeNode]) -> list[ComputeNode]:
    """First fit in node order: move to the next core when the crossbars run out."""
    cap = arch.crossbars_per_core
    core, used = 0, 0
    out = []
    for n in nodes:
        if used + n.crossbars > cap:
            core, used = core + 1, 0
        if core >= arch.core_count:
            raise _no_room(arch, n, np.full(arch.core_count, cap))
        used += n.crossbars
        out.append(replace(n, core=core))
    return out
