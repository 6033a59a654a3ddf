"""The Spatial pass protocol and the pass lists `compile_model` runs (raptor.compiler).

Every Spatial pass is a frozen dataclass with a `name` and `apply(arch, sg) -> SpatialGraph`.
`spatial_passes` lists the passes that run once, in order, from the options; `round_passes`
the passes that run again in every round of the NoC demotion loop (the compiler returns NoC edges
to host memory when the message order or the deadlock check fails, then reruns them). A pass an
option disables is absent from the list.
"""

from __future__ import annotations

from typing import Protocol

from raptor.arch import Arch
from raptor.options import CompileOptions
from raptor.spatial.fusion import ResidualFusionPass
from raptor.spatial.ir import SpatialGraph
from raptor.spatial.noc import NocDataflowPass
from raptor.spatial.planning import PlainAssignmentPass, SpatialPlanningPass
from raptor.spatial.sibling import SiblingMergePass
from raptor.spatial.sync import Credits, SynchronizationPass
from raptor.spatial.tiling import TilingPass

# Pipelined throughput: keep each core's layers within 35% of the network's layers
# (merging.pack_balanced). Measured p4 vs no window, arch-a: resnet34 12.7 -> 16.5/s, resnet18
# 27.2 -> 31.7/s, googlenet 22.6 -> 23.9/s, vgg8 150 -> 159/s; arch-b resnet18 25.8 -> 30.7/s.
# A quarter measured better on arch-a but below 1/latency on resnet18 arch-b (22.3/s).
PIPELINE_SPAN_SHARE = 0.35


class SpatialPass(Protocol):
    """One transformation of the Spatial graph."""

    @property
    def name(self) -> str: ...

    def apply(self, arch: Arch, sg: SpatialGraph) -> SpatialGraph: ...


def spatial_passes(opts: CompileOptions) -> list[SpatialPass]:
    """The passes that run once, in order: fusion, sibling merging, tiling, planning (or the
    plain assignment), the NoC dataflow."""
    passes: list[SpatialPass] = [ResidualFusionPass()]
    if not opts.disable_sibling_merge:
        passes.append(SiblingMergePass())
    passes.append(TilingPass(group_tiles=opts.row_group_tiles, pack_pixels=opts.pack_pixels[0]))
    # Both modes plan for the shortest layer steps: with one host buffer per tensor the pipeline
    # period is set by adjacent layers' overlap, and the throughput objective (shave the slowest
    # node) measured worse (vgg8 arch-a p4: 66 vs 115 inferences/s).
    if opts.disable_spatial_planning:
        passes.append(PlainAssignmentPass())
    else:
        share = PIPELINE_SPAN_SHARE if opts.pipeline > 1 else None
        noc = not opts.disable_noc_dataflow
        chunks = noc and not opts.disable_pixel_chunks
        passes.append(SpatialPlanningPass(latency=True, noc=noc, span_share=share, chunks=chunks))
    if not opts.disable_noc_dataflow:
        passes.append(
            NocDataflowPass(segments=opts.row_segments, segment_pixels=opts.row_segment_pixels)
        )
    return passes


def round_passes(opts: CompileOptions) -> list[SpatialPass]:
    """The passes that rerun in every round of the NoC demotion loop: synchronization."""
    if opts.disable_synchronization:
        return []
    return [SynchronizationPass(pipeline=opts.pipeline, credits=Credits.END, bands=True)]
