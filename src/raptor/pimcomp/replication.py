"""Weight replication (released PIMCOMP `WeightReplication.cpp`): balance, W0H0, uniform.

FC layers (the graph's Gemm nodes, `fc_layers`) always get one replica, and their crossbars are
reserved first; a conv is a conv even with a single output window. Budgets are physical
crossbars of the chip (`arch.total_crossbars`), which equal the released code's logical ones
when its crossbar is as wide as ours in weights; a conv's cost is the crossbars of one replica.
A conv never gets more replicas than it has output windows (capped after the method, as the
released partition does). Checked against the released binary: tests/pimcomp/test_released.py.
"""

from __future__ import annotations

import math

import numpy as np

from raptor.arch import Arch
from raptor.errors import PassFailedError
from raptor.pimcomp.partition import is_fc, layer_crossbars
from raptor.spatial.ir import Layer, LayerKind

MARGIN_FACTOR = 0.5  # balance stops once the remaining budget is <= this share of the initial one
# W0H0 and uniform divide the budget by this: the released code's `float` 1.2, i.e. 1.2 rounded
# to single precision and then used in double arithmetic
UNIFORM_SLACK = float(np.float32(1.2))


def _convs_and_fc(
    arch: Arch, layers: list[Layer], fc_layers: set[int] | None = None
) -> tuple[dict[int, tuple[int, int]], int]:
    """Conv layer index -> (windows, crossbars of one replica), and the FC crossbars. FC layers
    are `fc_layers` (indices of Gemm nodes) or, when not given, GEMM layers of one pixel."""
    convs, fc = {}, 0
    for ly in layers:
        if ly.kind != LayerKind.GEMM:
            continue
        xb = layer_crossbars(arch, ly)
        if is_fc(ly) if fc_layers is None else ly.index in fc_layers:
            fc += xb
        else:
            convs[ly.index] = (ly.out_pixels, xb)
    return convs, fc


class _StdMaxHeap:
    """A max-heap that pops equal keys in the order libstdc++'s `std::priority_queue` does
    (push_heap / pop_heap with __adjust_heap), so that ties between layers with the same
    windows per replica go where the released code sends them."""

    def __init__(self) -> None:
        self.h: list[tuple[int, int]] = []  # (key, layer index); only the key is compared

    def _up(self, hole: int, top: int, v: tuple[int, int]) -> None:
        h = self.h
        parent = (hole - 1) // 2
        while hole > top and h[parent][0] < v[0]:
            h[hole] = h[parent]
            hole, parent = parent, (parent - 1) // 2
        h[hole] = v

    def push(self, v: tuple[int, int]) -> None:
        self.h.append(v)
        self._up(len(self.h) - 1, 0, v)

    def top(self) -> tuple[int, int]:
        return self.h[0]

    def pop(self) -> tuple[int, int]:
        h = self.h
        out, v = h[0], h.pop()
        n = len(h)
        if n:
            hole = second = 0
            while second < (n - 1) // 2:
                second = 2 * (second + 1)
                if h[second][0] < h[second - 1][0]:
                    second -= 1
                h[hole] = h[second]
                hole = second
            if n % 2 == 0 and second == (n - 2) // 2:
                second = 2 * (second + 1)
                h[hole] = h[second - 1]
                hole = second - 1
            self._up(hole, 0, v)
        return out

    def __len__(self) -> int:
        return len(self.h)


def balance(
    arch: Arch,
    layers: list[Layer],
    margin: float = MARGIN_FACTOR,
    charge_first: bool = False,
    fc_layers: set[int] | None = None,
) -> dict[int, int]:
    """Max-heap on ceil(windows / r): while the budget is above both the top conv's crossbars
    and `margin` of its initial value (int-truncated), the top conv gets one more replica,
    charged against the non-FC budget (the first copy is uncharged, as released, unless
    `charge_first`). As released, a conv already at one window per replica stays in the heap
    and keeps being charged; replicas are capped at the windows afterwards."""
    convs, fc = _convs_and_fc(arch, layers, fc_layers)
    reps = {i: 1 for ly in layers if ly.kind == LayerKind.GEMM for i in [ly.index]}
    budget = arch.total_crossbars - fc
    if charge_first:
        budget -= sum(xb for _, xb in convs.values())
    floor_ = int(budget * margin)
    heap = _StdMaxHeap()
    for i, (w, _) in convs.items():
        heap.push((w, i))
    while heap and budget > convs[heap.top()[1]][1] and budget > floor_:
        _, i = heap.pop()
        w, xb = convs[i]
        reps[i] += 1
        heap.push((math.ceil(w / reps[i]), i))
        budget -= xb
    return {i: min(r, convs[i][0]) if i in convs else r for i, r in reps.items()}


def w0h0(arch: Arch, layers: list[Layer], fc_layers: set[int] | None = None) -> dict[int, int]:
    """Replicas proportional to ceil(windows / baseline), baseline = the 2nd-smallest distinct
    window count, scaled by floor((total - FC) / sum(ratio * crossbars) / 1.2) (at least 1)."""
    convs, fc = _convs_and_fc(arch, layers, fc_layers)
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


def uniform(arch: Arch, layers: list[Layer], fc_layers: set[int] | None = None) -> dict[int, int]:
    """Every conv gets floor((total - FC) / sum(conv crossbars) / 1.2) replicas (at least 1)."""
    convs, fc = _convs_and_fc(arch, layers, fc_layers)
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
    arch: Arch,
    layers: list[Layer],
    method: str = "balance",
    charge_first: bool = False,
    fc_layers: set[int] | None = None,
) -> dict[int, int]:
    """Replicas per GEMM layer index; fails if one replica of every layer does not fit.
    `charge_first` (balance only) charges each conv's first copy too: the retry used when the
    released rule over-fills the chip. `fc_layers`: the indices of Gemm (FC) layers."""
    convs, fc = _convs_and_fc(arch, layers, fc_layers)
    need = fc + sum(xb for _, xb in convs.values())
    if need > arch.total_crossbars:
        raise PassFailedError(
            f"pimcomp: the model needs {need} crossbars at one replica per layer, "
            f"{arch.name} has {arch.total_crossbars}"
        )
    if method == "balance":
        return balance(arch, layers, charge_first=charge_first, fc_layers=fc_layers)
    return METHODS[method](arch, layers, fc_layers=fc_layers)
