"""pimsim-nn parity over the suite: each case compiled once, the same pim/ directory run through
our simulator and through pimsim-nn's ChipTest; the ratio ours/pimsim-nn per metric, and each
engine's wall time. Writes parity.csv (rewritten after every case) and parity.png.

    PIMSIM_NN_BIN=build/pimsim-nn/pimsim-nn/build/ChipTest .venv/bin/python benchmarks/parity.py \\
        [--models vgg8 resnet18] [--archs arch-a] [--compilers raptor pimcomp] \\
        [--modes latency throughput] [--wall-limit 600] [--out-dir benchmarks/out/parity] [--append]
    ... benchmarks/parity.py --micro [--csv OUT]      # the micro-programs of tests/parity instead

Metrics. Latency mode: latency and energy. Throughput mode (pipeline 4): pimsim-nn loops every
core for a fixed sim_time and reports rounds completed / sim_time and energy(sim_time) / rounds;
we run sim_time = halfway between our deadline(R-1) and deadline(R) with R = --rounds (4), and
compare the same quantities (tests/parity/test_compiled_parity.py explains why): our rounds
completed by sim_time / sim_time, our average power x sim_time / those rounds, and average power.
`ndl_ratio` is our R / deadline(R-1) over pimsim-nn's figure (an upper bound of it, for the record).
Wall times: ours is the simulate call (R+1 rounds in throughput mode), pimsim-nn's is ChipTest's
run (R + 0.5 rounds); a ChipTest run over --wall-limit seconds is a `timeout` row.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "parity"))

FIELDS = [
    "model",
    "arch",
    "mode",
    "compiler",
    "status",
    "ours_latency_ms",
    "pimsim_latency_ms",
    "latency_ratio",
    "ours_energy_uj",
    "pimsim_energy_uj",
    "energy_ratio",
    "ours_tput_ips",
    "pimsim_tput_ips",
    "tput_ratio",
    "ndl_ratio",
    "ours_power_mw",
    "pimsim_power_mw",
    "power_ratio",
    "sim_time_ms",
    "rounds_ours",
    "rounds_pimsim",
    "compile_s",
    "ours_wall_s",
    "pimsim_wall_s",
    "speedup",
    "error",
]


def rel(a: float, b: float) -> float:
    return (a - b) / b if b else float("nan")


def _g(x: float) -> str:
    return f"{x:.6g}"


def run_case(model_path, model, arch_name, mode, compiler, args, work: Path) -> dict:
    from raptor.arch import load_arch
    from raptor.compiler import compile_to_dir
    from raptor.errors import SimulationError
    from raptor.options import CompileOptions
    from raptor.sim import simulate_dir
    from raptor.sim.pimsim_engine import (
        mid_interval_sim_time_ms,
        run_pimsim,
        throughput_comparison,
    )

    row: dict = {"model": model, "arch": arch_name, "mode": mode, "compiler": compiler}
    arch = load_arch(arch_name)
    pipeline = 4 if mode == "throughput" else 1
    out = work / model / arch_name / mode / compiler
    t0 = time.perf_counter()
    compile_to_dir(
        model_path, arch, CompileOptions(compiler=compiler, mode=mode, pipeline=pipeline), out
    )
    row["compile_s"] = f"{time.perf_counter() - t0:.2f}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        t0 = time.perf_counter()
        # 2R+2 rounds of a pipeline-4 program (a deliberate override of its recorded pipeline):
        # up to pimsim-nn's sim_time no core may run out of rounds, as pimsim-nn's cores loop on
        # (with R+1, googlenet arch-b pimcomp's front cores stopped early: energy 7.5 % low)
        ours = simulate_dir(
            out, arch, mode, 2 * args.rounds + 2 if mode == "throughput" else 1, force_target=True
        )
        row["ours_wall_s"] = f"{time.perf_counter() - t0:.2f}"
    try:
        if mode == "latency":
            ref = run_pimsim(
                out / "pim", arch, "latency", binary=args.pimsim_bin, wall_limit_s=args.wall_limit
            )
        else:
            sim_ms = mid_interval_sim_time_ms(ours.deadlines_ns, args.rounds)
            row["sim_time_ms"] = _g(sim_ms)
            ref = run_pimsim(
                out / "pim",
                arch,
                "throughput",
                pipeline,
                binary=args.pimsim_bin,
                sim_time_ms=sim_ms,
                wall_limit_s=args.wall_limit,
            )
    except SimulationError as e:
        msg = str(e)
        row["status"] = "timeout" if "wall-clock limit" in msg else "error"
        row["pimsim_wall_s"] = f">{args.wall_limit:g}" if row["status"] == "timeout" else ""
        row["error"] = msg
        return row
    row["status"] = "ok"
    pw = float(ref.pimsim.get("wall_s", ref.wall_time_s))
    row["pimsim_wall_s"] = f"{pw:.2f}"
    row["speedup"] = f"{pw / max(float(row['ours_wall_s']), 1e-9):.2f}"
    if mode == "latency":
        pairs = {
            "latency": (ours.latency_ns / 1e6, ref.latency_ns / 1e6, "_ms"),
            "energy": (ours.energy_pj / 1e6, ref.energy_pj / 1e6, "_uj"),
            "power": (ours.power_mw, ref.power_mw, "_mw"),
        }
    else:
        c = throughput_comparison(ours, ref)
        row["rounds_ours"], row["rounds_pimsim"] = c["ours_rounds"], c["pimsim_rounds"]
        row["ndl_ratio"] = _g(c["ours_n_over_deadline"] / c["pimsim_tput"])
        pairs = {
            "tput": (c["ours_tput"], c["pimsim_tput"], "_ips"),
            "energy": (c["ours_energy_uj"], c["pimsim_energy_uj"], "_uj"),
            "power": (c["ours_power_mw"], c["pimsim_power_mw"], "_mw"),
        }
    for k, (a, b, unit) in pairs.items():
        row[f"ours_{k}{unit}"], row[f"pimsim_{k}{unit}"] = _g(a), _g(b)
        row[f"{k}_ratio"] = _g(a / b) if b else "nan"
    return row


def write_csv(rows: list[dict], path: Path) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        return
    labels = [f"{r['model']}\n{r['arch']} {r['mode'][:3]}\n{r['compiler']}" for r in ok]
    metrics = [
        ("latency_ratio", "latency"),
        ("tput_ratio", "throughput"),
        ("energy_ratio", "energy"),
    ]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(max(8, 1.1 * len(ok)), 8))
    width = 0.27
    for j, (key, name) in enumerate(metrics):
        xs = [i + (j - 1) * width for i in range(len(ok))]
        ys = [float(r[key]) if r.get(key) else float("nan") for r in ok]
        ax.bar(xs, ys, width, label=name)
    ax.axhline(1.0, color="k", lw=0.8)
    for band in (0.95, 1.05):
        ax.axhline(band, color="gray", lw=0.6, ls="--")
    ax.set_ylim(0.9, 1.1)
    ax.set_ylabel("ours / pimsim-nn")
    ax.set_xticks(range(len(ok)), labels, fontsize=7)
    ax.legend(fontsize=8)
    ax.set_title("Raptor simulator vs pimsim-nn (same pim/ directory)")
    xs = range(len(ok))
    ax2.bar([x - 0.2 for x in xs], [float(r["ours_wall_s"]) for r in ok], 0.4, label="ours")
    ax2.bar([x + 0.2 for x in xs], [float(r["pimsim_wall_s"]) for r in ok], 0.4, label="pimsim-nn")
    ax2.set_yscale("log")
    ax2.set_ylabel("wall time (s)")
    ax2.set_xticks(range(len(ok)), labels, fontsize=7)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def suite(args) -> int:
    from raptor.models import save_model

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "cases"
    rows: list[dict] = []
    csv_path = out / "parity.csv"
    if args.append and csv_path.is_file():
        rows = list(csv.DictReader(open(csv_path, newline="")))
    key = ("model", "arch", "mode", "compiler")
    for model in args.models:
        model_path = save_model(model, out / "models" / f"{model}.onnx")
        for arch_name in args.archs:
            for mode in args.modes:
                for compiler in args.compilers:
                    t0 = time.perf_counter()
                    try:
                        row = run_case(model_path, model, arch_name, mode, compiler, args, work)
                    except Exception as e:  # noqa: BLE001 - a table row, not a crash
                        row = {
                            "model": model,
                            "arch": arch_name,
                            "mode": mode,
                            "compiler": compiler,
                            "status": "error",
                            "error": str(e).splitlines()[0] if str(e) else type(e).__name__,
                        }
                    rows = [r for r in rows if [r[k] for k in key] != [row[k] for k in key]]
                    rows.append(row)
                    write_csv(rows, csv_path)
                    r = row
                    print(
                        f"{model:9} {arch_name} {mode:10} {compiler:7} {r['status']:7} "
                        f"lat {r.get('latency_ratio', '-'):>8} tput {r.get('tput_ratio', '-'):>8} "
                        f"energy {r.get('energy_ratio', '-'):>8} power {r.get('power_ratio', '-'):>8} "
                        f"wall ours {r.get('ours_wall_s', '-')} s pimsim {r.get('pimsim_wall_s', '-')} s "
                        f"({time.perf_counter() - t0:.0f} s) {r.get('error', '')}",
                        flush=True,
                    )
    chart(rows, out / "parity.png")
    print(f"wrote {csv_path} and {out / 'parity.png'}")
    return 0


def micro(args) -> int:
    from parity_micro import micros

    from raptor.isa.pimdir import write_pimdir
    from raptor.sim import simulate
    from raptor.sim.pimsim_engine import run_pimsim

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in micros():
            arch = m.get_arch()
            d = write_pimdir(m.prog, Path(tmp) / m.name)
            p = run_pimsim(
                d, arch, m.mode, m.pipeline, binary=args.pimsim_bin, sim_time_ms=m.sim_time_ms
            )
            if m.mode == "latency":
                ref_t, ref_e = p.latency_ns, p.energy_pj
            else:
                ref_t, ref_e = 1e9 / p.throughput_per_s, p.energy_per_inference_uj * 1e6
            row = {"name": m.name, "mode": m.mode, "pimsim_ns": ref_t, "pimsim_pj": ref_e}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                r = simulate(m.prog, arch, m.mode, p.pipeline if m.mode != "latency" else 1)
            if m.mode == "latency":
                ours_t, ours_e = r.latency_ns, r.energy_pj
            else:
                ours_t, ours_e = 1e9 / r.throughput_per_s, r.energy_per_inference_uj * 1e6
            row.update(ours_ns=ours_t, ours_pj=ours_e)
            row.update(d_ns=rel(ours_t, ref_t), d_pj=rel(ours_e, ref_e))
            rows.append(row)
            print(
                f"{m.name:24} {m.mode:10} pimsim {ref_t:10.3f} ns {ref_e:12.2f} pJ   "
                f"ours {ours_t:10.3f} ns {ours_e:12.2f} pJ   "
                f"d {row['d_ns'] * 100:+7.2f}% {row['d_pj'] * 100:+7.2f}%",
                flush=True,
            )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


def main(argv: list[str] | None = None) -> int:
    from raptor.suite.cases import DEFAULT_ARCHS, DEFAULT_MODELS

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    ap.add_argument("--archs", nargs="+", default=list(DEFAULT_ARCHS))
    ap.add_argument("--compilers", nargs="+", default=["raptor", "pimcomp"])
    ap.add_argument("--modes", nargs="+", default=["latency", "throughput"])
    ap.add_argument("--rounds", type=int, default=4, help="pimsim-nn rounds in throughput mode")
    ap.add_argument("--wall-limit", type=float, default=600.0, help="seconds per ChipTest run")
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "parity"))
    ap.add_argument("--pimsim-bin", default=None)
    ap.add_argument("--append", action="store_true", help="keep the other rows of parity.csv")
    ap.add_argument("--micro", action="store_true", help="the micro-programs of tests/parity")
    ap.add_argument("--csv", default=None, help="--micro: write the table here")
    args = ap.parse_args(argv)
    return micro(args) if args.micro else suite(args)


if __name__ == "__main__":
    sys.exit(main())
