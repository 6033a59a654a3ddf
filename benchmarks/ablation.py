#!/usr/bin/env python3
"""Full default ablation benchmark (issue 7): runs run_ablation.py as a user would and records
its wall time and every case's compile and simulate time. Target: < 30 min with --jobs 2 on a
2-core machine.

    .venv/bin/python benchmarks/ablation.py [--jobs 2] [--out-dir benchmarks/out/ablation] [extra ablation options]

Writes <out-dir>/benchmark_ablation.csv (one row per variant and case, plus a TOTAL row) and
benchmark_ablation.png (per-case compile + simulate seconds by variant).
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from pathlib import Path

from raptor.figures import save_figure
from raptor.suite.charts import case_label
from raptor.suite.runner import write_csv

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "validation" / "tools" / "pim" / "ablation" / "run_ablation.py"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "ablation"))
    args, rest = p.parse_known_args(argv)
    out = Path(args.out_dir)
    t0 = time.perf_counter()
    rc = subprocess.call(
        [sys.executable, str(SCRIPT), "--out-dir", str(out), "--jobs", str(args.jobs), *rest]
    )
    wall = time.perf_counter() - t0
    rows = []
    for summary in sorted((out / "ablation").glob("*/results_comparison.csv")):
        for r in csv.DictReader(open(summary, newline="")):
            rows.append(
                {
                    "variant": summary.parent.name,
                    "model": r["model"],
                    "arch": r["arch"],
                    "mode": r["mode"],
                    "pipeline": r["pipeline"],
                    "validation": r["raptor_functional_validation"],
                    "compile_s": r["raptor_compile_s"],
                    "simulate_s": r["raptor_simulate_s"],
                    "instructions": r["raptor_instructions"],
                }
            )
    rows.append(
        {
            "variant": "TOTAL",
            "model": f"exit {rc}",
            "arch": f"jobs {args.jobs}",
            "mode": "",
            "pipeline": "",
            "validation": "",
            "compile_s": "",
            "simulate_s": f"{wall:.1f}",
            "instructions": "",
        }
    )
    path = out / "benchmark_ablation.csv"
    write_csv(path, list(rows[0]), rows)
    _chart(rows[:-1], wall, path.with_suffix(".png"))
    print(
        f"full ablation: {wall / 60:.1f} min wall with --jobs {args.jobs} (exit {rc}); {len(rows) - 1} case runs -> {path}"
    )
    return 0


def _chart(rows, wall: float, path: Path) -> None:
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(case_label(r) for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    fig, ax = plt.subplots(figsize=(max(7, 0.7 * len(cases) + 2), 4.5))
    width = 0.8 / max(1, len(variants))
    for k, v in enumerate(variants):
        xs, ys = [], []
        for i, c in enumerate(cases):
            r = next((r for r in rows if r["variant"] == v and case_label(r) == c), None)
            if r and r["compile_s"] and r["simulate_s"]:
                xs.append(i + (k - (len(variants) - 1) / 2) * width)
                ys.append(float(r["compile_s"]) + float(r["simulate_s"]))
        ax.bar(xs, ys, width=width, label=v)
    ax.set_ylabel("compile + simulate (s)")
    ax.set_title(f"default ablation: {wall / 60:.1f} min wall in total", fontsize=10)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
