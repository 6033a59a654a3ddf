"""Simulator speed against pimsim-nn's ChipTest, side by side on the same pim/ directory, over the
default cases (models x archs x latency / throughput pipeline 4 x compilers raptor, pimcomp, full
size). Per case: instructions, our wall time and instructions/s, ChipTest's wall time and the
ratio. Writes sim_speed.csv (rewritten after every case).

    PIMSIM_NN_BIN=.../ChipTest .venv/bin/python benchmarks/sim_speed.py \\
        [--models vgg8 resnet18 resnet34 googlenet] [--archs arch-a arch-b] \\
        [--modes latency throughput] [--compilers raptor pimcomp] [--repeat 3] \\
        [--out-dir benchmarks/out/sim_speed]

Same work on both sides. Latency mode: one run of every core. Throughput mode: we run the
program's 4 rounds; ChipTest runs for the simulated time our 4th round ends (pimsim-nn loops
every core for a fixed time), so both simulate the same span and about the same instructions.
`ours_s` is the whole simulate_dir call (reading the directory included), the median of
`--repeat` runs (default 3; `ours_min_s` the fastest), `engine_s` the engine alone in that run
(warm: compiled code loaded from the cache), `chiptest_s` ChipTest's own wall time (one run);
`instr_per_s` = instructions / ours_s, `ratio` = chiptest_s / ours_s. `load` is the 1-minute
load average when the case starts: on a shared machine, figures taken under load are noisy.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIELDS = [
    "model",
    "arch",
    "mode",
    "compiler",
    "instructions",
    "compile_s",
    "ours_s",
    "ours_min_s",
    "engine_s",
    "instr_per_s",
    "chiptest_s",
    "ratio",
    "load",
    "status",
]


def run_case(model_path: Path, model: str, arch_name: str, mode: str, compiler: str, args) -> dict:
    from raptor.arch import load_arch
    from raptor.compiler import compile_to_dir
    from raptor.options import CompileOptions
    from raptor.sim import simulate_dir
    from raptor.sim.pimsim_engine import run_pimsim

    row = {"model": model, "arch": arch_name, "mode": mode, "compiler": compiler}
    row["load"] = f"{os.getloadavg()[0]:.2f}"
    arch = load_arch(arch_name)
    pipeline = 4 if mode == "throughput" else 1
    out = Path(args.out_dir) / "cases" / model / arch_name / mode / compiler
    opts = CompileOptions(compiler=compiler, mode=mode, pipeline=pipeline)
    t0 = time.perf_counter()
    compile_to_dir(model_path, arch, opts, out)
    row["compile_s"] = f"{time.perf_counter() - t0:.2f}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        runs = []
        for _ in range(max(1, args.repeat)):
            t0 = time.perf_counter()
            rep = simulate_dir(out)
            runs.append((time.perf_counter() - t0, rep))
    runs.sort(key=lambda r: r[0])
    dt, ours = runs[len(runs) // 2]
    row["instructions"] = ours.instructions_executed
    row["ours_s"] = f"{dt:.3f}"
    row["ours_min_s"] = f"{runs[0][0]:.3f}"
    row["engine_s"] = f"{ours.wall_time_s:.3f}"
    row["instr_per_s"] = f"{ours.instructions_executed / dt:.4g}"
    try:
        kw = {"binary": args.pimsim_bin, "wall_limit_s": args.wall_limit}
        if mode == "throughput":  # the simulated time our last round ends
            kw["sim_time_ms"] = ours.deadlines_ns[-1] / 1e6
        ref = run_pimsim(out / "pim", arch, mode, pipeline, **kw)
    except Exception as e:  # noqa: BLE001 - a table row, not a crash
        row["status"] = f"chiptest: {str(e).splitlines()[0][:80]}"
        return row
    pw = float(ref.pimsim.get("wall_s", ref.wall_time_s))
    row["chiptest_s"] = f"{pw:.2f}"
    row["ratio"] = f"{pw / dt:.1f}"
    row["status"] = "ok"
    return row


def warm_up() -> None:
    """Load the compiled engine once (from numba's cache, or compiling it on a first run), as
    every process does on its first simulation: not part of a case's time."""
    import numpy as np

    from raptor.arch import load_arch
    from raptor.isa.opcodes import Opcode
    from raptor.isa.pimdir import PimProgram
    from raptor.isa.table import make
    from raptor.sim import simulate

    prog = PimProgram(
        cores=[make(Opcode.SETBW, generic1=8, generic2=8)],
        array_group_map=[[]],
        weight_matrices=[],
        array_group_weights=[[]],
        memory=np.zeros(0, np.float32),
        meta={"element_bytes": 1},
    )
    simulate(prog, load_arch("arch-a"), engine="compiled")


def main(argv: list[str] | None = None) -> int:
    from raptor.suite.cases import DEFAULT_ARCHS, DEFAULT_MODELS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    ap.add_argument("--archs", nargs="+", default=list(DEFAULT_ARCHS))
    ap.add_argument("--modes", nargs="+", default=["latency", "throughput"])
    ap.add_argument("--compilers", nargs="+", default=["raptor", "pimcomp"])
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "sim_speed"))
    ap.add_argument("--pimsim-bin", default=os.environ.get("PIMSIM_NN_BIN"))
    ap.add_argument("--wall-limit", type=float, default=1800.0, help="ChipTest seconds per case")
    ap.add_argument("--repeat", type=int, default=3, help="our runs per case (median taken)")
    args = ap.parse_args(argv)
    if not args.pimsim_bin:
        print("set PIMSIM_NN_BIN or --pimsim-bin to ChipTest", file=sys.stderr)
        return 2
    from raptor.models import save_model

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    warm_up()
    print(f"compiled engine loaded in {time.perf_counter() - t0:.2f} s", flush=True)
    rows: list[dict] = []
    for model in args.models:
        model_path = save_model(model, out / "models" / f"{model}.onnx")
        for arch_name in args.archs:
            for mode in args.modes:
                for compiler in args.compilers:
                    try:
                        row = run_case(model_path, model, arch_name, mode, compiler, args)
                    except Exception as e:  # noqa: BLE001 - a table row, not a crash
                        row = {"model": model, "arch": arch_name, "mode": mode}
                        row |= {"compiler": compiler, "status": f"error: {str(e)[:80]}"}
                    rows.append(row)
                    with open(out / "sim_speed.csv", "w", newline="") as f:
                        w = csv.DictWriter(f, fieldnames=FIELDS)
                        w.writeheader()
                        w.writerows(rows)
                    print(" ".join(f"{k}={row.get(k, '')}" for k in FIELDS), flush=True)
    ok = [r for r in rows if r.get("status") == "ok"]
    if ok:
        worst = min(ok, key=lambda r: float(r["ratio"]))
        print(f"lowest ratio {worst['ratio']}x ({worst['model']} {worst['arch']} {worst['mode']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
