"""Time and size Raptor compiles of the model suite; writes a CSV (one row per case).

    python benchmarks/compile_speed.py [--models vgg8,resnet18,resnet34,googlenet] [--archs arch-a]
        [--modes latency,throughput] [--out benchmarks/compile_speed.csv]

Each case runs in a fresh process so peak RSS is per compile.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

SIZES = {"vgg8": 32, "resnet18": 224, "resnet34": 224, "googlenet": 224, "yolo11n": 640}

CHILD = r"""
import json, resource, sys, time
from raptor.arch import load_arch
from raptor.compiler import compile_model
from raptor.models import build_model
from raptor.options import CompileOptions
name, size, arch, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
m = build_model(name, input_size=size)
t = time.perf_counter()
opts = CompileOptions(mode=mode, pipeline=4 if mode == "throughput" else 1)
r = compile_model(m, load_arch(arch), opts).report
print(json.dumps({"compile_s": time.perf_counter() - t,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "instructions": r["instructions_total"], "cores": r["cores_used"],
                  "crossbars": r["crossbars_used"], "passes": r["pass_time_s"]}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="vgg8,resnet18,resnet34,googlenet")
    ap.add_argument("--archs", default="arch-a")
    ap.add_argument("--modes", default="latency,throughput")
    ap.add_argument("--out", default="benchmarks/compile_speed.csv")
    a = ap.parse_args()
    rows = []
    for model in a.models.split(","):
        for arch in a.archs.split(","):
            for mode in a.modes.split(","):
                p = subprocess.run(
                    [sys.executable, "-c", CHILD, model, str(SIZES[model]), arch, mode],
                    capture_output=True,
                    text=True,
                )
                if p.returncode != 0:
                    print(f"{model} {arch} {mode}: FAILED {p.stderr.strip().splitlines()[-1:]}")
                    continue
                r = json.loads(p.stdout.strip().splitlines()[-1])
                row = {
                    "model": model,
                    "input": SIZES[model],
                    "arch": arch,
                    "mode": mode,
                    "compile_s": round(r["compile_s"], 2),
                    "peak_rss_mb": round(r["peak_rss_mb"]),
                    "instructions": r["instructions"],
                    "cores": r["cores"],
                    "crossbars": r["crossbars"],
                    "codegen_s": r["passes"].get("pim-codegen"),
                    "frontend_s": r["passes"].get("frontend"),
                }
                rows.append(row)
                print(", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["model"])
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
