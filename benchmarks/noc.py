#!/usr/bin/env python3
"""NoC dataflow before/after: each model compiled by Raptor with every activation through host
memory (`--pim-disable-noc-dataflow`, the dataflow before the NoC pass), with the NoC dataflow and
one contiguous pixel range per replica (`--pim-disable-pixel-chunks --pim-disable-window-packing`),
with interleaved pixel chunks where they plan shorter (`--pim-disable-window-packing`), with
chunks and window packing planned with every crossbar (`--pim-crossbar-shares 1
--pim-fill-shares`) and with the default (the same, also planned with smaller shares of the
crossbars and a fill share in latency mode), simulated
at full size, with the mean per-core breakdown of the latency (matrix busy, vector, transfer,
sync stall, recv stall, memory stall), the critical path of the run by category
(raptor.sim.critical_path: `path_*`, shares of the latency), host and NoC bytes per inference,
and the machine bounds. Writes CSV + PNG.

    .venv/bin/python benchmarks/noc.py [--models vgg8 resnet18 resnet34 googlenet]
        [--archs arch-a] [--mode latency|throughput] [--dataflows host noc-contiguous ...]
        [--out-dir benchmarks/out/noc]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from raptor.arch import load_arch
from raptor.compiler import compile_model
from raptor.figures import save_figure
from raptor.models import build_model
from raptor.options import CompileOptions
from raptor.sim import simulate
from raptor.sim.critical_path import critical_path
from raptor.suite.runner import write_csv

ROOT = Path(__file__).resolve().parents[1]
SHARES = ("matrix_busy_ns", "vector_busy_ns", "transfer_busy_ns")
STALLS = ("stall_sync_ns", "stall_recv_ns", "stall_memory_ns")
# critical-path columns (shares of the path, which is the run's end) and their categories
PATH = {
    "matrix": ("matrix",),
    "vector": ("vector",),
    "transfer": ("send", "recv", "local"),
    "send_wait": ("send wait",),
    "memory": ("memory", "memory stall"),
}
FLOWS = {
    "host": {"disable_noc_dataflow": True},
    "noc-contiguous": {"disable_pixel_chunks": True, "disable_window_packing": True},
    "noc-chunks": {"disable_window_packing": True, "crossbar_shares": (1.0,), "fill_shares": ()},
    "noc-full-share": {"crossbar_shares": (1.0,), "fill_shares": ()},
    "noc": {},
}


def measure(model, arch, opts: CompileOptions, seed: int = 0) -> dict[str, str]:
    t0 = time.perf_counter()
    res = compile_model(model, arch, opts)
    t1 = time.perf_counter()
    rng = np.random.default_rng(seed)
    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    ins = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(opts.pipeline)]
    rep = simulate(res.program, arch, opts.mode, opts.pipeline, ins, trace=True)
    t2 = time.perf_counter()
    path = critical_path(rep, res.program.meta)
    used = [c for c in rep.per_core if c.instructions]
    lat = rep.latency_ns
    row = {
        "latency_ms": f"{lat / 1e6:.4f}",
        "throughput_ips": f"{rep.throughput_per_s:.2f}",
        "energy_uj": f"{rep.energy_per_inference_uj:.1f}",
        "host_mb": f"{rep.host_bytes_per_inference / 1e6:.3f}",
        "noc_mb": f"{rep.noc_bytes_per_inference / 1e6:.3f}",
        "machine_lb_ms": f"{res.report['bounds']['latency_lb_machine_ns'] / 1e6:.4f}",
        "program_lb_ms": f"{res.report['machine_bound_program']['latency_lb_program_ns'] / 1e6:.4f}",
        "instructions": str(res.report["instructions_total"]),
        "compile_s": f"{t1 - t0:.1f}",
        "simulate_s": f"{t2 - t1:.1f}",
    }
    for k in SHARES + STALLS:
        row[k.replace("_ns", "")] = f"{100 * np.mean([getattr(c, k) for c in used]) / lat:.1f}"
    cats = path["by_category"]
    for col, keys in PATH.items():
        row[f"path_{col}"] = f"{100 * sum(cats[k] for k in keys) / path['length_ns']:.1f}"
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--models", nargs="+", default=["vgg8", "resnet18", "resnet34", "googlenet"])
    p.add_argument("--archs", nargs="+", default=["arch-a"])
    p.add_argument("--mode", choices=("latency", "throughput"), default="latency")
    p.add_argument("--pipeline", type=int, default=4, help="throughput mode only (default 4)")
    p.add_argument(
        "--dataflows", nargs="+", choices=list(FLOWS), default=list(FLOWS), help="(default: all)"
    )
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "noc"))
    args = p.parse_args(argv)
    pipe = args.pipeline if args.mode == "throughput" else 1
    rows = []
    for name in args.models:
        model = build_model(name)
        for a in args.archs:
            arch = load_arch(a)
            for dataflow in args.dataflows:
                flags = FLOWS[dataflow]
                opts = CompileOptions(mode=args.mode, pipeline=pipe, **flags)
                row = {"model": name, "arch": a, "mode": args.mode, "dataflow": dataflow}
                row.update(measure(model, arch, opts))
                rows.append(row)
                print(
                    f"{name}/{a}/{dataflow}: {row['latency_ms']} ms, matrix {row['matrix_busy']}%"
                    f", sync {row['stall_sync']}%, recv {row['stall_recv']}%, path matrix "
                    f"{row['path_matrix']}%, host {row['host_mb']}"
                    f" MB, NoC {row['noc_mb']} MB ({row['compile_s']} s + {row['simulate_s']} s)",
                    flush=True,
                )
    out = Path(args.out_dir) / f"noc_{args.mode}.csv"
    write_csv(out, list(rows[0]), rows)
    _chart(rows, out.with_suffix(".png"), args.dataflows)
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


def _chart(rows: list[dict[str, str]], path: Path, flows: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({(r["model"], r["arch"]) for r in rows}, key=lambda c: (c[1], c[0]))
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(18, 4.8))
    x = np.arange(len(cases))
    w = 0.8 / len(flows)
    for i, flow in enumerate(flows):
        sel = {(r["model"], r["arch"]): r for r in rows if r["dataflow"] == flow}
        lat = [float(sel[c]["latency_ms"]) for c in cases]
        at = x + (i - (len(flows) - 1) / 2) * w
        ax1.bar(at, lat, w, label=f"{flow} dataflow")
        bottom = np.zeros(len(cases))
        for k, color in zip(("matrix_busy", "stall_sync", "stall_recv", "stall_memory"), "gbrm"):
            v = np.array([float(sel[c][k]) for c in cases])
            ax2.bar(
                at,
                v,
                w,
                bottom=bottom,
                color=color,
                alpha=0.3 + 0.6 * (i + 1) / len(flows),
                label=k.replace("_", " ") if i == len(flows) - 1 else None,
            )
            bottom += v
    last = {(r["model"], r["arch"]): r for r in rows if r["dataflow"] == flows[-1]}
    bottom = np.zeros(len(cases))
    for k, color in zip(PATH, ("g", "c", "orange", "r", "m")):
        v = np.array([float(last[c][f"path_{k}"]) for c in cases])
        ax3.bar(x, v, 0.6, bottom=bottom, color=color, label=k.replace("_", " "))
        bottom += v
    labels = [f"{m}\n{a}" for m, a in cases]
    ax3.set_xticks(x, labels, fontsize=8)
    ax3.set_ylabel("% of the critical path (= latency)")
    ax3.set_title(f"critical path by category\n{flows[-1]}")
    ax3.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    ax1.set_xticks(x, labels, fontsize=8)
    ax1.set_ylabel("latency (ms)")
    ax1.set_title("Raptor latency by dataflow:\n" + ", ".join(flows))
    ax1.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    ax2.set_xticks(x, labels, fontsize=8)
    ax2.set_ylabel("% of latency (mean over used cores)")
    ax2.set_title("per-core breakdown, bars left to right (lighter: earlier)\n" + ", ".join(flows))
    ax2.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    save_figure(fig, path)


if __name__ == "__main__":
    raise SystemExit(main())
