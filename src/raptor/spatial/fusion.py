"""Residual-add fusion: an Add whose one input is produced by a GEMM layer (no activation, output
read by nothing else) becomes that layer's epilogue. The fused GEMM layer gets the Add's other
input as `inputs[1]` (the residual), the Add's output view and activation; its root row group
loads the residual slice of each pixel, adds it after the bias, applies the activation and stores.
This removes one host write and read of the GEMM output per element (the shared global memory
is the scarcest resource of the chip) and one layer step from the critical path.

The GEMM fused into is the later of the Add's producers in layer order, so the residual is always
produced by an earlier layer (cores run nodes in layer order; synchronization orders the rest).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from raptor.arch import Arch
from raptor.spatial.ir import BufferRole, LayerKind, SpatialGraph, TensorView


def same_view(a: TensorView, b: TensorView) -> bool:
    return (a.buffer, a.channel_offset, a.pixel_stride, a.channels, a.pixels) == (
        b.buffer,
        b.channel_offset,
        b.pixel_stride,
        b.channels,
        b.pixels,
    )


@dataclass(frozen=True)
class ResidualFusionPass:
    name: ClassVar[str] = "residual-add-fusion"

    def apply(self, arch: Arch, sg: SpatialGraph) -> SpatialGraph:
        layers = list(sg.layers)
        readers: dict[str, int] = {}
        for ly in layers:
            for b in {v.buffer for v in ly.inputs}:
                readers[b] = readers.get(b, 0) + 1
        outputs = {b for _, b, _ in sg.outputs}
        producer = {ly.output.buffer: ly for ly in layers}
        drop: set[int] = set()
        fused: dict[int, object] = {}
        for add in layers:
            if add.kind != LayerKind.ADD or len(add.inputs) != 2:
                continue
            best = None
            for k, v in enumerate(add.inputs):
                g = producer.get(v.buffer)
                if (
                    g is None
                    or g.kind != LayerKind.GEMM
                    or g.index in fused
                    or len(g.inputs) != 1
                    or g.activation is not None
                    or not same_view(g.output, v)
                    or not v.contiguous
                    or v.channel_offset != 0
                    or readers.get(v.buffer, 0) != 1
                    or v.buffer in outputs
                    or sg.buffers[v.buffer].role != BufferRole.ACT
                ):
                    continue
                other = add.inputs[1 - k]
                op = producer.get(other.buffer)
                if op is not None and op.index >= g.index:
                    continue
                if best is None or g.index > best[0].index:
                    best = (g, other)
            if best is None:
                continue
            g, other = best
            fused[g.index] = replace(
                g, inputs=(g.inputs[0], other), output=add.output, activation=add.activation
            )
            drop.add(add.index)
        if not fused:
            return sg
        buffers = dict(sg.buffers)
        out_layers = []
        for ly in layers:
            if ly.index in drop:
                continue
            if ly.index in fused:
                del buffers[ly.output.buffer]
                ly = fused[ly.index]  # type: ignore[assignment]
            out_layers.append(replace(ly, index=len(out_layers)))
        out = replace(sg, layers=out_layers, buffers=buffers)
        out.notes = replace(sg.notes, fused_adds=len(drop))
        return out
