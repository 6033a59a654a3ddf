"""`raptor` command line: argument parsing only; every subcommand calls the library."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from raptor.errors import RaptorError
from raptor.options import (
    CROSSBAR_SHARES_LATENCY,
    FILL_SHARES,
    FINALIST_MARGIN,
    FINALISTS,
    HOST_CHUNKS_LATENCY,
    PACK_PIXELS,
    PACK_PIXELS_LATENCY,
    PACK_PIXELS_THROUGHPUT,
    ROW_GROUP_TILES_LATENCY,
    ROW_SEGMENT_PIXELS,
    ROW_SEGMENTS,
    SMALL_LAYER_GROUP_TILES_LATENCY,
    SMALL_LAYER_PIXELS,
    VECTOR_SPLIT,
    VECTOR_SPLITS_LATENCY,
    CompileOptions,
)


def _cmd_arch_show(args: argparse.Namespace) -> int:
    from raptor.arch import load_arch

    arch = load_arch(args.arch)
    if args.json:
        print(json.dumps(arch.summary, indent=2))
    else:
        width = max(len(k) for k in arch.summary)
        for k, v in arch.summary.items():
            print(f"{k:<{width}}  {v}")
    return 0


def _cmd_arch_export_pimsim(args: argparse.Namespace) -> int:
    from raptor.arch import load_arch
    from raptor.arch.pimsim_export import export_pimsim

    print(export_pimsim(load_arch(args.arch), args.out, mode=args.mode))
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    if args.layers or args.path or args.progress:
        from raptor.errors import SimulationError
        from raptor.sim.critical_path import format_segments
        from raptor.sim.layers import case_layers, format_layer_rows, format_progress

        option = "--layers" if args.layers else "--path" if args.path else "--progress"
        rows, title, crit = case_layers(args.dir, _arch_or_none(args), args.force_target, option)
        if args.path and crit is None:
            raise SimulationError(
                f"{args.dir}: --path: the run has no critical path: its trace has more than one "
                "track per core (core.rob_size > 1 keeps several instructions of a core in flight)"
            )
        if args.json:  # --layers or --progress: the rows; --path: the path; both: both
            both = {"layers": rows, "critical_path": crit}
            table = args.layers or args.progress
            out = both if table and args.path else rows if table else crit
            print(json.dumps(out, indent=2))
            return 0
        parts = [format_layer_rows(rows, title, crit)] if args.layers else []
        if args.progress:
            parts.append(format_progress(rows, "" if args.layers else title))
        if args.path:
            parts.append(format_segments(crit, args.path_min_us * 1e3))
        print("\n\n".join(parts))
        return 0
    from raptor.isa.inspect import inspect_pimdir

    summary = inspect_pimdir(args.dir, _arch_or_none(args), force_target=args.force_target)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        from raptor.isa.inspect import format_summary

        print(format_summary(summary))
    return 0


def _cmd_models_build(args: argparse.Namespace) -> int:
    from raptor.models import save_model

    path = save_model(
        args.name,
        args.out,
        input_size=args.input_size,
        seed=args.seed,
        activations=args.activations,
    )
    print(path)
    return 0


def compile_options(args: argparse.Namespace) -> CompileOptions:
    return CompileOptions(
        mode=args.mode,
        pipeline=args.pipeline
        if args.pipeline is not None
        else (4 if args.mode == "throughput" else 1),
        disable_synchronization=args.pim_disable_synchronization,
        disable_spatial_planning=args.pim_disable_spatial_planning,
        disable_noc_dataflow=args.pim_disable_noc_dataflow,
        disable_sibling_merge=args.pim_disable_sibling_merge,
        disable_line_buffer=args.pim_disable_line_buffer,
        disable_pixel_chunks=args.pim_disable_pixel_chunks,
        disable_row_chunks=args.pim_disable_row_chunks,
        disable_window_packing=args.pim_disable_window_packing,
        disable_mesh_placement=args.pim_disable_mesh_placement,
        row_segments=args.pim_row_segments,
        row_segment_pixels=args.pim_row_segment_pixels,
        row_group_tiles=args.pim_row_group_tiles,
        small_layer_group_tiles=args.pim_small_layer_group_tiles,
        pack_pixels=args.pim_pack_pixels,
        crossbar_shares=args.pim_crossbar_shares,
        fill_shares=args.pim_fill_shares,
        vector_splits=args.pim_vector_splits,
        host_chunks=args.pim_host_chunks,
        finalists=args.pim_finalists,
        compiler=args.compiler,
        replication=args.replication,
    )


def _cmd_compile(args: argparse.Namespace) -> int:
    from raptor.arch import load_arch
    from raptor.compiler import compile_to_dir, format_passes

    opts = compile_options(args)
    report = compile_to_dir(
        args.model, load_arch(args.arch), opts, args.out, emit_json=args.pim_emit_json
    )
    if args.print_passes:
        print(format_passes(opts, report["pass_time_s"]))
    print(
        f"wrote {Path(args.out) / 'pim'}: {report['cores_used']} cores, "
        f"{report['crossbars_used']} crossbars, {report['instructions_total']} instructions"
    )
    return 0


def _arch_or_none(args: argparse.Namespace):
    """--arch when given; None lets the library take the pim/ directory's target record."""
    from raptor.arch import load_arch

    return load_arch(args.arch) if args.arch else None


def _warn_override(lines: list[str]) -> None:
    for line in lines:
        print(f"raptor: {line}", file=sys.stderr)


def _cmd_simulate(args: argparse.Namespace) -> int:
    if args.engine == "pimsim-nn":
        from raptor.sim.pimsim_engine import run_pimsim

        if args.trace:
            raise RaptorError("--trace needs our simulator (--engine ours)")

        report = run_pimsim(
            args.dir,
            _arch_or_none(args),
            mode=args.mode,
            pipeline=args.pipeline,
            binary=args.pimsim_bin,
            force_target=args.force_target,
        )
    else:
        from raptor.sim import simulate_dir

        if args.trace and not args.trace.endswith(".json"):
            raise RaptorError(f"--trace {args.trace}: the trace file name must end in .json")
        report = simulate_dir(
            args.dir,
            _arch_or_none(args),
            mode=args.mode,
            pipeline=args.pipeline,
            inputs=args.inputs,
            force_target=args.force_target,
            trace=bool(args.trace),
        )
    _warn_override(report.target_override)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    if args.trace:
        from raptor.isa.pimdir import read_config
        from raptor.sim import find_pimdir
        from raptor.sim.critical_path import critical_path, format_path
        from raptor.sim.timeline import save_trace

        meta = read_config(find_pimdir(args.dir)).get("raptor", {})
        out = sys.stderr if args.json else sys.stdout
        path = critical_path(report, meta)
        print(save_trace(report, meta, args.trace, crit=path), file=out)
        if path is not None:
            print(format_path(path), file=out)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from raptor.validation.compare import validate_dir

    verdict = validate_dir(
        args.dir,
        args.model,
        _arch_or_none(args),
        mode=args.mode,
        pipeline=args.pipeline,
        seed=args.seed,
        force_target=args.force_target,
        intermediates=args.intermediates,
    )
    _warn_override((verdict.sim or {}).get("target_override", []))
    print(json.dumps(verdict.to_dict(), indent=2) if args.json else verdict.format())
    return 0 if verdict.passed else 1


def _cmd_bounds(args: argparse.Namespace) -> int:
    from raptor.arch import load_arch
    from raptor.bounds import compute_bounds, format_bounds

    b = compute_bounds(args.model, load_arch(args.arch))
    print(json.dumps(b, indent=2) if args.json else format_bounds(b))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="raptor", description="ONNX to ReRAM-crossbar PIM compiler and simulator"
    )
    p.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of an internal error instead of writing it to a log file",
    )
    sub = p.add_subparsers(dest="command", required=True)
    arch_help = "arch-a, arch-b, arch-c or an architecture JSON file"
    json_help = "print JSON instead of text (default: off)"

    arch = sub.add_parser("arch", help="architecture files").add_subparsers(
        dest="arch_command", required=True
    )
    show = arch.add_parser("show", help="summarise an architecture (name or JSON path)")
    show.add_argument("arch", help=arch_help)
    show.add_argument("--json", action="store_true", help=json_help)
    show.set_defaults(func=_cmd_arch_show)
    ex = arch.add_parser(
        "export-pimsim", help="write the pimsim-nn arch config and NoC table for an architecture"
    )
    ex.add_argument("arch", help=arch_help)
    ex.add_argument(
        "--out", required=True, help="directory for config.json and network.json (required)"
    )
    ex.add_argument(
        "--mode",
        choices=("latency", "throughput"),
        default="latency",
        help="pimsim-nn simulation mode written into the config (default: latency)",
    )
    ex.set_defaults(func=_cmd_arch_export_pimsim)

    def add_target_args(sp: argparse.ArgumentParser, run: bool = True) -> None:
        """Options that default to the pim/ directory's target record (pim/target.json)."""
        sp.add_argument(
            "--arch",
            default=None,
            help=f"{arch_help} (default: the one in pim/target.json; required without a record)",
        )
        if run:
            sp.add_argument(
                "--mode",
                choices=("latency", "throughput"),
                default=None,
                help="latency or throughput (default: the recorded mode; latency without a record)",
            )
            sp.add_argument(
                "--pipeline",
                type=int,
                default=None,
                help="inputs streamed in throughput mode (default: the recorded pipeline; "
                "without a record config.json's, else 4)",
            )
        sp.add_argument(
            "--force-target",
            action="store_true",
            help="run even where the options contradict pim/target.json; the output is marked "
            "TARGET OVERRIDE (default: off)",
        )

    ins = sub.add_parser("inspect", help="summarise a pim/ directory (either instruction format)")
    ins.add_argument("dir", help="a pim/ directory or its parent")
    add_target_args(ins, run=False)
    ins.add_argument("--json", action="store_true", help=json_help)
    ins.add_argument(
        "--layers",
        action="store_true",
        help="per-layer table of a compiled case directory: the plan (replicas, cores, estimated "
        "ns) joined with measured busy/stall time (simulates once, writes DIR/layers.json; "
        "default: off)",
    )
    ins.add_argument(
        "--path",
        action="store_true",
        help="the critical path of a compiled case directory as its chain of cores: one line per "
        "run of the path on one core and layer, with its interval and largest categories (the "
        "same traced run and layers.json as --layers; default: off)",
    )
    ins.add_argument(
        "--progress",
        action="store_true",
        help="when each layer of a compiled case directory had done 25, 50, 75 and 100 %% of its "
        "matrix and vector work, and how long its last quarter took (the same traced run and "
        "layers.json as --layers; default: off)",
    )
    ins.add_argument(
        "--path-min-us",
        type=float,
        default=10.0,
        metavar="X",
        help="--path: fold segments shorter than X us into one count/time line (default: 10.0)",
    )
    ins.set_defaults(func=_cmd_inspect)

    models = sub.add_parser("models", help="the model suite").add_subparsers(
        dest="models_command", required=True
    )
    mb = models.add_parser("build", help="build a suite model as ONNX")
    mb.add_argument("name", help="vgg8, resnet18, resnet34, googlenet or yolo11n")
    mb.add_argument("--out", required=True, help="ONNX file to write (required)")
    mb.add_argument(
        "--input-size",
        type=int,
        default=None,
        help="input height = width (default: the model's own)",
    )
    mb.add_argument("--seed", type=int, default=0, help="seed of the weights (default 0)")
    mb.add_argument(
        "--activations",
        choices=("probe", "realistic"),
        default="probe",
        help="yolo11n only: realistic = batch-calibrated BN with large attention and DFL logits "
        "(default: probe)",
    )
    mb.set_defaults(func=_cmd_models_build)

    cp = sub.add_parser("compile", help="compile an ONNX model to a pim/ directory")
    cp.add_argument("model", help="ONNX model file")
    cp.add_argument("--arch", required=True, help=f"{arch_help} (required)")
    cp.add_argument(
        "--mode",
        choices=("latency", "throughput"),
        default="latency",
        help="latency (one input) or throughput (a layer pipeline) (default: latency)",
    )
    cp.add_argument(
        "--pipeline",
        type=int,
        default=None,
        help="inputs streamed in throughput mode (default 4; latency mode is 1)",
    )
    cp.add_argument(
        "--out",
        required=True,
        help="output directory: pim/ (with target.json) and compile_report.json (required)",
    )
    cp.add_argument(
        "--compiler",
        choices=("raptor", "pimcomp"),
        default="raptor",
        help="Raptor or the PIMCOMP baseline (default: raptor)",
    )
    cp.add_argument(
        "--replication",
        choices=("balance", "W0H0", "uniform"),
        default="balance",
        help="pimcomp only: replication method (default: balance)",
    )
    cp.add_argument(
        "--pim-emit-json",
        action="store_true",
        help="write core_<i>.json instead of core_<i>.pim (default: off)",
    )
    cp.add_argument(
        "--pim-disable-synchronization",
        action="store_true",
        help="Raptor: no sync/wait tokens; faster and allowed to fail validation (default: off)",
    )
    cp.add_argument(
        "--pim-disable-spatial-planning",
        action="store_true",
        help="Raptor: one replica per layer, cores in plain order (default: off)",
    )
    cp.add_argument(
        "--pim-disable-noc-dataflow",
        action="store_true",
        help="Raptor: pass every activation through host memory instead of core to core over "
        "the NoC (default: off)",
    )
    cp.add_argument(
        "--pim-disable-sibling-merge",
        action="store_true",
        help="Raptor: keep GEMM layers that read the same input apart (default: off)",
    )
    cp.add_argument(
        "--pim-disable-line-buffer",
        action="store_true",
        help="Raptor: load every window per pixel, line buffers only where the NoC dataflow "
        "needs them (default: off)",
    )
    cp.add_argument(
        "--pim-disable-pixel-chunks",
        action="store_true",
        help="Raptor: one contiguous pixel range per replica; by default the planner also tries "
        "interleaved pixel chunks and keeps the plan with the shorter estimated schedule "
        "(default: off)",
    )
    cp.add_argument(
        "--pim-disable-row-chunks",
        action="store_true",
        help="Raptor: pixel chunks only as near-equal pixel ranges; by default the planner also "
        "tries chunks of whole output rows for the layers whose replicas get two rows or more "
        "(default: off)",
    )
    cp.add_argument(
        "--pim-disable-window-packing",
        action="store_true",
        help="Raptor: place nodes on cores by their total load only; by default the planner "
        "also repacks them by the load within each layer's time window of the estimated "
        "schedule, and the winning plan by how long a core's nodes would hold each other back "
        "in layer order, and keeps the shorter plan (default: off)",
    )
    cp.add_argument(
        "--pim-disable-mesh-placement",
        action="store_true",
        help="Raptor: keep the planner's snake numbering of the cores; by default the emitted "
        "program's cores are renumbered so that its messages travel few hops (default: off)",
    )
    cp.add_argument(
        "--pim-row-segments",
        type=int,
        default=ROW_SEGMENTS,
        metavar="N",
        help="Raptor: cut each output row a NoC node computes and sends into up to N segments "
        "of one pixel or more, so that consumers start before a row is finished; more "
        "segments overlap layers more for more instructions and compile time "
        f"(default: {ROW_SEGMENTS})",
    )
    cp.add_argument(
        "--pim-row-segment-pixels",
        type=int,
        default=ROW_SEGMENT_PIXELS,
        metavar="N",
        help="Raptor: the fewest pixels of a row segment; more keep packed remainder tiles "
        f"whole at the cost of coarser streaming of narrow rows (default: {ROW_SEGMENT_PIXELS})",
    )
    cp.add_argument(
        "--pim-row-group-tiles",
        type=int,
        default=None,
        metavar="N",
        help="Raptor: put at most N row tiles (crossbar rows) of a weight layer in one row "
        "group, the part of a replica one core computes (partial sums add up over the NoC); "
        "0: as many as fit one core. Smaller groups spread a layer's MVMs over more cores for "
        f"the same crossbars (default: {ROW_GROUP_TILES_LATENCY} in a planned latency compile, "
        "else 0)",
    )
    cp.add_argument(
        "--pim-pack-pixels",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="Raptor: let one mvmul of a weight layer's short last row tile (at most half a "
        "crossbar's rows) serve up to N pixels, its weights held block-diagonally once per pixel "
        "(1: one mvmul per pixel and tile); several N: plan once per N and keep the plan that "
        "ends first (default: "
        f"{' '.join(map(str, PACK_PIXELS_LATENCY))} in a planned latency compile with the NoC "
        f"dataflow, {' '.join(map(str, PACK_PIXELS_THROUGHPUT))} in a planned throughput one, "
        f"{PACK_PIXELS} unplanned, else 1)",
    )
    cp.add_argument(
        "--pim-small-layer-group-tiles",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="Raptor: plan once for each N, cutting the weight layers of at most "
        f"{SMALL_LAYER_PIXELS} output pixels into row groups of N tiles (0: as the other "
        "layers), and keep the plan whose estimated schedule ends first (the first wins ties) "
        "or, in latency mode, the fastest finalist "
        f"(default: {' '.join(map(str, SMALL_LAYER_GROUP_TILES_LATENCY))} in a planned latency "
        "compile with the NoC dataflow, else 0)",
    )
    cp.add_argument(
        "--pim-crossbar-shares",
        type=float,
        nargs="+",
        default=None,
        metavar="S",
        help="Raptor: plan once for each share S of the chip's crossbars that replication may "
        "buy and keep the plan whose estimated schedule ends first (the first share wins ties); "
        "fewer replicas can end sooner where full ones make concurrent layers share cores "
        f"(default: {' '.join(f'{x:g}' for x in CROSSBAR_SHARES_LATENCY)} in latency mode, 1 in "
        "throughput mode)",
    )
    cp.add_argument(
        "--pim-host-chunks",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="Raptor: plan once for each N, dealing the pixels of the layer that reads the "
        "network input from host memory (the first conv) to each replica in N chunks, whose "
        "halo rows the replicas share over the NoC, and keep the plan whose estimated schedule "
        "ends first (the first wins ties) or, in latency mode, the fastest finalist (default: "
        f"{' '.join(map(str, HOST_CHUNKS_LATENCY))} in a planned latency compile with the NoC "
        "dataflow and pixel chunks, else 1)",
    )
    cp.add_argument(
        "--pim-finalists",
        type=int,
        default=FINALISTS,
        metavar="N",
        help="Raptor, latency mode: program the plan of the shortest estimated schedule and up "
        f"to N - 1 runners-up whose estimates end within {FINALIST_MARGIN:.0%}% of it, simulate "
        "them and keep the fastest; 1: the estimate's choice, simulating nothing "
        f"(default: {FINALISTS})",
    )
    cp.add_argument(
        "--pim-fill-shares",
        type=float,
        nargs="*",
        default=None,
        metavar="S",
        help="Raptor: also plan once for each share S with the rest of the crossbars buying "
        "replicas of the slowest layer, kept likewise when its estimated schedule ends first; "
        "none: no such plan "
        f"(default: {' '.join(f'{x:g}' for x in FILL_SHARES)})",
    )
    cp.add_argument(
        "--pim-vector-splits",
        type=int,
        nargs="*",
        default=None,
        metavar="N",
        help="Raptor, latency mode: also plan once for each N with vector layers (pools) split "
        "until each node takes at most 1/N of the slowest GEMM node's time (instead of "
        f"1/{VECTOR_SPLIT}), with the winning plan's replication, kept when its estimated "
        "schedule ends first and its NoC plan returns no more consumers to host memory; none: "
        "no such plan "
        f"(default: {' '.join(map(str, VECTOR_SPLITS_LATENCY))} in a planned latency compile "
        "with the NoC dataflow)",
    )
    cp.add_argument(
        "--print-passes",
        action="store_true",
        help="print the compiler's pass list and the time of each pass (default: off)",
    )
    cp.set_defaults(func=_cmd_compile)

    sp = sub.add_parser("simulate", help="simulate a pim/ directory (values and timing)")
    sp.add_argument("dir", help="a pim/ directory or its parent")
    add_target_args(sp)
    sp.add_argument("--inputs", default=None, help=".npz of inputs (default: seeded random inputs)")
    sp.add_argument("--json", action="store_true", help=json_help)
    sp.add_argument(
        "--engine",
        choices=("ours", "pimsim-nn"),
        default="ours",
        help="our simulator (values and timing) or pimsim-nn's ChipTest (timing only) "
        "(default: ours)",
    )
    sp.add_argument("--pimsim-bin", default=None, help="ChipTest binary (default: $PIMSIM_NN_BIN)")
    sp.add_argument(
        "--trace",
        default=None,
        metavar="FILE.json",
        help="write a Perfetto / chrome://tracing timeline (and FILE.png, a cores x time heat "
        "map) (default: no trace)",
    )
    sp.set_defaults(func=_cmd_simulate)

    vp = sub.add_parser("validate", help="simulate and compare against onnxruntime")
    vp.add_argument("dir", help="a pim/ directory or its parent")
    vp.add_argument(
        "--model", required=True, help="the ONNX model the directory was compiled from (required)"
    )
    add_target_args(vp)
    vp.add_argument("--seed", type=int, default=0, help="seed of the reference inputs (default 0)")
    vp.add_argument("--json", action="store_true", help=json_help)
    vp.add_argument(
        "--intermediates",
        action="store_true",
        help="also compare every intermediate tensor the program stores; print the first one "
        "over the tolerance (default: outputs only)",
    )
    vp.set_defaults(func=_cmd_validate)

    bp = sub.add_parser(
        "bounds",
        help="ideal and machine latency/throughput bounds and the energy floor of a model on a chip",
    )
    bp.add_argument("model", help="ONNX model file")
    bp.add_argument("--arch", required=True, help=f"{arch_help} (required)")
    bp.add_argument(
        "--json",
        action="store_true",
        help="print every figure (and the best replication) as JSON instead of the summary "
        "(default: off)",
    )
    bp.set_defaults(func=_cmd_bounds)
    return p


EXIT_USER_ERROR = 2  # bad input: one line naming the problem (argparse uses 2 as well)
EXIT_INTERNAL_ERROR = 70  # a bug in raptor (EX_SOFTWARE): one line + a log with the traceback


def _internal_error(e: BaseException, debug: bool) -> int:
    """One line for an unexpected exception; the traceback goes to a log file (or, with
    --debug, to stderr)."""
    import tempfile
    import time
    import traceback

    tb = traceback.format_exc()
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    what = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
    if debug:
        print(tb, end="", file=sys.stderr)
        print(f"raptor: internal error: {what}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
    where = "(could not write a log)"
    try:
        fd, log = tempfile.mkstemp(
            prefix=f"raptor-internal-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".log"
        )
        with os.fdopen(fd, "w") as f:
            f.write(f"raptor {' '.join(sys.argv[1:])}\n{tb}")
        where = f"(traceback in {log}; rerun with --debug to print it)"
    except OSError:
        pass
    print(f"raptor: internal error: {what} {where}", file=sys.stderr)
    return EXIT_INTERNAL_ERROR


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RaptorError as e:
        print(f"raptor: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("raptor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`raptor ... | head`)
        with contextlib.suppress(OSError, ValueError):  # no flush error at exit either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:  # the file system refused a path the user gave (permissions, space)
        if e.filename is None:
            return _internal_error(e, args.debug)
        print(f"raptor: error: {e.filename}: {e.strerror}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as e:  # noqa: BLE001 - anything else is a bug: one line and a log
        return _internal_error(e, args.debug)


if __name__ == "__main__":
    sys.exit(main())
