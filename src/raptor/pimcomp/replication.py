"""Weight replication (released PIMCOMP `WeightReplication.cpp`): balance, W0H0, uniform.

FC layers always get one replica, and their crossbars are reserved first. Budgets are physical
crossbars of the chip (`arch.total_crossbars`); a conv's cost is the crossbars of one replica.
A conv never gets more replicas than it has output windows.
"""

from __future__ import annotations

import heapq
import math

from raptor.arch import Arch
from raptor.errors import PassFailedError
from raptor.pimcomp.partition import is_fc, layer_crossbars
from raptor.spatial.ir import Layer, LayerKind

MARGIN_FACTOR = 0.5  # balance stops once the remaining budget is <= this share of the initial one
UNIFORM_SLACK = 1.2  # W0H0 and uniform divide the budget by this


def _convs_and_fc(arch: Arch, layers: list[Layer]) -> tuple[dict[int, tuple[int, int]], int]:
    convs, fc = {}, 0
    for ly in layers:
        if ly.kind != LayerKind.GEMM:
            continue
        xb = layer_crossbars(arch, ly)
        if is_fc(ly):
            fc += xb
        else:
            convs[ly.index] = (ly.out_pixels, xb)
    return convs, fc


def balance(
    arch: Arch, layers: list[Layer], margin: float = MARGIN_FACTOR, charge_first: bool = False
) -> dict[int, int]:
    """Max-heap on ceil(windows / r): the conv with the most windows per replica gets one more
    replica, charged against the non-FC budget (the first copy is uncharged, as released, unless
    `charge_first`), until the budget cannot pay for the top conv or falls to `margin` of its
    initial value."""
    convs, fc = _convs_and_fc(arch, layers)
    reps = {i: 1 for ly in layers if ly.kind == LayerKind.GEMM for i in [ly.index]}
    initial = arch.total_crossbars - fc
    if charge_first:
        initial -= sum(xb for _, xb in convs.values())
    budget = initial
    heap = [(-w, i) for i, (w, _) in convs.items()]
    heapq.heapify(heap)
    while heap and budget > margin * initial:
        neg, i = heap[0]
        w, xb = convs[i]
        if budget < xb:
            break
        heapq.heappop(heap)
        if reps[i] >= w:  # one window per replica: cannot split further
            continue
        reps[i] += 1
        budget -= xb
        heapq.heappush(heap, (-math.ceil(w / reps[i]), i))
    return reps


def w0h0(arch: Arch, layers: list[Layer]) -> dict[int, int]:
    """Replicas proportional to ceil(windows / baseline), baseline = the 2nd-smallest distinct
    window count, scaled by floor((total - FC) / sum(ratio * crossbars) / 1.2) (at least 1)."""
    convs, fc = _convs_and_fc(arch, layers)
    reps = {ly.index: 1 for ly in layers if ly.kind == LayerKind.GEMM}
    if not convs:
        return reps
    sizes = sorted({w for w, _ in convs.values()})
    base = sizes[1] if len(sizes) > 1 else sizes[0]
    ratio = {i: math.ceil(w / base) for i, (w, _) in convs.items()}
    need = sum(ratio[i] * xb for i, (_, xb) in convs.items())
    scale = max(1, math.floor((arch.total_crossbars - fc) / need / UNIFORM_SLACK))
    for i, (w, _) in convs.items():
        reps[i] = max(1, min(w, ratio[i] * scale))
    return reps


def uniform(arch: Arch, layers: list[Layer]) -> dict[int, int]:
    """Every conv gets floor((total - FC) / sum(conv crossbars) / 1.2) replicas (at least 1)."""
    convs, fc = _convs_and_fc(arch, layers)
    reps = {ly.index: 1 for ly in layers if ly.kind == LayerKind.GEMM}
    if not convs:
        return reps
    k = math.floor(
        (arch.total_crossbars - fc) / sum(xb for _, xb in convs.values()) / UNIFORM_SLACK
    )
    for i, (w, _) in convs.items():
        reps[i] = max(1, min(w, k))
    return reps


METHODS = {"balance": balance, "W0H0": w0h0, "uniform": uniform}


def replicate(
    arch: Arch, layers: list[Layer], method: str = "balance", charge_first: bool = False
) -> dict[int, int]:
    """Replicas per GEMM layer index; fails if one replica of every layer does not fit.
    `charge_first` (balance only) charges each conv's first copy too: the retry used when the
    released rule over-fills the chip."""
    convs, fc = _convs_and_fc(arch, layers)
    need = fc + sum(xb for _, xb in convs.values())
    if need > arch.total_crossbars:
        raise PassFailedError(
            f"pimcomp: the model needs {need} crossbars at one replica per layer, "
            f"{arch.name} has {arch.total_crossbars}"
        )
    if method == "balance":
        return balance(arch, layers, charge_first=charge_first)
    return METHODS[method](arch, layers)
