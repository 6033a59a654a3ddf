"""Our pimcomp next to the released PIMCOMP-NN (github sunxt99/PIMCOMP-NN at 2ed10c8) on the same
networks, architectures and replication methods.

    PIMCOMP_NN_BIN=/path/to/PIMCOMP-NN .venv/bin/python benchmarks/pimcomp_nn.py \\
        [--models vgg8 resnet18 resnet34 googlenet] [--archs arch-a arch-b] \\
        [--methods balance W0H0 uniform] [--input-size N] [--no-simulate] \\
        [--out-dir benchmarks/out/pimcomp_nn]

Each suite model is converted from our graph IR to the released model JSON
(`raptor.pimcomp.released.model_json`) and each architecture to its config.json (same cores,
crossbars per core, and crossbars as wide in weights as ours). Per case the released binary runs
in HT ("batch") mode and, when its LL scheduler accepts the network (`ll_name`), in LL
("element") mode; our pimcomp plans the same case. layers.csv has one row per GEMM layer
(replicas, array groups, crossbars, cores, same core for every AG); summary.csv one row per
model x arch x method with the released evaluator's HT period and LL latency next to what our
pimcomp programs give in our simulator (throughput mode, pipeline 4: N / deadline(N-1) and the
steady-state (N-1) / (deadline(N-1) - deadline(0)), the quantity the released HT period measures;
latency mode), unless
--no-simulate, and the work both do per inference: MVMs (its evaluator's #MVMUL, our mvmul
instructions) and global-memory bytes (its MEM volume, our ld + st bytes); tables.md both as markdown. The released binary is never part of this repository: build it yourself (CMake,
g++; README, "pimcomp vs the released PIMCOMP-NN").
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

from raptor.suite.runner import write_csv

SUMMARY = [
    "model",
    "arch",
    "method",
    "status",
    "gemm_layers",
    "same_replicas",
    "same_ags",
    "same_crossbars",
    "same_cores",
    "ours_crossbars",
    "released_crossbars",
    "ours_ags",
    "released_ags",
    "released_mvmul",
    "ours_mvmul",
    "released_mem_mb",
    "ours_host_mb",
    "released_ht_period_ns",
    "released_ht_tput_ips",
    "ours_ht_tput_ips",
    "ours_ht_steady_ips",
    "released_ll_latency_ms",
    "ours_ll_latency_ms",
    "released_ll_status",
    "released_wall_s",
    "error",
]
LAYERS = ["model", "arch", "method"]


def _g(x: float) -> str:
    return f"{x:.4g}"


def run_case(graph, onnx_model, model: str, arch_name: str, method: str, args, work: Path):
    import numpy as np

    from raptor.arch import load_arch
    from raptor.compiler import compile_model
    from raptor.isa.opcodes import Opcode
    from raptor.options import CompileOptions
    from raptor.pimcomp import plan_model
    from raptor.pimcomp.released import (
        ReleasedRunError,
        compare,
        hardware_config,
        ll_name,
        model_json,
        run_released,
    )
    from raptor.sim import simulate

    arch = load_arch(arch_name)
    row: dict = {"model": model, "arch": arch_name, "method": method}
    mj, cfg = model_json(graph), hardware_config(arch)
    t0 = time.perf_counter()
    try:
        rel = run_released(args.bin, mj, cfg, work / "ht", method, "batch")
    except ReleasedRunError as e:
        row.update(status="released failed", error=str(e))
        rel = None
    row["released_wall_s"] = f"{time.perf_counter() - t0:.1f}"
    try:
        plan = plan_model(graph, arch, CompileOptions(compiler="pimcomp", replication=method))
    except Exception as e:  # noqa: BLE001 - reported in the row
        row.update(status="ours failed", error=f"{row.get('error', '')} ours: {e}".strip())
        return row, []
    ours_xb, ours_ags = sum(a.crossbars for a in plan.ags), len(plan.ags)
    row.update(ours_crossbars=ours_xb, ours_ags=ours_ags)
    layers = []
    if rel is not None:
        layers = [
            {"model": model, "arch": arch_name, "method": method, **r} for r in compare(plan, rel)
        ]
        n = len(layers)
        row["status"] = "ok"
        row["gemm_layers"] = n
        for key, a, b in [
            ("same_replicas", "ours_replicas", "released_replicas"),
            ("same_ags", "ours_ags", "released_ags"),
            ("same_crossbars", "ours_crossbars", "released_crossbars"),
        ]:
            row[key] = sum(r[a] == r[b] for r in layers)
        row["same_cores"] = sum(r["same_cores"] == "yes" for r in layers)
        row["released_crossbars"], row["released_ags"] = rel.crossbars_needed, rel.ags_needed
        row["released_mvmul"] = int(rel.totals.get("MVMUL", 0))
        row["released_mem_mb"] = _g(rel.totals.get("MEM_bytes", 0) / 1e6)
        row["released_ht_period_ns"] = _g(rel.practical_ns)
        row["released_ht_tput_ips"] = _g(1e9 / rel.practical_ns)
        name = ll_name(mj)
        if name is None:
            row["released_ll_status"] = "no listed name"
        else:
            try:
                ll = run_released(args.bin, mj, cfg, work / "ll", method, "element", name)
                row["released_ll_latency_ms"] = _g(ll.practical_ns / 1e6)
                row["released_ll_status"] = ll.ll_check
            except ReleasedRunError as e:
                row["released_ll_status"] = (
                    str(e).split(":")[0].removeprefix("released PIMCOMP-NN ")
                )
    if args.simulate:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for mode, pipeline in (("throughput", 4), ("latency", 1)):
                opts = CompileOptions(
                    compiler="pimcomp", mode=mode, pipeline=pipeline, replication=method
                )
                try:
                    prog = compile_model(onnx_model, arch, opts).program
                    rep = simulate(prog, arch, mode, pipeline)
                except Exception as e:  # noqa: BLE001 - reported in the row
                    row["error"] = f"{row.get('error', '')} ours {mode}: {e}".strip()
                    continue
                if mode == "throughput":  # one round of the program = one inference
                    row["ours_mvmul"] = sum(
                        int((c["opcode"] == Opcode.MVMUL).sum()) for c in prog.cores
                    )
                    host = sum(
                        int(c["generic3"][np.isin(c["opcode"], (Opcode.LD, Opcode.ST))].sum())
                        for c in prog.cores
                    )
                    row["ours_host_mb"] = _g(host / 1e6)
                    row["ours_ht_tput_ips"] = _g(rep.throughput_per_s)
                    d = rep.deadlines_ns  # steady state: the period after the pipeline filled
                    row["ours_ht_steady_ips"] = _g((len(d) - 1) * 1e9 / (d[-1] - d[0]))
                else:
                    row["ours_ll_latency_ms"] = _g(rep.latency_ns / 1e6)
    return row, layers


def markdown(rows: list[dict], columns: list[str]) -> str:
    """A markdown table of `columns` (the README's tables are pasted from these files)."""
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(out) + "\n"


def readme_rows(summary: list[dict]) -> list[dict]:
    """The README's summary table: what agrees, then the work and the two cost models."""
    out = []
    for r in summary:
        row = {"model": r["model"], "arch": r["arch"], "method": r["method"]}
        key = "same replicas, AGs, crossbars, cores"
        if r.get("status") == "ok":
            n = r["gemm_layers"]
            same = [r[k] for k in ("same_replicas", "same_ags", "same_crossbars", "same_cores")]
            row[key] = (
                f"all {n} layers" if set(same) == {n} else " / ".join(f"{x}/{n}" for x in same)
            )
        else:
            why = r.get("error", "").split(": ", 1)[-1].split(".")[0]
            row[key] = f"{r.get('status', '')}: {why}"
        for k in ("crossbars", "ags", "mvmul"):
            a, b = r.get(f"ours_{k}", ""), r.get(f"released_{k}") or "-"
            row[{"ags": "AGs", "mvmul": "MVMs"}.get(k, k)] = f"{a}" if a == b else f"{a} / {b}"
        its = r.get("released_mem_mb") or "-"
        row["global MB its / ours"] = f"{its} / {r.get('ours_host_mb', '')}"
        its = r.get("released_ht_tput_ips") or "-"
        row["HT /s its / ours p4 (steady)"] = (
            f"{its} / {r.get('ours_ht_tput_ips', '')} ({r.get('ours_ht_steady_ips', '')})"
        )
        ll = r.get("released_ll_latency_ms") or "-"
        if r.get("released_ll_status") not in ("PASS", "", None):
            ll = f"{ll} ({r['released_ll_status']})" if ll != "-" else r["released_ll_status"]
        row["LL ms its / ours"] = f"{ll} / {r.get('ours_ll_latency_ms', '')}"
        out.append(row)
    return out


def write_markdown(out_dir: Path, summary: list[dict], layers: list[dict]) -> None:
    rows = readme_rows(summary)
    cols = list(dict.fromkeys(k for r in rows for k in r))
    parts = ["# summary\n", markdown(rows, cols)]
    for key in sorted({(r["model"], r["arch"], r["method"]) for r in layers}):
        parts += [f"\n# {' '.join(key)}\n"]
        rows = [r for r in layers if (r["model"], r["arch"], r["method"]) == key]
        parts.append(markdown(rows, compare_fields()))
    tmp = out_dir / ".tables.md.tmp"
    tmp.write_text("".join(parts))
    tmp.replace(out_dir / "tables.md")


def compare_fields() -> list[str]:
    from raptor.pimcomp.released import COMPARE_FIELDS

    return COMPARE_FIELDS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("PIMCOMP_NN_BIN"))
    ap.add_argument("--models", nargs="+", default=["vgg8", "resnet18", "resnet34", "googlenet"])
    ap.add_argument("--archs", nargs="+", default=["arch-a", "arch-b"])
    ap.add_argument("--methods", nargs="+", default=["balance", "W0H0", "uniform"])
    ap.add_argument("--input-size", type=int, default=None)
    ap.add_argument("--no-simulate", dest="simulate", action="store_false")
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/out/pimcomp_nn"))
    args = ap.parse_args(argv)
    if not args.bin or not Path(args.bin).is_file():
        print(
            "pimcomp_nn: the released PIMCOMP-NN binary is needed: --bin PATH or PIMCOMP_NN_BIN "
            f"(got {args.bin!r})",
            file=sys.stderr,
        )
        return 2
    bad = [m for m in args.methods if m not in ("balance", "W0H0", "uniform")]
    if bad:
        print(f"pimcomp_nn: unknown replication method {bad[0]!r}", file=sys.stderr)
        return 2
    from raptor.frontend import load_graph
    from raptor.models import build_model

    summary, layers = [], []
    with tempfile.TemporaryDirectory(prefix="pimcomp-nn-") as tmp:
        for model in args.models:
            onnx_model = build_model(model, args.input_size)
            graph = load_graph(onnx_model)
            for arch in args.archs:
                for method in args.methods:
                    t0 = time.perf_counter()
                    row, rows = run_case(
                        graph, onnx_model, model, arch, method, args, Path(tmp) / "run"
                    )
                    summary.append(row)
                    layers += rows
                    print(
                        f"{model} {arch} {method}: {row.get('status')} "
                        f"replicas {row.get('same_replicas', '-')}/{row.get('gemm_layers', '-')} "
                        f"cores {row.get('same_cores', '-')} "
                        f"({time.perf_counter() - t0:.1f} s)",
                        flush=True,
                    )
                    write_csv(args.out_dir / "summary.csv", SUMMARY, summary)
                    write_csv(args.out_dir / "layers.csv", LAYERS + compare_fields(), layers)
    write_markdown(args.out_dir, summary, layers)
    print(f"wrote {args.out_dir}/summary.csv, layers.csv and tables.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
