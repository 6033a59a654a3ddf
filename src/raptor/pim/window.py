"""Input windows of MVM nodes in host memory, shared by Raptor's lowering and pimcomp: the
in-bounds segments of a padding class and the runs a window must zero."""

from __future__ import annotations

import numpy as np

from raptor.spatial.geometry import WindowClass
from raptor.spatial.ir import Layer


def window_segments(
    layer: Layer, cls: WindowClass, lo: int, hi: int
) -> list[tuple[int, int, np.ndarray]]:
    """(window element start, length, host element offset per lane) of the in-bounds input of a
    padding class, clipped to window elements [lo, hi)."""
    v = layer.inputs[0]
    kw = layer.kernel_shape[1]
    c = v.channels
    out = []
    for i in range(cls.ilo, cls.ihi):
        row = (cls.iy0 + i) * v.width + cls.ix0
        if v.contiguous:
            parts = [(cls.jlo, cls.jhi)]
        else:
            parts = [(j, j + 1) for j in range(cls.jlo, cls.jhi)]
        for j0, j1 in parts:
            s, e = (i * kw + j0) * c, (i * kw + j1) * c
            s2, e2 = max(s, lo), min(e, hi)
            if e2 > s2:
                out.append((s2, e2 - s2, v.channel_offset + (row + j0) * v.pixel_stride + (s2 - s)))
    return out


def zero_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) runs of False in mask."""
    m = np.concatenate([[True], mask, [True]])
    d = np.diff(m.astype(np.int8))
    starts = np.flatnonzero(d == -1)
    ends = np.flatnonzero(d == 1)
    return [(int(s), int(e - s)) for s, e in zip(starts, ends)]


def window_padding(
    layer: Layer, cls: WindowClass, lo: int, hi: int
) -> tuple[list[tuple[int, int, np.ndarray]], list[tuple[int, int]]]:
    """The in-bounds segments of a padding class clipped to window elements [lo, hi)
    (`window_segments`) and the (start, length) runs, relative to lo, that none of them covers:
    the padding a window of elements lo..hi must zero."""
    segs = window_segments(layer, cls, lo, hi)
    covered = np.zeros(hi - lo, bool)
    for s, n, _ in segs:
        covered[s - lo : s - lo + n] = True
    return segs, zero_runs(covered)
