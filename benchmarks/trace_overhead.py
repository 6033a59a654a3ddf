"""What tracing costs, and the pictures of one traced case: compiles one suite case once, then
alternates untraced and traced simulations (`simulate_dir`, as `raptor simulate` runs it; traced =
simulation with the recorder + trace JSON + heat-map PNG, as `raptor simulate --trace` runs it)
and writes a CSV, the case's trace, its heat map (redrawn after the timed runs with the critical
path over it) and a zoomed timeline of the cores that wait longest on recv.

    .venv/bin/python benchmarks/trace_overhead.py [--model resnet18] [--arch arch-a]
        [--mode latency] [--repeats 3] [--out benchmarks/out/trace]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from raptor.arch import load_arch
from raptor.compiler import compile_to_dir
from raptor.isa.pimdir import read_config
from raptor.models import save_model
from raptor.options import CompileOptions
from raptor.sim import simulate_dir
from raptor.sim.critical_path import critical_path
from raptor.sim.timeline import gantt_png, save_trace, timeline_png, trace_title
from raptor.sim.trace import FLOW_SEND, slice_layers
from raptor.suite.runner import write_csv


def _zoom(report, meta: dict) -> tuple[list[int], float, float, dict[int, str]]:
    """The core with the most send/recv stall, the cores it exchanges with and the next cores by
    that stall (8 rows), over about a dozen of its messages in the middle of its run."""
    stall = np.array([c.stall_recv_ns for c in report.per_core])
    top = int(np.argmax(stall))
    flows = sorted(
        (f for f in report.trace.flows if f[0] == FLOW_SEND and top in (f[1], f[3])),
        key=lambda f: f[4],
    )
    if stall[top] <= 0 or not flows:
        cores = [c.core for c in report.per_core if c.instructions][:8]
        return cores, 0.0, report.latency_ns, {}
    i = len(flows) // 2
    a = flows[max(0, i - 6)][2] - 2e3
    b = flows[min(len(flows) - 1, i + 6)][4] + 2e3
    srcs = sorted({f[1] + f[3] - top for f in flows if a <= f[2] and f[4] <= b})
    others = [int(c) for c in np.argsort(-stall) if int(c) != top and int(c) not in srcs]
    cores = (srcs + [top] + others)[:8]
    s = report.trace.arrays()
    lay = slice_layers(s, meta, len(report.per_core))
    names = (meta.get("layer_spans") or {}).get("layers", [])
    label = {}
    for c in cores:
        m = (s["track"] == c) & (lay >= 0) & (s["start"] <= b) & (s["end"] >= a)
        if m.any() and names:
            label[c] = names[int(np.bincount(lay[m]).argmax())]
    return sorted(cores), a, b, label


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--arch", default="arch-a")
    p.add_argument("--mode", choices=("latency", "throughput"), default="latency")
    p.add_argument("--pipeline", type=int, default=4)
    p.add_argument("--input-size", type=int, default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--zoom-only", action="store_true", help="one traced run, pictures only")
    p.add_argument("--out", default="benchmarks/out/trace")
    args = p.parse_args(argv)
    out = Path(args.out)
    case = out / f"{args.model}-{args.arch}-{args.mode}"
    arch = load_arch(args.arch)
    pipeline = args.pipeline if args.mode == "throughput" else 1
    if not (case / "pim" / "config.json").is_file():
        model = save_model(args.model, out / f"{args.model}.onnx", input_size=args.input_size)
        compile_to_dir(model, arch, CompileOptions(mode=args.mode, pipeline=pipeline), case)
    meta = read_config(case / "pim").get("raptor", {})
    rows = []
    summary = ""
    for i in range(1 if args.zoom_only else args.repeats):
        t, c = [time.perf_counter()], [time.process_time()]
        plain = simulate_dir(case, arch, mode=args.mode, pipeline=pipeline)
        t.append(time.perf_counter())
        c.append(time.process_time())
        traced = simulate_dir(case, arch, mode=args.mode, pipeline=pipeline, trace=True)
        t.append(time.perf_counter())
        c.append(time.process_time())
        summary = save_trace(traced, meta, case / "trace.json", case / "timeline.png")
        t.append(time.perf_counter())
        c.append(time.process_time())
        assert plain.deadlines_ns == traced.deadlines_ns
        row = {"run": str(i)}
        # wall time, and CPU time of this (single-threaded) process, which a busy machine
        # disturbs less
        for key, x in (("wall", t), ("cpu", c)):
            row[f"untraced_{key}_s"] = f"{x[1] - x[0]:.3f}"
            row[f"traced_simulate_{key}_s"] = f"{x[2] - x[1]:.3f}"
            row[f"write_json_png_{key}_s"] = f"{x[3] - x[2]:.3f}"
            row[f"traced_total_{key}_s"] = f"{x[3] - x[1]:.3f}"
            row[f"ratio_{key}"] = f"{(x[3] - x[1]) / (x[1] - x[0]):.2f}"
        rows.append(row)
        print(rows[-1], flush=True)
    trace_bytes = (case / "trace.json").stat().st_size
    med = {k: statistics.median(float(r[k]) for r in rows) for k in rows[0] if k != "run"}
    rows.append({"run": "median", **{k: f"{v:.3f}" for k, v in med.items()}})
    write_csv(out / f"trace_overhead_{case.name}.csv", list(rows[0]), rows)
    title = trace_title(meta, traced.mode)
    timeline_png(traced, case / "timeline.png", title, crit=critical_path(traced, meta))
    cores, a, b, labels = _zoom(traced, meta)
    gantt_png(
        traced,
        case / "zoom.png",
        cores,
        a,
        b,
        f"{args.model} {args.arch} {args.mode}: the core with the most send/recv stall and its "
        "partners (arrows: send->recv solid, sync->wait dotted)",
        labels,
    )
    info = {
        "case": case.name,
        "instructions": plain.instructions_executed,
        "latency_ns": plain.latency_ns,
        "trace_bytes": trace_bytes,
        "summary": summary,
        "median": med,
        "zoom": {"cores": cores, "start_ns": a, "end_ns": b},
    }
    (out / f"trace_overhead_{case.name}.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
