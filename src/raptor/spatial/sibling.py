"""Sibling-GEMM merging: GEMM layers that read the same input view with the same window geometry
(kernel, strides, pads, activation) become one layer whose weight is the siblings' weights side
by side (concatenated output columns). The input is then loaded from host memory once instead of
once per sibling (googlenet: the 3x3- and 5x5-reduce 1x1 convs of every inception block read the
block input; the shared global memory is the chip's scarcest resource).

The merged layer writes one buffer of pixel stride N1 + N2 + ...; each sibling's consumers read a
strided view of it (channel offset of that sibling's columns, same pixel stride), so no data moves.
Only siblings whose output is a whole buffer of their own (not a concat slot, not a graph output)
and whose readers all use that whole view (no flattened or TENSOR readers) take part. The merged
layer takes the place of the first sibling, which precedes every consumer of every sibling.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from raptor.arch import Arch
from raptor.spatial.fusion import same_view
from raptor.spatial.ir import Buffer, BufferRole, LayerKind, SpatialGraph, TensorView


@dataclass(frozen=True)
class SiblingMergePass:
    name: ClassVar[str] = "sibling-gemm-merge"

    def apply(self, arch: Arch, sg: SpatialGraph) -> SpatialGraph:
        layers = list(sg.layers)
        outputs = {b for _, b, _ in sg.outputs}
        writers: dict[str, int] = {}
        for ly in layers:
            writers[ly.output.buffer] = writers.get(ly.output.buffer, 0) + 1
        readers: dict[str, list] = {}
        for ly in layers:
            for v in ly.inputs:
                readers.setdefault(v.buffer, []).append((ly, v))

        def eligible(ly) -> bool:
            o = ly.output
            if (
                ly.kind != LayerKind.GEMM
                or len(ly.inputs) != 1
                or ly.row_groups != 1
                or ly.scratch is not None
                or ly.bias is None
                or o.channel_offset != 0
                or not o.contiguous
                or o.chw is not None
                or o.buffer in outputs
                or writers.get(o.buffer) != 1
                or sg.buffers[o.buffer].role != BufferRole.ACT
                or not readers.get(o.buffer)
            ):
                return False
            return all(
                r.kind != LayerKind.TENSOR and same_view(v, o) and v.chw is None
                for r, v in readers[o.buffer]
            )

        groups: dict[tuple, list] = {}
        for ly in layers:
            if not eligible(ly):
                continue
            v = ly.inputs[0]
            key = (
                v.buffer,
                v.channel_offset,
                v.pixel_stride,
                v.channels,
                v.height,
                v.width,
                v.chw,
                ly.kernel_shape,
                ly.strides,
                ly.pads,
                ly.activation,
                ly.output.height,
                ly.output.width,
            )
            groups.setdefault(key, []).append(ly)

        merged: dict[int, object] = {}  # first sibling index -> merged layer
        drop: set[int] = set()
        remap: dict[str, TensorView] = {}  # old output buffer -> view into the merged buffer
        buffers = dict(sg.buffers)
        consts = dict(sg.const_values)
        eb = None
        count = 0
        for sibs in groups.values():
            if len(sibs) < 2:
                continue
            first = sibs[0]
            o = first.output
            if eb is None:
                eb = sg.buffers[o.buffer].size_bytes // (o.channels * o.pixels)
            total = sum(s.cols for s in sibs)
            name = "+".join(s.name for s in sibs)
            buf = f"{name}.out"
            buffers[buf] = Buffer(buf, total * o.pixels * eb, BufferRole.ACT)
            bias = np.concatenate([s.bias for s in sibs]).astype(np.float32)
            bname = f"{name}.bias"
            buffers[bname] = Buffer(bname, total * eb, BufferRole.CONST)
            consts[bname] = bias
            off = 0
            for s in sibs:
                remap[s.output.buffer] = TensorView(
                    buf, s.cols, s.output.height, s.output.width, off, total
                )
                off += s.cols
                del buffers[s.output.buffer]
                if s.bias_buffer:
                    buffers.pop(s.bias_buffer, None)
                    consts.pop(s.bias_buffer, None)
                drop.add(s.index)
            merged[first.index] = replace(
                first,
                name=name,
                weight=np.ascontiguousarray(np.hstack([s.weight for s in sibs])),
                bias=bias,
                bias_buffer=bname,
                output=TensorView(buf, total, o.height, o.width, 0, total),
            )
            count += len(sibs)
        if not merged:
            return sg
        out_layers = []
        for ly in layers:
            if ly.index in merged:
                ly = merged[ly.index]  # type: ignore[assignment]
            elif ly.index in drop:
                continue
            ins = tuple(remap.get(v.buffer, v) for v in ly.inputs)
            out_layers.append(replace(ly, index=len(out_layers), inputs=ins))
        out = replace(sg, layers=out_layers, buffers=buffers, const_values=consts)
        out.notes = replace(sg.notes, merged_siblings=count)
        return out
