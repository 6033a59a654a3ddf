"""Core mapping without GA (released PIMCOMP `HierarchyMapping.cpp`, `MapBaseline2`).

AGs are taken in node, replica, AG order; each goes to the first core (index order) with enough
free crossbars. Afterwards each core's AG list is sorted so that AGs of one replica are
contiguous and increasing.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from raptor.arch import Arch
from raptor.errors import PassFailedError
from raptor.pimcomp.partition import ArrayGroup


def first_fit(arch: Arch, ags: list[ArrayGroup]) -> list[ArrayGroup]:
    """Place every AG; returns them with `core` set (same order)."""
    free = np.full(arch.core_count, arch.crossbars_per_core, dtype=np.int64)
    out = []
    for ag in ags:
        fits = np.flatnonzero(free >= ag.crossbars)
        if not len(fits):
            raise PassFailedError(
                f"pimcomp first-fit: AG {ag.index} of replica {ag.replica} of layer {ag.layer} needs "
                f"{ag.crossbars} crossbars, no core of {arch.name} has that many free "
                f"({int(free.sum())} of {arch.total_crossbars} free in all)"
            )
        c = int(fits[0])
        free[c] -= ag.crossbars
        out.append(replace(ag, core=c))
    return out


def core_lists(ags: list[ArrayGroup], core_count: int) -> list[list[ArrayGroup]]:
    """Per-core AG lists sorted by (layer, replica, part, AG index)."""
    out: list[list[ArrayGroup]] = [[] for _ in range(core_count)]
    for ag in ags:
        out[ag.core].append(ag)
    for lst in out:
        lst.sort(key=lambda a: (a.layer, a.replica, a.part, a.index))
    return out
