"""The Raptor compiler pipeline: ONNX (or Graph IR) -> Spatial IR -> per-core PIM programs.

The Spatial passes come from the options (raptor.spatial.passes); `pass_list` names every step
`compile_model` runs (`raptor compile --print-passes`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from raptor.arch import Arch
from raptor.bounds import program_bound
from raptor.errors import PassFailedError
from raptor.frontend.graph import Graph
from raptor.isa.opcodes import Opcode
from raptor.isa.pimdir import PimProgram, write_pimdir
from raptor.options import FINALIST_MARGIN, VECTOR_SPLIT, CompileOptions
from raptor.pim.deadlock import DeadlockReport, check_programs
from raptor.result import (
    CompileResult,
    PassTimer,
    instruction_counts,
    program_counts,
    timing_fields,
)
from raptor.spatial.ir import BufferRole, ComputeNode
from raptor.spatial.plan_memo import PlanMemo, PlanRecipe, plan_memo

# NoC edges returned to host memory after a failed deadlock check, at most this many times
MAX_NOC_ROUNDS = 64
# Repacking rounds per plan variant (_plan): nodes placed by the load within their layers' time
# windows of the previous estimated execution; a round that does not shorten it ends the variant.
REPACK_ROUNDS = 3


def _load(model) -> Graph:
    from raptor.frontend.cache import CachedModel

    if isinstance(model, Graph):
        return model
    if isinstance(model, CachedModel):
        return model.load()
    from raptor.frontend import load_graph  # written by the frontend engineer

    return load_graph(model)


def compile_model(model: str | Path | Any, arch: Arch, opts: CompileOptions) -> CompileResult:
    """Compile `model` (path, onnx.ModelProto, Graph or frontend.cache.CachedModel) for `arch`
    under `opts`; the program records what it was compiled for (pim/target.json,
    raptor.isa.target), whichever compiler."""
    from raptor.isa.target_record import make_record

    res = _compile_model(model, arch, opts)
    res.program.target = make_record(arch, opts, res.report.get("local_memory_peak_bytes"))
    return res


def pass_list(opts: CompileOptions) -> list[tuple[str, bool]]:
    """(name, reruns in every round of the NoC demotion loop) of the steps the Raptor compiler
    runs under `opts`, in order (the names of the report's pass_time_s)."""
    from raptor.spatial.passes import round_passes, spatial_passes

    loop = [p.name for p in round_passes(opts)]
    if not opts.disable_noc_dataflow:
        loop.append("noc-message-order")
    loop += ["verify-spatial", "pim-codegen", "verify-pim", "deadlock-check"]
    once = ["frontend", "build-spatial", *(p.name for p in spatial_passes(opts))]
    last = ["mesh-placement"] if opts.places_cores else []
    last += ["finalists"] if opts.mode == "latency" else []  # (runs when a plan has a runner-up)
    last.append("estimates")
    return [(n, False) for n in once] + [(n, True) for n in loop] + [(n, False) for n in last]


def format_passes(opts: CompileOptions, times: dict[str, float]) -> str:
    """The pass list with the wall time of each pass (`raptor compile --print-passes`)."""
    if opts.compiler == "pimcomp":
        steps = [(n, False) for n in times if n != "write"]
    else:
        steps = pass_list(opts)
    width = max(len(n) for n, _ in steps)
    lines = [
        f"{i:>2} {n:<{width}} {times.get(n, 0.0):9.4f} s" + ("  (each NoC round)" if loop else "")
        for i, (n, loop) in enumerate(steps, 1)
    ]
    if "write" in times:
        lines.append(f"   {'write':<{width}} {times['write']:9.4f} s")
    return "\n".join(lines)


def _compile_model(model: str | Path | Any, arch: Arch, opts: CompileOptions) -> CompileResult:
    timed = PassTimer()
    graph = timed("frontend", _load, model)
    if opts.compiler == "pimcomp":
        from raptor import pimcomp

        return _with_bounds(pimcomp.compile_model(graph, arch, opts), graph, arch)

    from raptor.spatial.build import build_spatial
    from raptor.spatial.planning import estimates

    sg = timed("build-spatial", build_spatial, graph, arch.element_bytes, arch.matrix.rows)
    memo = plan_memo(model, arch, opts)
    finals = _plan(arch, sg, opts, timed, memo)
    built = [_program(arch, finals[0].planned, finals[0].first, opts, timed)]
    for f in finals[1:]:
        try:
            built.append(_program(arch, f.planned, f.first, opts, timed))
        except PassFailedError:
            break  # the best estimate's program stands
    finals = finals[: len(built)]
    k = 0
    if len(built) > 1:
        ran = [timed("finalists", _latency_ns, arch, prog) for prog, _, _ in built]
        k = int(np.argmin(ran))
    if memo is not None and finals[k].recipe is not None:
        memo.put(finals[k].recipe)
    prog, sg, stats = built[k]
    est = timed("estimates", estimates, arch, sg)
    res = CompileResult(prog, _report(arch, opts, sg, prog, stats, est, timed.times))
    if len(built) > 1:
        res.report["plan_finalists_ns"] = {f.label: round(t, 1) for f, t in zip(finals, ran)}
    if finals[k].label:
        res.report["plan_kept"] = finals[k].label
    return _with_bounds(res, graph, arch)


def _latency_ns(arch: Arch, prog: PimProgram) -> float:
    """The simulated latency of a finalist's program (seeded random input)."""
    from raptor.sim import simulate

    return simulate(prog, arch, "latency", 1).latency_ns


def _program(arch: Arch, planned, first, opts: CompileOptions, timed: PassTimer):
    """(program, final graph, codegen stats) of a planned graph: the NoC demotion loop, which
    returns to host memory the NoC edges whose message order gets stuck or whose program the
    deadlock check refuses, and code generation. `first`: the plan's first round when `_plan`
    already synchronized and ordered it."""
    from raptor.pim.codegen import generate
    from raptor.spatial.message_order import OrderStuck
    from raptor.spatial.noc import demote_pairs

    meta = {"compiler": "raptor", "arch": arch.name, "mode": opts.mode, "pipeline": opts.pipeline}
    failure = "no program"
    for _ in range(MAX_NOC_ROUNDS):
        if first is not None:  # synchronized and ordered while planning
            sg, first = first, None
        else:
            try:
                sg = _round(arch, planned, opts, timed)
            except OrderStuck as e:
                if not demote_pairs(planned, planned.noc, e.pairs, "order"):
                    raise PassFailedError(f"NoC message order: {e}") from None
                failure = f"NoC message order: {e}"
                continue
        timed("verify-spatial", sg.verify)
        prog, stats = timed("pim-codegen", generate, arch, sg, meta, not opts.disable_line_buffer)
        timed("verify-pim", prog.verify)
        check = timed("deadlock-check", check_programs, prog.cores, 2 if opts.pipeline > 1 else 1)
        if check.ok:
            break
        failure = f"emitted program would deadlock: {check.describe()}"
        if planned.noc is None or not _demote_blocked(planned, check):
            raise PassFailedError(failure)
    else:
        raise PassFailedError(f"{failure} (after {MAX_NOC_ROUNDS} rounds of demotion)")
    if opts.places_cores:
        from raptor.pim.placement import place_cores

        prog, sg, stats["mesh_placement"] = timed("mesh-placement", place_cores, arch, prog, sg)
    return prog, sg, stats


def _round(arch: Arch, planned, opts: CompileOptions, timed: PassTimer):
    """One round of the NoC demotion loop up to code generation: the round passes
    (synchronization) on the planned graph, then the NoC message order when the graph has a NoC
    plan (raises message_order.OrderStuck)."""
    from raptor.spatial.message_order import order_messages
    from raptor.spatial.passes import round_passes

    sg = planned
    for p in round_passes(opts):
        sg = timed(p.name, p.apply, arch, sg)
    if sg.noc is not None:
        sg.noc.comm = timed("noc-message-order", order_messages, arch, sg)
    return sg


def _plan(arch: Arch, sg, opts: CompileOptions, timed: PassTimer, memo: PlanMemo | None = None):
    """Run the Spatial passes; returns the plans to program (`_Final`): the planned graph and,
    when the planner had a choice, the graph of its first round (synchronized, messages ordered)
    so the round loop does not redo it; in latency mode also up to `opts.finalists` - 1
    runners-up whose estimates end within raptor.options.FINALIST_MARGIN of the best (the
    compiler keeps the one that simulates fastest and stores its recipe in the memo).

    With the NoC dataflow, the compiler compares candidate plans by their message order (an
    execution on estimated times, before synchronization: the choice does not depend on
    `--pim-disable-synchronization`) and keeps the one that ends first. With pixel chunks on
    (spatial/planning.py), the planning and NoC passes run with contiguous ranges per replica,
    with row chunks (the chunks of the layers whose replicas get two output rows or more are
    whole rows, planning.choose_row_chunks; not with `--pim-disable-row-chunks`) and with pixel
    chunks; chunks must be strictly better, a plan in which no layer gets more than one chunk is
    the contiguous plan, which then runs alone, and one in which no layer is cut into rows is the
    pixel-chunk plan; each kind of chunks once per count in `opts.host_chunks` (the chunks per
    replica of the layer reading the network input from host memory, planning.choose_chunks;
    the first count wins ties). Unless window packing is disabled, the
    chunked variant is then repacked (`_repack`), and so is the contiguous one when its estimate
    before repacking is no worse than the chunked one's: on the 16 default cases a repacked
    contiguous plan never won otherwise (it was 4-63 % behind the repacked chunks), and its
    repacking rounds were a third of the message orders a compile ran. A repacked plan is kept
    when it ends strictly first and, in throughput mode, also has a shorter core span
    (`_core_span_ns`). All that runs with replication buying up to the first share of the
    crossbars in `opts.crossbar_shares`; for each further share (in latency mode by default
    raptor.options.CROSSBAR_SHARES_LATENCY, fewer replicas) and each of `opts.fill_shares` (the
    rest of the crossbars then buying replicas of the slowest layer; FILL_SHARES), the
    variant that won is planned and repacked again (if it has chunks, with both kinds of chunks
    and every host-chunk count),
    and kept only when it ends strictly first; then so is, with the replication of the winner so
    far, each finer vector split in `opts.vector_splits` (VECTOR_SPLITS_LATENCY), unless its NoC
    pass returns more consumer units to host memory than the winner's (their estimate misses
    the host traffic and tokens that follow). All that runs with the first row-group size in
    `opts.small_layer_group_tiles` for the layers of at most raptor.options.SMALL_LAYER_PIXELS
    output pixels; each further size (a tiling that changes no layer's row groups, or whose
    plans do not fit the chip, is skipped) plans every replication again but only with the
    winner's kind of chunks, and must end strictly first; so does each further pack size in
    `opts.pack_pixels` (with the first row-group size; a size that packs no layer differently
    is skipped); the finalists come from
    all of them. Unless window packing is disabled, the winner's variant is then repacked once
    more by layer-order delays instead of load (`_delay_repack`), and such a round is kept under
    the same rule. With a `memo` (spatial/plan_memo.py)
    holding this compile's choice, the tiling and planning passes run once, with it."""
    from raptor.spatial.passes import spatial_passes
    from raptor.spatial.planning import SpatialPlanningPass

    passes = spatial_passes(opts)
    at = next(
        (
            i
            for i, p in enumerate(passes)
            if isinstance(p, SpatialPlanningPass)
            and p.noc
            and (p.chunks or not opts.disable_window_packing)
        ),
        None,
    )
    if at is None:
        for p in passes:
            sg = timed(p.name, p.apply, arch, sg)
        return [_Final("", sg, None, None)]
    from raptor.spatial.tiling import TilingPass

    tiling = next(i for i, p in enumerate(passes) if isinstance(p, TilingPass))
    for p in passes[:tiling]:
        sg = timed(p.name, p.apply, arch, sg)
    untiled = sg
    recipe = memo.get() if memo is not None else None
    if recipe is not None:
        sg = _tiled(arch, untiled, passes, tiling, at, recipe.small_tiles, timed, recipe.pack)
        sg.notes.plan_estimates_ns.update(recipe.estimates)
        changes = {
            "chunks": recipe.chunks,
            "host_chunks": recipe.host_chunks,
            "row_chunks": recipe.row_chunks,
            "windows": recipe.windows,
            "order_delay": recipe.order_delay,
            "crossbar_share": recipe.crossbar_share,
            "fill_slowest": recipe.fill_slowest,
            "vector_split": recipe.vector_split,
        }
        planned = _planned(arch, sg, passes, at, timed, **changes)
        return [_Final(recipe.label, planned, None, None)]
    pipelined = opts.mode == "throughput"
    best, cands, groups, estimates = None, [], None, {}
    pack0 = opts.pack_pixels[0]
    tilings = [(small, pack0) for small in opts.small_layer_group_tiles]
    tilings += [(opts.small_layer_group_tiles[0], k) for k in opts.pack_pixels[1:]]
    tiled = {}  # tag -> the tiled graph the candidates of that tiling were planned on
    for small, pack in tilings:
        sg = _tiled(arch, untiled, passes, tiling, at, small, timed, pack)
        shape = [(ly.row_groups, ly.pack) for ly in sg.layers]
        if groups is not None and shape in groups:
            continue  # no layer changes its row groups or packs: the same plans
        groups = (groups or []) + [shape]
        chunks = None if best is None else (best.chunks, best.row_chunks, best.host_chunks)
        tag = (small, 0 if pack == pack0 else pack)
        tiled[tag] = sg
        try:
            found, more = _search(arch, sg, passes, at, opts, tag, timed, chunks)
        except PassFailedError:
            if len(tiled) == 1:
                raise
            continue  # a further tiling whose plans do not fit the chip (more row groups)
        estimates.update(sg.notes.plan_estimates_ns)
        cands += more
        if found is None:
            continue  # with the first tiling's chunks, no layer got more than one chunk
        # another tiling must be strictly better than the first (and, pipelined, span less)
        if best is None or (found.est < best.est and (not pipelined or found.span < best.span)):
            best = found
    if not opts.disable_window_packing and best.first is not None:
        sg = tiled[best.tag]
        for cand in _delay_repack(arch, sg, passes, at, best, cands, timed):
            if any(c.planned.nodes == cand.planned.nodes for c in cands):
                continue  # a load round placed alike: the same plan, already a candidate
            cands.append(cand)
            if cand.est < best.est and (not pipelined or cand.span < best.span):
                best = cand
        estimates.update(sg.notes.plan_estimates_ns)
    finals = [best]
    if not pipelined and best.first is not None:
        near = [c for c in cands if c is not best and c.est <= best.est * (1 + FINALIST_MARGIN)]
        finals += sorted(near, key=lambda c: c.est)[: opts.finalists - 1]
    for c in finals:
        c.planned.notes.plan_estimates_ns.update(estimates)
    return [
        _Final(
            c.label,
            c.planned,
            _synchronized(arch, c.planned, c.first, opts, timed),
            PlanRecipe(
                c.chunks,
                c.windows,
                estimates,
                c.crossbar_share,
                c.fill_slowest,
                c.small_tiles,
                c.label,
                c.pack,
                c.row_chunks,
                c.order_delay,
                c.vector_split,
                c.host_chunks,
            ),
        )
        for c in finals
    ]


def _tiled(
    arch: Arch, sg, passes, tiling: int, at: int, small: int, timed: PassTimer, pack: int = 0
):
    """sg after the tiling pass passes[tiling], with `small` row tiles per group of the layers of
    few pixels and up to `pack` pixels per remainder mvmul (0: the pass's own), and the passes
    between it and planning (passes[at])."""
    tiler = replace(passes[tiling], small_tiles=small)
    if pack:
        tiler = replace(tiler, pack_pixels=pack)
    for p in [tiler, *passes[tiling + 1 : at]]:
        sg = timed(p.name, p.apply, arch, sg)
    return sg


def _search(
    arch: Arch,
    sg,
    passes,
    at: int,
    opts: CompileOptions,
    tag: tuple[int, int],
    timed: PassTimer,
    chunks_only: tuple[bool, bool, int] | None = None,
):
    """The candidate plans of one tiling (`_plan`): (the one whose estimate ends first, None when
    `chunks_only` left no candidate; every candidate). The variants: contiguous ranges, row
    chunks (not with `--pim-disable-row-chunks`) and pixel chunks, each chunked kind once per
    count in `opts.host_chunks`, the later replications only those of the first one's winner
    (contiguous ranges, or both kinds of chunks with every host count), then the finer vector
    splits with the replication of the winner so far (`_plan`); `chunks_only`: only this (pixel
    chunks, row chunks, host chunks), the first tiling's winner (trying both kinds of chunks in
    every tiling measured the same on the 8 latency cases, googlenet's compiles 36-42 -> 50 s;
    both host counts in every tiling, the same resnet18 arch-b program in 97 s instead of 66)."""
    pipelined = opts.mode == "throughput"
    replications = [(x, False, VECTOR_SPLIT) for x in opts.crossbar_shares]
    replications += [(x, True, VECTOR_SPLIT) for x in opts.fill_shares]
    n_shares = len(replications)
    best = None
    cands: list[_Candidate] = []
    chunked_est = math.inf
    tried: list[list[ComputeNode]] = []
    for k in itertools.count():
        if best is None and k:
            break  # every candidate's order got stuck
        if k == n_shares:  # the finer vector splits, with the replication that won
            replications += [
                (best.crossbar_share, best.fill_slowest, n) for n in opts.vector_splits
            ]
        if k == len(replications):
            break
        share, fill, split = replications[k]
        variants = [(False, False, 1)]
        if passes[at].chunks:
            kinds = [(True, False)] if opts.disable_row_chunks else [(True, False), (True, True)]
            variants[:0] = [(c, r, h) for h in opts.host_chunks for c, r in kinds]
        if chunks_only is not None:
            variants = [chunks_only]
        if k:
            variants = [v for v in variants if v[0] == best.chunks]
        for chunks, rows, host in variants:
            how = {
                "chunks": chunks,
                "row_chunks": rows,
                "host_chunks": host,
                "crossbar_share": share,
                "fill_slowest": fill,
                "vector_split": split,
            }
            planned = _planned(arch, sg, passes, at, timed, **how)
            if split != VECTOR_SPLIT and _demoted(planned) > _demoted(best.planned):
                continue  # finer pool nodes whose line buffers do not all fit local memory
            if chunks and not any(n.chunk for n in planned.nodes):
                continue  # no layer to interleave: the same plan as contiguous ranges
            if planned.nodes in tried:
                continue  # the same plan as another candidate's (no layer cut into rows, or
                # another replication bought the same replicas)
            tried.append(planned.nodes)
            est, first = _trial(arch, planned, timed)
            label = _label(chunks, share, fill, *tag, rows=rows, split=split, host=host)
            sg.notes.plan_estimates_ns[label] = est
            span = _core_span_ns(first)
            cand = _Candidate(est, span, planned, first, None, label, **how, tag=tag)
            cands.append(cand)
            # chunks must be strictly better than contiguous ranges, later replications than the first
            if best is None or est < best.est or (est == best.est and not chunks and k == 0):
                best = cand
            if chunks and k == 0:
                chunked_est = min(chunked_est, est)
            if opts.disable_window_packing or (not chunks and est > chunked_est):
                continue  # contiguous ranges are repacked only when they planned no worse than chunks
            for cand in _repack(arch, sg, passes, at, how, first, timed, tag):
                cands.append(cand)
                if cand.est < best.est and (not pipelined or cand.span < best.span):
                    best = cand
    return best, cands


def _demoted(planned) -> int:
    """Consumer units a plan's NoC pass returned to host memory (spatial/noc.py)."""
    return sum(planned.noc.demoted.values()) if planned.noc is not None else 0


def _label(
    chunks: bool,
    share: float,
    fill: bool,
    small: int = 0,
    pack: int = 0,
    rows: bool = False,
    split: int = VECTOR_SPLIT,
    host: int = 1,
) -> str:
    """A candidate plan's name in plan_estimates_ns: "chunked", "rows" (pixel chunks, those of
    the layers with rows enough whole output rows) or "contiguous", "@share" when its
    replication could buy only that share of the crossbars by time cut, "+fill" when the rest then
    bought replicas of the slowest layer, "/small<N>" when the layers of few pixels were cut into
    row groups of N tiles, "/pack<K>" when remainder tiles were packed K pixels at a time instead
    of the first of `pack_pixels`, "/split<N>" when vector layers were split to 1/N of the
    slowest GEMM node instead of 1/VECTOR_SPLIT, "/host<N>" when the layer reading the network
    input from host memory was dealt to its replicas in N chunks (planning.choose_chunks)."""
    kind = ("rows" if rows else "chunked") if chunks else "contiguous"
    name = kind + ("" if share == 1.0 else f"@{share:g}")
    name += ("+fill" if fill else "") + (f"/small{small}" if small else "")
    name += f"/pack{pack}" if pack else ""
    name += "" if split == VECTOR_SPLIT else f"/split{split}"
    return name + (f"/host{host}" if host > 1 else "")


class _Final(NamedTuple):
    """A plan `_plan` hands to code generation: its name in plan_estimates_ns, the planned
    graph, its first round synchronized and ordered (None: the round loop makes it), and the
    recipe the plan memo stores when it is kept (None: the memo already held it)."""

    label: str
    planned: Any
    first: Any
    recipe: PlanRecipe | None


class _Candidate(NamedTuple):
    """A candidate plan: its estimated end and core span, the planned graph, its messages
    ordered (None when the order got stuck), its name in plan_estimates_ns and the planning
    fields that made it."""

    est: float
    span: float
    planned: Any
    first: Any
    windows: dict[int, tuple[float, float]] | None
    label: str
    chunks: bool
    row_chunks: bool
    crossbar_share: float
    fill_slowest: bool
    tag: tuple[int, int] = (0, 0)  # (small-layer row-group tiles, pack pixels; 0: the first)
    order_delay: bool = False  # placed by layer-order delays (`_delay_repack`)
    vector_split: int = VECTOR_SPLIT  # vector layers split to 1/N of the slowest GEMM node
    host_chunks: int = 1  # chunks per replica of the layer reading host rows (planning)

    @property
    def small_tiles(self) -> int:
        return self.tag[0]

    @property
    def pack(self) -> int:
        return self.tag[1]

    @property
    def variant(self) -> dict:
        """The planning fields of its plan variant (`_search`'s `how`), windows aside."""
        return {
            "chunks": self.chunks,
            "row_chunks": self.row_chunks,
            "crossbar_share": self.crossbar_share,
            "fill_slowest": self.fill_slowest,
            "vector_split": self.vector_split,
            "host_chunks": self.host_chunks,
        }


def _synchronized(arch: Arch, planned, first, opts: CompileOptions, timed: PassTimer):
    """The first round of the chosen plan (`first`: its messages ordered without tokens, or None
    when that got stuck): the round passes (synchronization), then the message order again when
    they added tokens; None when it got stuck (the round loop demotes and retries)."""
    from raptor.spatial.passes import round_passes

    if first is None:
        return None
    sg = planned
    for p in round_passes(opts):
        sg = timed(p.name, p.apply, arch, sg)
    if sg is planned:
        return first
    if sg.noc is planned.noc and not _has_tokens(sg) and _same_steps(sg, planned):
        return sg  # neither a token nor a band edge changes the execution: the candidate's order
    return _trial(arch, sg, timed)[1]


def _same_steps(a, b) -> bool:
    """Whether every node of two graphs of one plan runs the same steps (output row, pixel range)
    in the message order: the synchronization pass cuts nodes into row bands even where it adds no
    token, and a band edge only matters if it cuts a row segment."""
    from raptor.spatial.message_order import node_steps

    def cuts(sg, n):
        return [(s.oy, s.pa, s.pb) for s in node_steps(sg, n)]

    if [n.id for n in a.nodes] != [n.id for n in b.nodes]:
        return False
    return all(cuts(a, n) == cuts(b, m) for n, m in zip(a.nodes, b.nodes))


def _has_tokens(sg) -> bool:
    return any(
        any(d.values())
        for d in (
            sg.tokens_before, sg.tokens_after, sg.tokens_start, sg.tokens_end, sg.band_before,
            sg.band_after,
        )
    )  # fmt: skip


def _core_span_ns(first) -> float:
    """The longest time any core is busy with one input in an estimated execution (`first`, a
    planned graph after its message order): per core, from the start of its first layer to the
    end of its last (the message order's layer timeline). A core restarts the next input only
    after its last node of this one, so a pipeline's period is about at least this span. Window
    packing alone does not see it: it puts an early and a late layer on one core when their
    windows do not overlap, which in throughput mode ties the period to the whole latency
    (measured vgg8 arch-b p4: 337 -> 270 inferences/s with an estimate 4.00 -> 3.72 ms; the span
    went 2.30 -> 3.72 ms)."""
    if first is None:
        return math.inf
    tl = first.noc.timeline
    span: dict[int, tuple[float, float]] = {}
    for n in first.nodes:
        if n.layer in tl:
            a, b = tl[n.layer]
            lo, hi = span.get(n.core, (a, b))
            span[n.core] = (min(lo, a), max(hi, b))
    return max((b - a for a, b in span.values()), default=0.0)


def _repack(
    arch: Arch, sg, passes, at: int, how: dict, first, timed: PassTimer, tag: tuple[int, int]
):
    """Window packing: up to REPACK_ROUNDS rounds, each placing the nodes by the load within
    their layers' time windows (merging.pack_balanced) of the last estimated execution of this
    plan variant that ended first (starting with `first`, the variant's own first round). A
    layer's window covers when it computes, so layers that run at the same time (inception
    branches, a pool beside its sibling convolution) stop sharing cores and waiting for each
    other. `how`: the planning fields of the variant (chunks, crossbar share, fill; with
    `order_delay`, rounds by layer-order delays instead of load, `_delay_repack`). Returns the
    `_Candidate` of every round that shortened the estimate."""
    label = _label(
        how["chunks"],
        how["crossbar_share"],
        how["fill_slowest"],
        *tag,
        rows=how["row_chunks"],
        split=how["vector_split"],
        host=how["host_chunks"],
    )
    label += "_delay" if how.get("order_delay") else "_repacked"
    out = []
    if first is None:  # the variant's order got stuck: no estimated execution to take windows from
        return out
    kept = (first.noc.estimated_ns, first)
    for r in range(1, REPACK_ROUNDS + 1):
        windows = {i: (a, b) for i, (a, b) in kept[1].noc.timeline.items()}
        planned = _planned(arch, sg, passes, at, timed, windows=windows, **how)
        if planned.nodes == kept[1].nodes:  # the same placement: the same execution, no shorter
            sg.notes.plan_estimates_ns[f"{label}{r}"] = kept[0]
            break
        est, first = _trial(arch, planned, timed)
        sg.notes.plan_estimates_ns[f"{label}{r}"] = est
        if est >= kept[0]:
            break
        kept = (est, first)
        span = _core_span_ns(first)
        out.append(_Candidate(est, span, planned, first, windows, f"{label}{r}", **how, tag=tag))
    return out


def _delay_repack(
    arch: Arch, sg, passes, at: int, best: _Candidate, cands: list[_Candidate], timed: PassTimer
) -> list[_Candidate]:
    """Window packing by layer-order delays, for the plan that won (`best`): its plan
    variant (`sg`, the tiling it was planned on; its first, unrepacked round among `cands`)
    repacked again, each round placing a node on the core where it would hold back, or be held
    back by, the nodes already there the least (a core runs its nodes in layer order: an earlier
    layer whose window ends after this layer's starts delays it; merging.pack_balanced
    order_delay), instead of where the load within its window is least. The same rounds as
    `_repack`, labelled `_delay1` and so on; returns the `_Candidate` of every round that
    shortened the estimate of the variant's first round (a throughput plan is kept only when its
    core span is shorter too, as in `_search`).

    Measured on the 8 default latency cases against the load rounds alone: resnet18 arch-a
    -3.4 %, resnet34 -3.2 / -1.8 % (arch-a / arch-b), the others unchanged (geometric mean 0.989;
    the delay rounds won on those three, the load rounds elsewhere), for 8 % more suite time;
    on the 8 throughput p4 cases resnet34 arch-a 40.2 -> 43.9 /s and arch-b 39.3 -> 38.4 /s, the
    others unchanged.
    Delay rounds for every plan variant (not only the winner's) gave the same programs for 1.6x
    the suite time; delay rounds started from the winner's own repacked round, only resnet34
    arch-a (-2.1 %); delay rounds in place of the load rounds, geometric mean 1.007 (googlenet
    +6.7 / +5.4 %: its inception branches run side by side, which the load within the windows
    sees and the order delays do not)."""
    base = next(
        c for c in cands if c.windows is None and c.tag == best.tag and c.variant == best.variant
    )
    how = {**best.variant, "order_delay": True}
    return _repack(arch, sg, passes, at, how, base.first, timed, best.tag)


def _planned(arch: Arch, sg, passes, at: int, timed: PassTimer, **changes):
    """sg after the planning pass passes[at], with `changes` to its fields, and the passes after
    it."""
    for p in [replace(passes[at], **changes), *passes[at + 1 :]]:
        sg = timed(p.name, p.apply, arch, sg)
    return sg


def _trial(arch: Arch, planned, timed: PassTimer):
    """(estimated end, the plan with its messages ordered) of a candidate plan: its message order
    before synchronization, an execution on estimated times; (inf, None) when the order gets
    stuck (the round loop demotes and retries on this plan if it is kept)."""
    from raptor.spatial.message_order import OrderStuck, order_messages

    try:
        planned.noc.comm = timed("noc-message-order", order_messages, arch, planned)
        return planned.noc.estimated_ns, planned
    except OrderStuck:
        return math.inf, None


def _pixel_chunks(sg) -> dict[str, int]:
    """Pixel chunks per replica of every layer the plan interleaves (spatial/planning.py)."""
    out: dict[str, int] = {}
    for n in sg.nodes:
        if n.chunk:
            name = sg.layers[n.layer].name
            out[name] = max(out.get(name, 1), n.chunk + 1)
    return out


def _row_chunks(sg) -> list[str]:
    """The chunked layers whose chunks are whole output rows (spatial/planning.py
    choose_row_chunks)."""
    chunked = _pixel_chunks(sg)
    out = []
    for ly in sg.layers:
        if ly.name in chunked:
            w = ly.output.width
            if all(n.p0 % w == 0 and n.p1 - n.p0 == w for n in sg.nodes if n.layer == ly.index):
                out.append(ly.name)
    return out


def _demote_blocked(sg, check: DeadlockReport) -> bool:
    """Return to host memory the fed units on the cores of the blocked (or mis-sized) messages of
    a failed deadlock check (spatial/noc.py); False when none is left to return."""
    from raptor.spatial.noc import demote_pairs

    pairs = set(check.size_mismatch)
    for b in check.blocked:
        if b.op == "send to":
            pairs.add((b.core, b.other))
        elif b.op == "recv from":
            pairs.add((b.other, b.core))
    if demote_pairs(sg, sg.noc, pairs, "deadlock"):
        return True
    stuck = {b.core for b in check.blocked}
    return bool(
        demote_pairs(sg, sg.noc, {(p, c) for c in stuck for p in range(sg.core_count)}, "deadlock")
    )


def _with_bounds(res: CompileResult, graph, arch: Arch) -> CompileResult:
    """Every compile report carries the ideal bounds of the model on the chip (raptor.bounds)."""
    from raptor.bounds import compute_bounds

    try:
        bounds = compute_bounds(graph, arch)
    except ValueError as e:  # the ideal mapping itself does not fit: report why
        bounds = {"error": str(e)}
    bounds.pop("replication_best", None)
    res.report["bounds"] = bounds
    mvm = sum(int((c["opcode"] == Opcode.MVMUL).sum()) for c in res.program.cores)
    if bounds.get("mvm_instructions_min"):
        # how many more mvmuls the program issues than any program must (raptor.bounds)
        res.report["mvm_vs_machine_min"] = round(mvm / bounds["mvm_instructions_min"], 4)
    return res


def _report(arch, opts, sg, prog: PimProgram, stats, est, times) -> dict[str, Any]:
    stores = _bytes_of(prog, Opcode.ST)
    insts = instruction_counts(prog)
    by_op = insts["instructions_by_opcode"]
    nodes_per_core = [0] * prog.core_cnt
    for n in sg.nodes:
        nodes_per_core[n.core] += 1
    return {
        "compiler": "raptor",
        "model": sg.name,
        "arch": arch.name,
        **program_counts(arch, prog),
        "replication": sg.replication,
        "nodes": len(sg.nodes),
        "nodes_per_core": nodes_per_core,
        **insts,
        "local_memory_peak_bytes": stats["local_memory_peak_bytes"],
        "host_memory_bytes": stats["host_memory_bytes"],
        "host_load_bytes_per_layer": stats["host_load_bytes"],
        "host_load_bytes": int(sum(stats["host_load_bytes"].values())),
        "halo_exchange": {  # raptor.pim.halo: replicas of a host-input layer sharing halo rows
            "nodes": stats.get("halo_nodes", 0),
            "rows_received": stats.get("halo_rows_received", 0),
        },
        # raptor.pim.placement: switches' busy time and mean flit latency, before and after
        "mesh_placement": stats.get("mesh_placement"),
        "host_store_bytes": stores,
        "host_bytes_per_inference": _bytes_of(prog, Opcode.LD) + stores,
        "noc_bytes_per_inference": _bytes_of(prog, Opcode.SEND),
        "noc_dataflow": _noc_report(sg),
        "machine_bound_program": program_bound(prog, arch),
        "noc_hop_bytes_estimate": float(est["hop_bytes"]),
        "estimated_layer_ns": {k: round(v, 1) for k, v in est["layer_ns"].items()},
        "estimated_core_ns_max": float(np.max(est["core_ns"])) if len(est["core_ns"]) else 0.0,
        "event_registers_max": sg.notes.event_registers,
        "band_tokens": sg.notes.band_tokens,
        "plan_estimates_ns": dict(sg.notes.plan_estimates_ns),
        "crossbar_share": sg.crossbar_share,
        "crossbar_fill": sg.crossbar_fill,
        "vector_split": sg.vector_split,
        "pixel_chunks": _pixel_chunks(sg),
        "row_chunks": _row_chunks(sg),
        "layer_cores": _layer_cores(sg),
        "depthwise_packing": _depthwise_report(arch, sg),
        # pixels one mvmul of each packed layer's short last row tile serves (spatial/tiling.py)
        "remainder_packs": {ly.name: ly.pack for ly in sg.layers if ly.pack > 1},
        "inter_chip_bytes_estimate": _inter_chip_bytes(arch, sg),
        "pimsim_unsupported_ops": {
            op: n for op, n in by_op.items() if op in PIMSIM_UNSUPPORTED and n
        },
        **timing_fields(opts, times),
    }


def _bytes_of(prog: PimProgram, op: Opcode) -> int:
    """Bytes moved per inference by every `op` (ld, st or send) of the program."""
    return int(sum(int(s["generic3"][s["opcode"] == op].sum()) for s in prog.cores))


def _noc_report(sg) -> dict[str, Any] | None:
    """What the NoC dataflow pass did (spatial/noc.py): edges fed core to core, edges left in host
    memory and why, and the estimated end of the message-order execution."""
    plan = sg.noc
    if plan is None:
        return None
    return {
        "fed_units": len(plan.fed),
        "residual_fed_nodes": len(plan.res_fed),
        "residual_own_nodes": len(plan.res_mixed),  # residual pieces copied on their own core
        "mixed_nodes": len(plan.mixed),
        "own_local_nodes": len(plan.own_local),
        "producer_layers": sorted(
            {sg.layers[s.layer].name for srcs in plan.sources.values() for s in srcs}
        ),
        "host_buffers": sorted(b for b in plan.host_buffers if b in sg.buffers),
        # activations between layers still in host memory (spills and edges the NoC cannot carry)
        "host_activation_buffers": sorted(
            b for b in plan.host_buffers if b in sg.buffers and sg.buffers[b].role == BufferRole.ACT
        ),
        "demoted_units": dict(plan.demoted),
        "message_order_estimated_ns": round(plan.estimated_ns, 1),
    }


# Raptor extensions that pimsim-nn (HEAPLab fork) rejects: it has no opcode 21 (vsoftmax).
PIMSIM_UNSUPPORTED = ("vsoftmax",)


def _layer_cores(sg) -> dict[str, list[int]]:
    """Cores of each layer's nodes (the writers first: root row groups / vector nodes)."""
    out: dict[str, list[int]] = {}
    for n in sorted(sg.nodes, key=lambda n: (n.layer, n.row_group, n.p0)):
        cores = out.setdefault(sg.layers[n.layer].name, [])
        if n.core not in cores:
            cores.append(n.core)
    return out


def _inter_chip_bytes(arch, sg) -> int:
    """Host-memory bytes (ld + st) of nodes on chips other than chip 0, where the global memory
    sits: every such byte crosses at least one inter-chip link."""
    if arch.chips <= 1:
        return 0
    from raptor.arch.timing import global_memory_chip_hops
    from raptor.spatial.cost import lane_profile_bytes

    total = 0
    for n in sg.nodes:
        if global_memory_chip_hops(arch, n.core):
            total += lane_profile_bytes(arch, sg.layers[n.layer], n) * n.lanes
    return int(total)


def _depthwise_report(arch, sg) -> dict[str, Any] | None:
    """Crossbars of the block-diagonal depthwise packing vs one array group per channel."""
    dw = sg.notes.depthwise
    if not dw:
        return None
    naive = packed = 0
    for g in dw:
        c, k, per = g.channels, g.kernel, g.per_block
        naive += c * arch.crossbars_for(k, 1)
        full, rest = divmod(c, per)
        packed += full * arch.crossbars_for(k * per, per)
        packed += arch.crossbars_for(k * rest, rest) if rest else 0
    return {
        "convs": len(dw),
        "channels_per_crossbar_block": sorted({g.per_block for g in dw}),
        "crossbars_naive": naive,
        "crossbars_packed": packed,
        "crossbars_saved": naive - packed,
    }


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def compile_to_dir(
    model, arch: Arch, opts: CompileOptions, out_dir: str | Path, emit_json: bool = False
) -> dict[str, Any]:
    """Compile and write `out_dir/pim/` and `out_dir/compile_report.json`; returns the report."""
    out_dir = Path(out_dir)
    res = compile_model(model, arch, opts)
    t0 = time.perf_counter()
    write_pimdir(res.program, out_dir / "pim", emit_json=emit_json)
    res.report.setdefault("pass_time_s", {})["write"] = round(time.perf_counter() - t0, 4)
    _atomic_write_text(out_dir / "compile_report.json", json.dumps(res.report, indent=1) + "\n")
    return res.report
