#!/usr/bin/env python3
"""Stripes, a planning experiment outside the compiler (README, "The chain itself"): one replica
of every layer of the given groups on each of `--replicas` cores, with aligned pixel ranges (each
core computes the same stripe of every map of its group, in layer order, copying its own rows
locally and exchanging halo rows with its neighbours), every other node packed around them by
the compiler's own packer (SpatialPlanningPass.place with `fixed`). The striped layers get whole-core
row groups; `--one-tile-layers` gives others row groups of one tile so that they fit the
crossbars the stripes leave free. The rest of the compile is Raptor's (one crossbar share, 0.85,
no fill, one finalist). Prints the latency and when the striped layers end; writes a CSV and
a PNG of every layer's span.

    .venv/bin/python benchmarks/stripes.py --model resnet18 --arch arch-a --replicas 90 \\
        --groups conv1@0 maxpool@0 layer1.@0 [--one-tile-layers layer4] [--out-dir ...]

A group is `prefix@first_core`: layers whose name starts with the prefix are striped on cores
first_core .. first_core + replicas - 1. Measured on resnet18 arch-a (today's plan 12.47 ms):
`conv1@0 maxpool@0 layer1.@0` with 90 replicas 16.7 ms (layer1 ends at 5.7 ms), 70 replicas
14.6 ms; conv1 to layer1.0 on 100 cores 17.5 ms; conv1 to layer1.0 on cores 0-79 and layer1.1
on 80-159 (`--one-tile-layers layer4`) 16.4 ms, layer1 ending at 5.9 ms.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from raptor.arch import load_arch
from raptor.compiler import compile_to_dir
from raptor.errors import PassFailedError
from raptor.figures import save_figure
from raptor.models import build_model
from raptor.options import CompileOptions
from raptor.sim.layers import case_layers
from raptor.spatial import planning
from raptor.spatial.ir import LayerKind, NodeKind
from raptor.spatial.noc import noc_edges
from raptor.spatial.tiling import make_nodes
from raptor.suite.runner import write_csv

ROOT = Path(__file__).resolve().parents[1]


def striped_apply(groups: list[tuple[str, int]], replicas: int, one_tile: list[str]):
    """A SpatialPlanningPass.apply that stripes the groups' layers and packs the rest."""

    def first_core(name: str) -> int | None:
        return next((c for p, c in groups if name.startswith(p)), None)

    def apply(self, arch, sg):
        layers = []
        for ly in sg.layers:
            if ly.kind == LayerKind.GEMM and first_core(ly.name) is not None:
                ly = replace(ly, row_groups=1)
            elif ly.kind == LayerKind.GEMM and any(ly.name.startswith(p) for p in one_tile):
                ly = replace(ly, row_groups=math.ceil(ly.rows / arch.matrix.rows))
            layers.append(ly)
        sg = replace(sg, layers=layers)
        striped = {ly.index for ly in sg.layers if first_core(ly.name) is not None}
        # the others' replication as today's, with the striped GEMMs taken out of it
        rest = replace(
            sg,
            layers=[
                replace(ly, kind=LayerKind.AVGPOOL)
                if ly.index in striped and ly.kind == LayerKind.GEMM
                else ly
                for ly in sg.layers
            ],
            nodes=[n for n in sg.nodes if n.layer not in striped],
        )
        fed = noc_edges(sg) if self.chunks and self.noc else None
        last: PassFailedError | None = None
        for scale in (1.0, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5):
            reps, splits = planning.choose_replication(
                arch, rest, scale * self.crossbar_share, self.latency, self.noc
            )
            for i in striped:
                if sg.layers[i].kind == LayerKind.GEMM:
                    reps[i] = replicas
                else:
                    splits[i] = replicas
            chunks = {}
            if fed is not None:
                others = {i: r for i, r in reps.items() if i not in striped}
                chunks = planning.choose_chunks(sg, others, fed)
            fixed, seen = {}, {}  # the node indices place() gives them (tiling.make_nodes)
            for k, n in enumerate(make_nodes(sg, arch, reps, splits, chunks)):
                if n.layer in striped:
                    j = n.replica if n.kind == NodeKind.MVM else seen.get(n.layer, 0)
                    seen[n.layer] = seen.get(n.layer, 0) + 1
                    fixed[k] = first_core(sg.layers[n.layer].name) + j
            try:
                return self.place(arch, sg, reps, splits, chunks, None, fixed)
            except PassFailedError as e:
                last = e
        raise last  # type: ignore[misc]

    return apply


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="resnet18")
    p.add_argument("--arch", default="arch-a")
    p.add_argument("--replicas", type=int, default=90)
    p.add_argument("--groups", nargs="+", default=["conv1@0", "maxpool@0", "layer1.@0"])
    p.add_argument("--one-tile-layers", nargs="*", default=[])
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "stripes"))
    args = p.parse_args(argv)
    groups = []
    for g in args.groups:
        prefix, _, core = g.rpartition("@")
        if not prefix or not core.isdigit():
            print(f"stripes: error: group {g!r} is not prefix@first_core", file=sys.stderr)
            return 2
        groups.append((prefix, int(core)))
    arch = load_arch(args.arch)
    out = Path(args.out_dir)
    case = out / f"{args.model}-{args.arch}-r{args.replicas}"
    planning.SpatialPlanningPass.apply = striped_apply(groups, args.replicas, args.one_tile_layers)
    opts = CompileOptions(crossbar_shares=(0.85,), fill_shares=(), finalists=1)
    report = compile_to_dir(build_model(args.model), arch, opts, case)
    rows, title, _ = case_layers(case)
    striped = [r for r in rows if any(r["layer"].startswith(p) for p, _ in groups)]
    end = max(r["end_ns"] for r in striped) / 1e6
    lat = json.loads((case / "layers.json").read_text())["simulation"]["latency_ns"] / 1e6
    print(title)
    print(
        f"striped layers end at {end:.2f} ms; host {report['host_bytes_per_inference'] / 1e6:.2f} MB"
    )
    row = {
        "model": args.model,
        "arch": args.arch,
        "replicas": args.replicas,
        "groups": " ".join(args.groups),
        "one_tile_layers": " ".join(args.one_tile_layers),
        "latency_ms": f"{lat:.4f}",
        "striped_end_ms": f"{end:.4f}",
        "host_mb": f"{report['host_bytes_per_inference'] / 1e6:.3f}",
        "crossbars_used": report["crossbars_used"],
    }
    write_csv(out / f"{case.name}.csv", list(row), [row])
    _chart(rows, striped, title, out / f"{case.name}.png")
    print(f"wrote {case}.csv and {case}.png")
    return 0


def _chart(rows: list[dict], striped: list[dict], title: str, path: Path) -> None:
    """Each layer's span (first to last matrix/vector slice), striped layers highlighted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [r for r in rows if r["start_ns"] is not None]
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(ran) + 1.5))
    names = {r["layer"] for r in striped}
    for i, r in enumerate(ran):
        a, b = r["start_ns"] / 1e6, r["end_ns"] / 1e6
        ax.barh(i, b - a, left=a, color="tab:orange" if r["layer"] in names else "tab:blue")
    ax.set_yticks(range(len(ran)), [r["layer"] for r in ran], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (ms)")
    ax.set_title(f"{title}\nlayer spans; orange: striped layers", fontsize=9)
    save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
