"""`raptor` command line: argument parsing only; every subcommand calls the library."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from raptor.errors import RaptorError


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
    from raptor.isa.inspect import inspect_pimdir

    summary = inspect_pimdir(args.dir)
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


def _compile_options(args: argparse.Namespace):
    from raptor.options import CompileOptions

    return CompileOptions(
        mode=args.mode,
        pipeline=args.pipeline
        if args.pipeline is not None
        else (4 if args.mode == "throughput" else 1),
        disable_synchronization=args.pim_disable_synchronization,
        disable_spatial_planning=args.pim_disable_spatial_planning,
        disable_noc_dataflow=args.pim_disable_noc_dataflow,
        compiler=args.compiler,
        replication=args.replication,
    )


def _cmd_compile(args: argparse.Namespace) -> int:
    from raptor.arch import load_arch
    from raptor.compiler import compile_to_dir

    report = compile_to_dir(
        args.model,
        load_arch(args.arch),
        _compile_options(args),
        args.out,
        emit_json=args.pim_emit_json,
    )
    print(
        f"wrote {Path(args.out) / 'pim'}: {report['cores_used']} cores, "
        f"{report['crossbars_used']} crossbars, {report['instructions_total']} instructions"
    )
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from raptor.arch import load_arch

    if args.engine == "pimsim-nn":
        from raptor.sim.pimsim_engine import run_pimsim

        report = run_pimsim(
            args.dir,
            load_arch(args.arch),
            mode=args.mode,
            pipeline=args.pipeline,
            binary=args.pimsim_bin,
        )
        print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
        return 0
    from raptor.sim import simulate_dir

    report = simulate_dir(
        args.dir, load_arch(args.arch), mode=args.mode, pipeline=args.pipeline, inputs=args.inputs
    )
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from raptor.arch import load_arch
    from raptor.validation.compare import validate_dir

    verdict = validate_dir(
        args.dir,
        args.model,
        load_arch(args.arch),
        mode=args.mode,
        pipeline=args.pipeline,
        seed=args.seed,
        intermediates=args.intermediates,
    )
    print(json.dumps(verdict.to_dict(), indent=2) if args.json else verdict.format())
    return 0 if verdict.passed else 1


def _cmd_bounds(args: argparse.Namespace) -> int:
    from raptor.arch import load_arch
    from raptor.bounds import compute_bounds

    b = compute_bounds(args.model, load_arch(args.arch))
    print(json.dumps(b, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="raptor", description="ONNX to ReRAM-crossbar PIM compiler and simulator"
    )
    sub = p.add_subparsers(dest="command", required=True)

    arch = sub.add_parser("arch", help="architecture files").add_subparsers(
        dest="arch_command", required=True
    )
    show = arch.add_parser("show", help="summarise an architecture (name or JSON path)")
    show.add_argument("arch")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=_cmd_arch_show)
    ex = arch.add_parser(
        "export-pimsim", help="write the pimsim-nn arch config and NoC table for an architecture"
    )
    ex.add_argument("arch")
    ex.add_argument("--out", required=True, help="directory for config.json and network.json")
    ex.add_argument("--mode", choices=("latency", "throughput"), default="latency")
    ex.set_defaults(func=_cmd_arch_export_pimsim)

    ins = sub.add_parser("inspect", help="summarise a pim/ directory (either instruction format)")
    ins.add_argument("dir")
    ins.add_argument("--json", action="store_true")
    ins.set_defaults(func=_cmd_inspect)

    models = sub.add_parser("models", help="the model suite").add_subparsers(
        dest="models_command", required=True
    )
    mb = models.add_parser("build", help="build a suite model as ONNX")
    mb.add_argument("name", help="vgg8, resnet18, resnet34, googlenet or yolo11n")
    mb.add_argument("--out", required=True)
    mb.add_argument(
        "--input-size",
        type=int,
        default=None,
        help="input height = width (default: the model's own)",
    )
    mb.add_argument("--seed", type=int, default=0)
    mb.add_argument(
        "--activations",
        choices=("probe", "realistic"),
        default="probe",
        help="yolo11n only: realistic = batch-calibrated BN with a trained detector's magnitudes",
    )
    mb.set_defaults(func=_cmd_models_build)

    def add_run_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--arch", required=True, help="arch-a, arch-b, arch-c or a JSON file")
        sp.add_argument("--mode", choices=("latency", "throughput"), default="latency")
        sp.add_argument(
            "--pipeline",
            type=int,
            default=None,
            help="inputs streamed in throughput mode (default 4)",
        )

    cp = sub.add_parser("compile", help="compile an ONNX model to a pim/ directory")
    cp.add_argument("model")
    add_run_args(cp)
    cp.add_argument("--out", required=True, help="output directory (pim/ and compile_report.json)")
    cp.add_argument("--compiler", choices=("raptor", "pimcomp"), default="raptor")
    cp.add_argument(
        "--replication",
        choices=("balance", "W0H0", "uniform"),
        default="balance",
        help="pimcomp only",
    )
    cp.add_argument(
        "--pim-emit-json", action="store_true", help="write core_<i>.json instead of core_<i>.pim"
    )
    cp.add_argument("--pim-disable-synchronization", action="store_true")
    cp.add_argument("--pim-disable-spatial-planning", action="store_true")
    cp.add_argument(
        "--pim-disable-noc-dataflow",
        action="store_true",
        help="Raptor: pass every activation through host memory instead of core to core over "
        "the NoC (default: off)",
    )
    cp.set_defaults(func=_cmd_compile)

    sp = sub.add_parser("simulate", help="simulate a pim/ directory (values and timing)")
    sp.add_argument("dir")
    add_run_args(sp)
    sp.add_argument("--inputs", default=None, help=".npz of inputs (default: seeded random inputs)")
    sp.add_argument("--json", action="store_true")
    sp.add_argument(
        "--engine",
        choices=("ours", "pimsim-nn"),
        default="ours",
        help="our simulator (values and timing) or pimsim-nn's ChipTest (timing only)",
    )
    sp.add_argument("--pimsim-bin", default=None, help="ChipTest binary (default: $PIMSIM_NN_BIN)")
    sp.set_defaults(func=_cmd_simulate)

    vp = sub.add_parser("validate", help="simulate and compare against onnxruntime")
    vp.add_argument("dir")
    vp.add_argument("--model", required=True)
    add_run_args(vp)
    vp.add_argument("--seed", type=int, default=0)
    vp.add_argument("--json", action="store_true")
    vp.add_argument(
        "--intermediates",
        action="store_true",
        help="also compare every intermediate tensor the program stores; print the first one "
        "over the tolerance",
    )
    vp.set_defaults(func=_cmd_validate)

    bp = sub.add_parser(
        "bounds", help="ideal latency/throughput/energy bounds of a model on a chip"
    )
    bp.add_argument("model")
    bp.add_argument("--arch", required=True)
    bp.set_defaults(func=_cmd_bounds)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RaptorError as e:
        print(f"raptor: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("raptor: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
