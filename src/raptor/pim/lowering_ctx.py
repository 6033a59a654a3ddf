"""What every lowering function reads: the chip, the Spatial graph, host buffer addresses, the
reduction links and the per-tree line-buffer choices."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from raptor.arch import Arch
from raptor.spatial.ir import SpatialGraph


@dataclass
class LowerCtx:
    arch: Arch
    sg: SpatialGraph
    address: dict[str, int]  # host buffer -> byte address
    links: dict[int, tuple[tuple[int, ...], int]] = field(default_factory=dict)  # reduce_links
    line_choice: dict[tuple[int, int, int, int], bool] = field(default_factory=dict)
    line_buffers: bool = True  # False: a line buffer only where the NoC dataflow needs it
    halo: dict = field(default_factory=dict)  # node id -> raptor.pim.halo.HaloNode
    # raptor.pim.halo.halo_areas: node id -> local address of its rows, core -> the area's bytes
    halo_area: dict[int, int] = field(default_factory=dict)
    halo_bytes: dict[int, int] = field(default_factory=dict)
    # core -> constant slice -> local address (raptor.pim.constants.const_area)
    consts: dict[int, dict] = field(default_factory=dict)

    @cached_property
    def bias_nodes(self) -> set[int]:
        """MVM nodes that add their layer's bias (ir.SpatialGraph.bias_nodes)."""
        return self.sg.bias_nodes()

    @property
    def eb(self) -> int:
        return self.arch.element_bytes

    def capacity(self, core: int, with_constants: bool = True) -> int:
        """Local memory a node's scratch may use: below the core's persistent NoC buffers, its
        halo area and (`with_constants`) its constant area."""
        top = self.persist_top(core) - self.halo_bytes.get(core, 0)
        if with_constants and self.consts.get(core):
            top = min(self.consts[core].values())
        return top

    def persist_top(self, core: int) -> int:
        """Where the core's persistent NoC buffers begin (the top of local memory without them)."""
        noc = self.sg.noc
        persist = noc.persist.get(core, 0) if noc is not None else 0
        return self.arch.core.local_memory.memory_size - persist
