#!/usr/bin/env python3
"""Unshared cores, a what-if on the message-order estimate (README, "What limits them"): how much
of a latency plan's estimated end comes from cores that hold several nodes and run them one after
another, and how much from the plan itself (replicas, pixel chunks, row groups, the rendezvous
between layers).

For each case the compiler plans as `raptor compile --mode latency` does and takes the plan whose
estimate ranks first; the script then runs the message order (raptor.spatial.message_order) three
times on it: as planned with the mesh's link latencies (the compiler's own estimate), as planned
with one uniform per-flit latency (the mesh's mean between two distinct cores), and with every
unit (a replica's row group with all its pixel chunks, or a vector node) on a core of its own,
more cores than the chip has, at the same uniform latency. Nothing is programmed or simulated:
the figures are estimates (within about -20 to +5 % of the simulated latency of the same plan),
compared with each other and with the machine lower bound of `raptor bounds`.

    .venv/bin/python benchmarks/unshared.py [--models vgg8 resnet18] [--archs arch-a] \\
        [--out-dir benchmarks/out/unshared]

Writes unshared.csv and unshared.png (the three estimates and the bound per case).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from raptor.arch import load_arch
from raptor.bounds import compute_bounds
from raptor.compiler import _load, _plan
from raptor.figures import save_figure
from raptor.models import build_model
from raptor.options import CompileOptions
from raptor.pim.placement import latencies
from raptor.result import PassTimer
from raptor.spatial.build import build_spatial
from raptor.spatial.ir import NodeKind
from raptor.spatial.message_order import order_messages
from raptor.spatial.noc import NocDataflowPass
from raptor.suite.runner import write_csv

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("vgg8", "resnet18", "resnet34", "googlenet")
ARCHS = ("arch-a", "arch-b")


def mean_flit_ns(arch) -> float:
    """The chip's per-flit link latency averaged over every ordered pair of distinct cores (the
    placement's latency table, so chip hops count where the architecture has them)."""
    n = arch.core_count
    return float(latencies(arch, n)[0].sum() / (n * (n - 1)))


def unshared(arch, planned):
    """The planned graph with every unit on a core of its own (cores numbered from 0 up, beyond
    the chip's when there are more units) and its NoC plan made again for those cores."""
    ids: dict[tuple, int] = {}
    nodes = []
    for n in planned.nodes:
        key = (n.layer, n.replica, n.row_group, n.c0, n.r0) if n.kind == NodeKind.MVM else (n.id,)
        nodes.append(replace(n, core=ids.setdefault(key, len(ids))))
    sg = planned.with_nodes(nodes)
    noc = planned.noc
    return NocDataflowPass(noc.segments, noc.segment_pixels).apply(arch, sg), len(ids)


def run_case(model: str, arch_name: str) -> dict:
    arch = load_arch(arch_name)
    graph = _load(build_model(model))
    sg = build_spatial(graph, arch.element_bytes, arch.matrix.rows)
    best = _plan(arch, sg, CompileOptions(mode="latency"), PassTimer(), None)[0]
    planned = best.planned
    if best.first is None:  # the plan search left its order to the round loop: make it here
        order_messages(arch, planned)
    est_mesh = (planned if best.first is None else best.first).noc.estimated_ns
    flit = mean_flit_ns(arch)
    order_messages(arch, planned, flit)
    est_uniform = planned.noc.estimated_ns
    alone, units = unshared(arch, planned)
    order_messages(arch, alone, flit)
    lb = compute_bounds(graph, arch)["latency_lb_machine_ns"]
    return {
        "model": model,
        "arch": arch_name,
        "plan": best.label,
        "cores": len({n.core for n in planned.nodes}),
        "units": units,
        "flit_ns": round(flit, 3),
        "estimate_ms": round(est_mesh / 1e6, 4),
        "estimate_uniform_ms": round(est_uniform / 1e6, 4),
        "estimate_unshared_ms": round(alone.noc.estimated_ns / 1e6, 4),
        "machine_lb_ms": round(lb / 1e6, 4),
        "unshared_vs_lb": round(alone.noc.estimated_ns / lb, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--archs", nargs="+", default=list(ARCHS))
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "unshared"))
    args = p.parse_args(argv)
    out = Path(args.out_dir)
    rows = []
    for model in args.models:
        for arch_name in args.archs:
            r = run_case(model, arch_name)
            rows.append(r)
            print(
                f"{model} {arch_name}: {r['plan']} on {r['cores']} cores: estimate "
                f"{r['estimate_ms']:.3f} ms (uniform links {r['estimate_uniform_ms']:.3f}); "
                f"{r['units']} units each on its own core {r['estimate_unshared_ms']:.3f} ms; "
                f"machine LB {r['machine_lb_ms']:.3f} ms ({r['unshared_vs_lb']}x)",
                flush=True,
            )
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "unshared.csv", list(rows[0]), rows)
    _chart(rows, out / "unshared.png")
    print(f"wrote {out / 'unshared.csv'} and {out / 'unshared.png'}")
    return 0


def _chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = (
        ("estimate_ms", "as planned (mesh links)"),
        ("estimate_uniform_ms", "as planned (uniform links)"),
        ("estimate_unshared_ms", "every unit its own core"),
        ("machine_lb_ms", "machine lower bound"),
    )
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(1.3 * len(rows) + 3, 4))
    w = 0.8 / len(keys)
    for i, (k, label) in enumerate(keys):
        ax.bar(x + (i - 1.5) * w, [r[k] for r in rows], w, label=label)
    ax.set_xticks(x, [f"{r['model']}\n{r['arch']}" for r in rows], fontsize=8)
    ax.set_ylabel("latency (ms, message-order estimate)")
    ax.set_title("Latency plans: estimated end with and without cores shared by nodes", fontsize=9)
    ax.legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
