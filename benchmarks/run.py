#!/usr/bin/env python3
"""Performance benchmark (issue 9): every default case for Raptor and pimcomp, with each result's
fraction of the ideal bounds, compile and simulate wall times. Writes CSV + PNG.

    .venv/bin/python benchmarks/run.py [--out-dir benchmarks/out] [--jobs 2] [runner options...]

It runs the suite runner (both compilers) and then joins `raptor.bounds` figures per case:
`*_latency_vs_bound` = measured latency / budgeted latency lower bound (>= 1, lower is better),
`*_throughput_vs_bound` = measured throughput / throughput upper bound (<= 1, higher is better),
both against the ideal bounds (every crossbar busy), and `*_latency_vs_machine` /
`*_throughput_vs_machine` against the machine bounds (`latency_lb_machine_ns`,
`throughput_ub_machine_per_s`: any program on this machine model), and `*_mvm_vs_machine_min`,
the case's program's mvmuls over the fewest any program needs (its compile report). It ends with
how many Raptor latency programs are within MACHINE_TARGET x of the machine bound.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from raptor.figures import save_figure
from raptor.suite.charts import case_label
from raptor.suite.runner import write_csv

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out"))
    args, rest = p.parse_known_args(argv)
    from raptor.suite.runner import main as run_suite

    rc = run_suite(["--out-dir", args.out_dir, *rest])
    if rc not in (0, 1):
        return rc
    out = Path(args.out_dir)
    rows = list(csv.DictReader(open(out / "results_comparison.csv", newline="")))
    join_bounds(rows, out)
    path = out / "results_benchmark.csv"
    write_csv(path, list(rows[0]), rows)
    _chart(rows, path.with_suffix(".png"))
    for row in rows:
        print(
            f"{row['model']:>10} {row['arch']} {row['mode']:<10} p{row['pipeline']}: "
            f"raptor {row['raptor_functional_validation']} lat/bound {row['raptor_latency_vs_bound']} "
            f"tp/bound {row['raptor_throughput_vs_bound']} lat/machine {row['raptor_latency_vs_machine']} "
            f"| pimcomp {row['pimcomp_functional_validation']} "
            f"| speedup {row['latency_speedup']} tp-ratio {row['throughput_ratio']}"
        )
    lat = [r for r in rows if r["mode"] == "latency" and r.get("raptor_latency_vs_machine")]
    if lat:
        ratios = [float(r["raptor_latency_vs_machine"]) for r in lat]
        ok = sum(x <= MACHINE_TARGET for x in ratios)
        print(
            f"Raptor latency programs within {MACHINE_TARGET:g}x of the machine bound: {ok} of "
            f"{len(lat)} ({min(ratios):.2f}-{max(ratios):.2f}x)"
        )
    print(f"wrote {path}")
    return rc


MACHINE_TARGET = 3.0  # issue 15: Raptor latency within 3x of the machine bound


def join_bounds(rows: list[dict], out: Path) -> None:
    """Add the bounds of each row's model and chip (out/<model>/model.onnx) and every compiler's
    result against them (module docstring) to the suite rows, in place."""
    from raptor.arch import load_arch
    from raptor.bounds import compute_bounds

    cache: dict[tuple[str, str], dict] = {}
    for row in rows:
        key = (row["model"], row["arch"])
        if key not in cache:
            cache[key] = compute_bounds(out / row["model"] / "model.onnx", load_arch(row["arch"]))
        b = cache[key]
        lb = b["latency_lb_budget_ns"] / 1e6
        mlb = b["latency_lb_machine_ns"] / 1e6
        mub = b["throughput_ub_machine_per_s"]
        row["latency_lb_ms"] = f"{lb:.6g}"
        row["throughput_ub_ips"] = f"{b['throughput_ub_per_s']:.6g}"
        row["machine_lb_ms"] = f"{mlb:.6g}"
        row["machine_throughput_ub_ips"] = f"{mub:.6g}"
        for c in ("raptor", "pimcomp"):
            lat, tp = row.get(f"{c}_latency_ms"), row.get(f"{c}_throughput_ips")
            row[f"{c}_latency_vs_bound"] = f"{float(lat) / lb:.4g}" if lat else ""
            row[f"{c}_throughput_vs_bound"] = (
                f"{float(tp) / b['throughput_ub_per_s']:.4g}" if tp else ""
            )
            row[f"{c}_latency_vs_machine"] = f"{float(lat) / mlb:.4g}" if lat else ""
            row[f"{c}_throughput_vs_machine"] = f"{float(tp) / mub:.4g}" if tp else ""
            row[f"{c}_mvm_vs_machine_min"] = _mvm_ratio(out, row, c) if lat else ""


def _mvm_ratio(out: Path, row: dict, compiler: str) -> str:
    """The case's `mvm_vs_machine_min` (its program's mvmuls over the fewest any program needs),
    from its compile report; empty without one."""
    import json

    from raptor.suite.cases import CaseSpec

    pipeline = int(row.get("pipeline") or 1)
    case = CaseSpec(row["model"], row["arch"], row["mode"], pipeline, str(out)).case_dir
    try:
        rep = json.loads((case / compiler / "compile_report.json").read_text())
    except (OSError, ValueError):
        return ""
    ratio = rep.get("mvm_vs_machine_min")
    return "" if ratio is None else f"{ratio:.4g}"


def _chart(rows, path: Path) -> None:
    import matplotlib.pyplot as plt

    labels = [case_label(r) for r in rows]
    fig, axes = plt.subplots(3, 1, figsize=(max(7, 0.8 * len(rows) + 2), 11.5))
    for ax, (field, title) in zip(
        axes,
        (
            ("latency_vs_bound", "latency / ideal lower bound (lower is better, 1 = ideal)"),
            ("throughput_vs_bound", "throughput / ideal upper bound (higher is better, 1 = ideal)"),
            (
                "latency_vs_machine",
                f"latency / machine lower bound (any program on this machine; dashed: "
                f"{MACHINE_TARGET:g}x target)",
            ),
        ),
    ):
        if field == "latency_vs_machine":
            ax.axhline(MACHINE_TARGET, color="k", linestyle="--", linewidth=0.8)
        for k, (c, color) in enumerate((("raptor", "tab:blue"), ("pimcomp", "tab:orange"))):
            vals = [float(r[f"{c}_{field}"]) if r.get(f"{c}_{field}") else 0.0 for r in rows]
            ax.bar(
                [i + (k - 0.5) * 0.4 for i in range(len(rows))],
                vals,
                width=0.4,
                color=color,
                label=c,
            )
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
