"""Compile options shared by the Raptor and pimcomp compilers."""

from __future__ import annotations

from dataclasses import dataclass

# NoC row segments per output row (spatial/noc.py, `raptor compile --pim-row-segments`). Measured
# on the 16 default cases (raptor-only suite): 4 -> 8 segments cut latency 5.4 % and raised
# throughput 4.7 % (geometric means; resnet18/34 up to 11.5 % / 13 %, vgg8 arch-a p4 4.1 % lower
# throughput) for 3-4 % more instructions; 16 and 32 gain another 1-2 % but double compile time.
ROW_SEGMENTS = 8
# The fewest pixels of a row segment (`--pim-row-segment-pixels`). 1 since stop 42: the 7- and
# 14-pixel rows of resnet's layer3/4 and googlenet's inception 4/5 stream in 7 and 8 segments
# instead of 3 and 7; measured with the mesh placement against 2 (benchmarks/run.py, 16 default
# cases): latency -0.5 to -9.9 % on all 8 latency cases (geometric mean 0.955), throughput p4
# -0.3 to +5.4 %; 4 measured +4.9 % latency. A layer with packed remainder tiles then often runs
# packs of one pixel (a pack never spans two steps); keeping its segments at whole packs measured
# 0.969 instead of 0.955 (googlenet -2.0 / -3.1 % instead of -6.0 / -9.9 %), and not packing the
# layers whose rows are too narrow for 8 segments of two pixels 0.969 (googlenet p4 -4 to -7.5 %).
ROW_SEGMENT_PIXELS = 1
# A latency compile programs the plan of the shortest estimated schedule and up to FINALISTS - 1
# runners-up whose estimates end within FINALIST_MARGIN of it, and keeps the one the simulator
# (the machine model every reported figure comes from) runs fastest (raptor.compiler). The
# message-order estimate leaves out the global-memory queue, so a plan that spills to host memory
# looks better than it runs: resnet18 arch-b, estimates 11.60 vs 11.89 ms, simulated 14.59 vs
# 13.71 ms. Measured on the 8 default latency cases: 4 of them have a runner-up within 5 %; the
# second finalist simulates faster on resnet18 arch-b, the third on resnet34 arch-b (30.16 ->
# 29.90 ms); 6 finalists within 10 % found nothing more, nor did 5 within 15 % (stop 43).
FINALISTS = 3
FINALIST_MARGIN = 0.05
# Chunks per replica tried for the layer that reads the network input from host memory (the
# first conv, planning.choose_chunks), one plan variant each in a planned latency compile
# (raptor.compiler._search; `--pim-host-chunks`): its replicas share their halo rows over the NoC
# either way (raptor.pim.halo), and in 2 chunks its first output rows come after half its work.
# Measured on the 8 default latency cases (raptor-only suite) with both variants: resnet18 arch-a
# 8.189 -> 7.761 ms, resnet34 -3.2 / -4.0 % (arch-a / arch-b), vgg8 -3.1 / -2.2 %, googlenet
# arch-a -0.9 %, googlenet arch-b the same plan, resnet18 arch-b +0.2 % (the estimate's choice);
# 2 chunks alone: googlenet arch-b +6.6 %; 3 or 4 chunks: resnet18 arch-a 8.012 / 8.228 ms, vgg8
# arch-b 1.818 / 1.856 ms. Throughput compiles keep one chunk (a pipelined program's halo
# exchange runs with one of the layer's nodes per core, raptor.pim.halo).
HOST_CHUNKS_LATENCY = (1, 2)

# Row tiles per row group of a GEMM layer in a planned latency compile (spatial/tiling.py,
# `raptor compile --pim-row-group-tiles`; 0: as many as fit one core, the throughput default).
# A replica's row groups run on different cores, so smaller groups spread a layer's mvmuls over
# more cores for the same crossbars. Measured on the 8 default latency cases (raptor-only suite,
# geometric mean of latency against as many as fit): 2 tiles 0.953, 3 tiles 0.856 (resnet34
# arch-a 40.3 -> 27.9 ms), 4 tiles 0.890, 5 tiles 0.892; in throughput pipeline 4, 3 tiles cut
# throughput by 16 % (more nodes a core serialises per input), so throughput keeps 0.
ROW_GROUP_TILES_LATENCY = 3

# Row-group sizes a planned latency compile tries for the weight layers of at most
# SMALL_LAYER_PIXELS output pixels (0: ROW_GROUP_TILES_LATENCY like the others), one candidate
# plan search each (raptor.compiler._plan); the estimate and the finalists choose. Such a layer
# has few pixels to pipeline and one replica of many tiles (resnet layer4: 36 tiles, 49
# pixels), so its nodes' time is its tiles' mvmuls and partial sums per pixel, and two-tile
# groups spread them over half again as many cores. Measured on the 8 default latency cases
# (raptor-only suite), the 2-tile plan alone: resnet18 arch-b 13.14 -> 11.69 ms, resnet34 arch-b
# 29.89 -> 27.01, googlenet arch-a 12.01 -> 11.90, vgg8 arch-a 2.47 -> 2.45, but resnet18
# arch-a +0.8 %, resnet34 arch-a +3.0 %, googlenet arch-b +4.7 %; 1-tile groups and a limit of
# 64 or 196 pixels measured worse (vgg8 arch-a 3.16 ms with 64). Since a tree's root adds one
# partial sum (ir.reduce_children), 1-tile groups (36 for a resnet layer4 conv) make a third
# candidate tiling: vgg8 arch-b 2.185 -> 1.884 ms, resnet34 arch-a 22.93 -> 21.31 ms, the other
# six latency programs unchanged, compiles with such layers 1.3-1.5x longer; instead of the
# 2-tile one they measured worse (resnet18 arch-a +18 %).
SMALL_LAYER_PIXELS = 49
SMALL_LAYER_GROUP_TILES_LATENCY = (0, 2, 1)

# Pixels one mvmul of a weight layer's short last row tile may serve (spatial/tiling.py
# pack_factor, `raptor compile --pim-pack-pixels`; 1: one mvmul per pixel and row tile): the
# tile's weights held k times block-diagonally, k = min(this, crossbar rows // the tile's rows),
# so k pixels' remainders (conv1's 19 of 147 rows, a 576-row conv's 64) share one mvmul. It
# trades crossbars (k copies of the tile's) for mvmuls. Measured on the 8 default latency cases
# (raptor-only suite, geometric mean of latency against no packing): 2 pixels 0.958 (resnet18
# arch-a 11.89 -> 10.89 ms, googlenet arch-b 13.14 -> 11.84; vgg8 arch-a +4.1 %), 3 pixels 0.991
# (resnet34 arch-a +8 %), 6 pixels 1.010 (conv1's replicas take 28 instead of 8 crossbars: 82 ->
# 53 of them on resnet18 arch-a), 2 pixels only for remainders of at most 32 rows 0.999, 6 only
# for those of at most 42 rows 1.021. Throughput pipeline 4 with 2 pixels: +0.7 to +18 %
# (googlenet arch-b 66.3 -> 78.4/s), resnet34 arch-b unchanged. Crossbar (matrix) energy rises
# 0-1.2 %: a step of an odd number of pixels ends with a pack of one. (Measured with a lane cost
# that saw the packed tile only in a layer's first row group; with it fixed, 2 pixels measure
# 0.964: README "Packed remainder tiles".)
PACK_PIXELS = 2
# Pack sizes a planned compile tries, one candidate plan search each (raptor.compiler._plan; the
# first is the base, each other one plans every replication again with the base's choice of
# chunks and is kept when its plan ends strictly first, in throughput mode also with a shorter
# core span). Throughput pipeline 4, (2, 3) against (2,): resnet18 arch-a 81.8 -> 91.7/s,
# resnet34 arch-b 30.3 -> 33.8/s, the other six unchanged (resnet18 arch-b's 3-pixel plan, 75.2/s
# alone, estimated no shorter), throughput compiles 1.4-1.8x as long (3-8 s). Latency keeps one
# size: per case the best of 1, 2 and 3 pixels is 2 on 7 of the 8 latency cases (vgg8 arch-a: 1),
# and a second size would double the planning of every latency compile.
PACK_PIXELS_LATENCY = (PACK_PIXELS,)
PACK_PIXELS_THROUGHPUT = (PACK_PIXELS, 3)

# Shares of the chip's crossbars the replication of a planned latency compile may buy: the
# compiler plans once per share and keeps the plan whose message order ends first
# (raptor.compiler._plan). Replicas bought with every crossbar fill the cores, so layers that
# compute at the same time share cores and run one after another there; a plan with fewer
# replicas of the middle layers can end sooner. Measured on the 8 default latency cases, against
# 1.0 alone (geometric mean of latency): (1.0, 0.9) 0.951, (1.0, 0.9, 0.85) 0.915, adding 0.95
# 0.909 for a third more planning; the estimate picked the fastest simulated plan of every case.
CROSSBAR_SHARES_LATENCY = (1.0, 0.9, 0.85)

# Shares after which a planned compile (both modes) also plans once with the rest of the crossbars
# buying replicas of the slowest layer (spatial/planning.py choose_replication, `fill_scale`), kept
# likewise when its message order ends first (in throughput mode, a repacked one also needs a
# shorter core span). The time cut per crossbar that replication buys by models layers that run
# one after another; chunks pipeline them, so a slow late layer (googlenet's inception branches)
# can hold the others up. Measured on the 8 default latency cases: googlenet 15.1 -> 12.8 ms
# (arch-a) and 15.0 -> 14.0 ms (arch-b); resnet34 arch-b takes it too, misranked by the estimate
# (29.9 -> 30.2 ms); the other five plan longer with it. Filling after 0.9 and 1 as well won
# nowhere more and misranked resnet34 arch-b at 0.9 instead. Throughput pipeline 4: googlenet
# 57.3 -> 76.7 and 56.2 -> 65.1 inferences/s, vgg8 arch-a 363 -> 384, resnet18 arch-a 71.5 ->
# 74.9, vgg8 arch-b 336 -> 333 (misranked), the other three unchanged.
FILL_SHARES = (0.85,)

# A planned compile (the latency objective, which both modes plan with: spatial/passes.py) splits
# a vector layer (a pool) into pixel ranges until each node takes at most 1 / VECTOR_SPLIT of the
# slowest GEMM node's time (spatial/planning.py choose_replication; the global-memory floor would
# leave it on one core). Its nodes hold contiguous ranges, so the node of the last rows does all
# its work after its producer's last rows. Measured arch-a: 1/4 vs 1/1 resnet18 38.7 -> 37.6 ms,
# vgg8 6.82 -> 6.66, googlenet 44.9 -> 44.8 (host-memory dataflow).
VECTOR_SPLIT = 4

# Finer vector splits a planned latency compile with the NoC dataflow also plans, each once with
# the replication of the plan that won (its crossbar share and fill) and that plan's kind of
# chunks: vector layers split until each node takes at most 1 / N of the slowest GEMM node's time
# instead of 1 / VECTOR_SPLIT, kept when its message order ends first: the shorter the last
# node's range, the shorter the tail after its producer (vgg8 arch-a: pool2 in 4 nodes ended
# 231 us after conv1, in 32 nodes 22 us after; pool5 63 -> 4 us after conv4). A split whose NoC
# plan returns more consumer units to host memory than the winner's (their line buffers do not
# fit local memory) is not planned: googlenet arch-a at 1/16, 175 units demoted, took 23.2 ms
# against an estimate of 8.9. Measured on the 8 default latency cases against none (geometric
# mean of latency): (32,) 0.975 (vgg8 arch-a 2.202 -> 1.880 ms, arch-b 1.877 -> 1.799, the other
# six kept their plans); (8, 16, 32) 0.979 (resnet18 arch-a took 1/16 on a better estimate,
# +2.6 %); 1/64 alone, vgg8 1.977 / 1.797 ms. Every vector layer at 1/16 without the guard or
# the comparison: 1.143 (googlenet 2.2x / 1.4x the time).
VECTOR_SPLITS_LATENCY = (32,)


@dataclass(frozen=True)
class CompileOptions:
    """What `raptor compile` accepts. `mode` latency runs one input; throughput streams
    `pipeline` inputs through the chip (the program restarts once per input)."""

    mode: str = "latency"
    pipeline: int = 1
    disable_synchronization: bool = False
    disable_spatial_planning: bool = False
    disable_noc_dataflow: bool = False  # Raptor: every activation through host memory
    disable_sibling_merge: bool = False  # Raptor: no sibling-GEMM merging (spatial/sibling.py)
    disable_line_buffer: bool = False  # Raptor: line buffers only where the NoC dataflow needs them
    disable_pixel_chunks: bool = False  # Raptor: one contiguous pixel range per replica
    # Raptor: pixel chunks only as near-equal pixel ranges, never whole output rows
    # (spatial/planning.py choose_row_chunks)
    disable_row_chunks: bool = False
    # Raptor: pack cores by total load only (no repacking by windows or layer-order delays)
    disable_window_packing: bool = False
    # Raptor: keep the planner's snake numbering of the cores (no traffic placement, pim/placement.py)
    disable_mesh_placement: bool = False
    row_segments: int = ROW_SEGMENTS  # Raptor: NoC row segments per output row
    row_segment_pixels: int = ROW_SEGMENT_PIXELS  # Raptor: the fewest pixels of a row segment
    # Raptor: row tiles per row group (0: as many as fit one core); None: ROW_GROUP_TILES_LATENCY
    # for a planned latency compile by Raptor, else 0
    row_group_tiles: int | None = None
    # Raptor: row-group sizes tried for layers of at most SMALL_LAYER_PIXELS output pixels, one
    # candidate plan search each (0: row_group_tiles); None: SMALL_LAYER_GROUP_TILES_LATENCY for
    # a planned latency compile with the NoC dataflow, else (0,)
    small_layer_group_tiles: tuple[int, ...] | None = None
    # Raptor: pixels one mvmul of a short last row tile may serve (1: no packing), one candidate
    # plan search each (an int: that one); None: PACK_PIXELS_LATENCY or PACK_PIXELS_THROUGHPUT for
    # a planned compile with the NoC dataflow, PACK_PIXELS without planning, else (1,)
    pack_pixels: tuple[int, ...] | int | None = None
    # Raptor: shares of the crossbars replication may buy, one candidate plan each, the first
    # winning ties; None: CROSSBAR_SHARES_LATENCY in latency mode, (1.0,) in throughput mode
    crossbar_shares: tuple[float, ...] | None = None
    # Raptor: shares after which the rest of the crossbars buys replicas of the slowest layer, one
    # more candidate plan each; None: FILL_SHARES
    fill_shares: tuple[float, ...] | None = None
    # Raptor: finer vector splits, one more candidate plan each (VECTOR_SPLITS_LATENCY); None:
    # VECTOR_SPLITS_LATENCY for a planned latency compile with the NoC dataflow, else none
    vector_splits: tuple[int, ...] | None = None
    # Raptor: chunks per replica of the layer reading the network input from host memory, one plan
    # variant each; None: HOST_CHUNKS_LATENCY for a planned latency compile with the NoC dataflow
    # and pixel chunks, else (1,)
    host_chunks: tuple[int, ...] | None = None
    # Raptor, latency mode: plans programmed and simulated, the estimate's best and runners-up
    # within FINALIST_MARGIN of it; the fastest is kept (1: the estimate's choice)
    finalists: int = FINALISTS
    compiler: str = "raptor"
    replication: str = "balance"  # pimcomp only: balance | W0H0 | uniform

    @property
    def places_cores(self) -> bool:
        """Raptor renumbers the compiled program's cores by traffic (raptor.pim.placement):
        planned compiles, unless --pim-disable-mesh-placement."""
        return not (self.disable_spatial_planning or self.disable_mesh_placement)

    def __post_init__(self) -> None:
        from raptor.errors import RaptorError

        if self.mode not in ("latency", "throughput"):
            raise RaptorError(f"unknown mode {self.mode!r} (latency or throughput)")
        if self.pipeline < 1:
            raise RaptorError(f"pipeline must be >= 1, got {self.pipeline}")
        if self.mode == "latency" and self.pipeline != 1:
            raise RaptorError("latency mode is pipeline 1; use --mode throughput for --pipeline N")
        if self.row_segments < 1:
            raise RaptorError(f"row segments must be >= 1, got {self.row_segments}")
        if self.row_segment_pixels < 1:
            raise RaptorError(f"row segment pixels must be >= 1, got {self.row_segment_pixels}")
        if self.finalists < 1:
            raise RaptorError(f"finalists must be >= 1, got {self.finalists}")
        if self.row_group_tiles is None:
            planned = self.compiler == "raptor" and not self.disable_spatial_planning
            tiles = ROW_GROUP_TILES_LATENCY if self.mode == "latency" and planned else 0
            object.__setattr__(self, "row_group_tiles", tiles)
        if self.row_group_tiles < 0:
            raise RaptorError(
                f"row group tiles must be >= 0 (0: as many as fit one core), got {self.row_group_tiles}"
            )
        if self.small_layer_group_tiles is None:
            planned = self.compiler == "raptor" and not self.disable_spatial_planning
            noc = planned and not self.disable_noc_dataflow and self.mode == "latency"
            tiles = SMALL_LAYER_GROUP_TILES_LATENCY if noc else (0,)
            object.__setattr__(self, "small_layer_group_tiles", tiles)
        small = tuple(int(t) for t in self.small_layer_group_tiles)
        object.__setattr__(self, "small_layer_group_tiles", small)
        if not small or any(t < 0 for t in small) or len(set(small)) < len(small):
            raise RaptorError(
                "small-layer group tiles must be distinct numbers >= 0 (0: as other layers), "
                f"got {list(small)}"
            )
        if self.pack_pixels is None:
            noc = self.compiler == "raptor" and not self.disable_noc_dataflow
            planned = noc and not self.disable_spatial_planning
            both = PACK_PIXELS_LATENCY if self.mode == "latency" else PACK_PIXELS_THROUGHPUT
            packs = both if planned else (PACK_PIXELS,) if noc else (1,)
            object.__setattr__(self, "pack_pixels", packs)
        packs = self.pack_pixels
        packs = (packs,) if isinstance(packs, int) else tuple(int(k) for k in packs)
        object.__setattr__(self, "pack_pixels", packs)
        if not packs or any(k < 1 for k in packs) or len(set(packs)) < len(packs):
            raise RaptorError(
                f"pack pixels must be distinct numbers >= 1 (1: no packing), got {list(packs)}"
            )
        crossbar = CROSSBAR_SHARES_LATENCY if self.mode == "latency" else (1.0,)
        self._set_shares("crossbar", crossbar, empty_ok=False)
        self._set_shares("fill", FILL_SHARES, empty_ok=True)
        if self.vector_splits is None:
            planned = self.compiler == "raptor" and not self.disable_spatial_planning
            noc = planned and not self.disable_noc_dataflow and self.mode == "latency"
            object.__setattr__(self, "vector_splits", VECTOR_SPLITS_LATENCY if noc else ())
        splits = tuple(int(k) for k in self.vector_splits)
        object.__setattr__(self, "vector_splits", splits)
        if any(k < 1 for k in splits) or len(set(splits)) < len(splits):
            raise RaptorError(f"vector splits must be distinct numbers >= 1, got {list(splits)}")
        if self.host_chunks is None:
            planned = self.compiler == "raptor" and not self.disable_spatial_planning
            noc = planned and not self.disable_noc_dataflow and not self.disable_pixel_chunks
            hosts = HOST_CHUNKS_LATENCY if noc and self.mode == "latency" else (1,)
            object.__setattr__(self, "host_chunks", hosts)
        hosts = tuple(int(k) for k in self.host_chunks)
        object.__setattr__(self, "host_chunks", hosts)
        if not hosts or any(k < 1 for k in hosts) or len(set(hosts)) < len(hosts):
            raise RaptorError(f"host chunks must be distinct numbers >= 1, got {list(hosts)}")
        if self.compiler not in ("raptor", "pimcomp"):
            raise RaptorError(f"unknown compiler {self.compiler!r} (raptor or pimcomp)")
        if self.replication not in ("balance", "W0H0", "uniform"):
            raise RaptorError(
                f"unknown replication {self.replication!r} (balance, W0H0 or uniform)"
            )

    def _set_shares(self, kind: str, default: tuple[float, ...], empty_ok: bool) -> None:
        """Set `<kind>_shares` to a tuple of floats (`default` when None); shares must be
        distinct numbers in (0, 1]."""
        from raptor.errors import RaptorError

        field_name = f"{kind}_shares"
        value = getattr(self, field_name)
        shares = tuple(float(x) for x in (default if value is None else value))
        object.__setattr__(self, field_name, shares)
        bad = any(not 0.0 < x <= 1.0 for x in shares) or len(set(shares)) < len(shares)
        if bad or not (shares or empty_ok):
            raise RaptorError(
                f"{kind} shares must be distinct numbers in (0, 1], got {list(shares)}"
            )
