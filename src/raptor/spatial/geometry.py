"""Window geometry shared by tiling, the cost model and lowering: which kernel rows/columns of
each output pixel fall inside the input (padding classes), computed with numpy over all pixels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raptor.spatial.ir import BufferRole, ComputeNode, Layer, LayerKind, SpatialGraph


@dataclass(frozen=True)
class WindowClass:
    """Output pixels whose in-bounds kernel rows are [ilo, ihi) and columns [jlo, jhi)."""

    ilo: int
    ihi: int
    jlo: int
    jhi: int
    pixels: np.ndarray  # output pixel indices
    iy0: np.ndarray  # input row of kernel row 0 per pixel
    ix0: np.ndarray  # input column of kernel column 0 per pixel

    @property
    def count(self) -> int:
        return (self.ihi - self.ilo) * (self.jhi - self.jlo)


def window_classes(layer: Layer, p0: int, p1: int) -> list[WindowClass]:
    """Group output pixels p0..p1 of a windowed layer by padding class."""
    src = layer.inputs[0]
    kh, kw = layer.kernel_shape
    sh, sw = layer.strides
    pt, pl = layer.pads[0], layer.pads[1]
    ow = layer.output.width
    p = np.arange(p0, p1, dtype=np.int64)
    oy, ox = np.divmod(p, ow)
    iy0 = oy * sh - pt
    ix0 = ox * sw - pl
    ilo = np.clip(-iy0, 0, kh)
    ihi = np.clip(src.height - iy0, 0, kh)
    jlo = np.clip(-ix0, 0, kw)
    jhi = np.clip(src.width - ix0, 0, kw)
    key = ((ilo * (kh + 1) + ihi) * (kw + 1) + jlo) * (kw + 1) + jhi
    out = []
    for k in np.unique(key):
        m = key == k
        i = int(np.argmax(m))
        out.append(
            WindowClass(int(ilo[i]), int(ihi[i]), int(jlo[i]), int(jhi[i]), p[m], iy0[m], ix0[m])
        )
    return out


def pool_counts(layer: Layer) -> list[int]:
    """Distinct divisors of an average pool (sorted): the in-bounds count per padding class, or
    kh*kw with count_include_pad."""
    kh, kw = layer.kernel_shape
    if layer.count_include_pad:
        return [kh * kw]
    return sorted({c.count for c in window_classes(layer, 0, layer.out_pixels)})


def lines_geometry(layer: Layer, node: ComputeNode):
    """(kernel rows the node's K range touches, input columns [x0, x1) it reads, padded ring row
    width in pixels) of a line-buffer MVM node."""
    v = layer.inputs[0]
    kh, kw = layer.kernel_shape
    sw, pl, pr = layer.strides[1], layer.pads[1], layer.pads[3]
    ow = layer.output.width
    krow = kw * v.channels
    i0, i1 = node.r0 // krow, (node.r1 - 1) // krow + 1
    if node.p0 // ow == (node.p1 - 1) // ow:
        oxa, oxb = node.p0 % ow, (node.p1 - 1) % ow + 1
    else:
        oxa, oxb = 0, ow
    x0 = max(0, oxa * sw - pl)
    x1 = min(v.width, (oxb - 1) * sw - pl + kw)
    wp = max(v.width + pl + pr, (ow - 1) * sw + kw)
    return i0, i1, x0, x1, wp


def lines_rows(layer: Layer, node: ComputeNode, i0: int, i1: int) -> list[int]:
    """Input rows the node loads (each once), in first-use order."""
    v = layer.inputs[0]
    sh, pt = layer.strides[0], layer.pads[0]
    ow = layer.output.width
    seen: dict[int, None] = {}
    for oy in range(node.p0 // ow, (node.p1 - 1) // ow + 1):
        for i in range(i0, i1):
            iy = oy * sh - pt + i
            if 0 <= iy < v.height:
                seen.setdefault(iy, None)
    return list(seen)


def reads_host_rows(sg: SpatialGraph, layer: Layer) -> bool:
    """A one-row-group weight layer whose window input is a network input in host memory, read
    in rows (the first conv): its replicas can share their halo rows over the NoC
    (raptor.pim.halo), so its pixels may be dealt to them in chunks (planning.choose_chunks)."""
    if layer.kind != LayerKind.GEMM or layer.row_groups != 1 or not layer.inputs:
        return False
    v = layer.inputs[0]
    return v.chw is None and v.height > 1 and sg.buffers[v.buffer].role != BufferRole.ACT
