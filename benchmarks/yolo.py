"""Full-size yolo11n: compile, simulate and validate one input; record times, peak memory and
instruction counts (CSV + JSON).

    python benchmarks/yolo.py [--size 640] [--archs arch-a] [--mode latency] [--out benchmarks/yolo.csv]

Each arch runs in a fresh process so peak RSS is per case.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
import numpy as np
import onnxruntime as ort
from raptor.arch import load_arch
from raptor.compiler import compile_model
from raptor.models import build_model
from raptor.options import CompileOptions
from raptor.sim import simulate
size, arch_name, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
arch = load_arch(arch_name)
m = build_model("yolo11n", input_size=size)
t = time.perf_counter()
res = compile_model(m, arch, CompileOptions(mode=mode, pipeline=1))
compile_s = time.perf_counter() - t
rss_c = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
name = m.graph.input[0].name
x = {name: np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)}
t = time.perf_counter()
rep = simulate(res.program, arch, mode, 1, [x])
sim_s = time.perf_counter() - t
ref = ort.InferenceSession(m.SerializeToString()).run(None, x)[0]
out = next(iter(rep.outputs[0].values()))
r = res.report
print(json.dumps({
    "size": size, "arch": arch_name, "mode": mode,
    "compile_s": round(compile_s, 2), "simulate_s": round(sim_s, 2),
    "peak_rss_compile_mb": round(rss_c),
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    "instructions": r["instructions_total"], "cores": r["cores_used"],
    "crossbars": r["crossbars_used"], "depthwise": r["depthwise_packing"],
    "pimsim_unsupported_ops": r["pimsim_unsupported_ops"],
    "by_opcode": r["instructions_by_opcode"],
    "latency_ns": rep.latency_ns if hasattr(rep, "latency_ns") else None,
    "max_abs_err": float(np.abs(out - ref).max()),
    "max_rel_err": float(np.abs(out - ref).max() / max(1e-12, float(np.abs(ref).max()))),
}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--archs", default="arch-a")
    ap.add_argument("--mode", default="latency")
    ap.add_argument("--out", default=str(Path(__file__).with_name("yolo.csv")))
    a = ap.parse_args()
    rows = []
    for arch in a.archs.split(","):
        p = subprocess.run(
            [sys.executable, "-c", CHILD, str(a.size), arch, a.mode],
            capture_output=True,
            text=True,
        )
        if p.returncode:
            print(p.stderr[-3000:], file=sys.stderr)
            rows.append({"size": a.size, "arch": arch, "mode": a.mode, "error": p.stderr[-300:]})
            continue
        row = json.loads(p.stdout.strip().splitlines()[-1])
        print(json.dumps(row))
        rows.append(row)
    out = Path(a.out)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    keys = [
        "size",
        "arch",
        "mode",
        "compile_s",
        "simulate_s",
        "peak_rss_compile_mb",
        "peak_rss_mb",
        "instructions",
        "cores",
        "crossbars",
        "latency_ns",
        "max_abs_err",
        "max_rel_err",
        "error",
    ]
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
