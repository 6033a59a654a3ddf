"""pimsim-nn parity table: every micro-program of tests/parity/parity_micro.py through pimsim-nn's
ChipTest and through our engine, with the relative differences.

    PIMSIM_NN_BIN=build/pimsim-nn/pimsim-nn/build/ChipTest python benchmarks/parity.py [--csv OUT]
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "parity"))

from parity_micro import micros  # noqa: E402

from raptor.isa.pimdir import write_pimdir  # noqa: E402
from raptor.sim.pimsim_engine import run_pimsim  # noqa: E402


def rel(a: float, b: float) -> float:
    return (a - b) / b if b else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=None)
    ap.add_argument("--pimsim-bin", default=None)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    try:
        from raptor.sim import simulate
    except ImportError:
        simulate = None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in micros():
            if args.only and m.name not in args.only:
                continue
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
            if simulate is not None:
                try:
                    r = simulate(m.prog, arch, m.mode, p.pipeline if m.mode != "latency" else 1)
                    if m.mode == "latency":
                        ours_t, ours_e = r.latency_ns, r.energy_pj
                    else:
                        ours_t, ours_e = 1e9 / r.throughput_per_s, r.energy_per_inference_uj * 1e6
                    row.update(ours_ns=ours_t, ours_pj=ours_e)
                    row.update(d_ns=rel(ours_t, ref_t), d_pj=rel(ours_e, ref_e))
                except Exception as e:  # noqa: BLE001 - a table row, not a crash
                    row["ours_error"] = str(e).splitlines()[0]
            rows.append(row)
            print(
                f"{m.name:24} {m.mode:10} pimsim {ref_t:10.3f} ns {ref_e:12.2f} pJ   "
                + (
                    f"ours {row['ours_ns']:10.3f} ns {row['ours_pj']:12.2f} pJ   "
                    f"d {row['d_ns'] * 100:+7.2f}% {row['d_pj'] * 100:+7.2f}%"
                    if "ours_ns" in row
                    else row.get("ours_error", "")
                ),
                flush=True,
            )
    if args.csv:
        keys = sorted(
            {k for r in rows for k in r},
            key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99,
        )
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
