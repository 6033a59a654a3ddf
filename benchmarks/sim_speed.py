"""Simulator speed: instructions per second on a synthetic program shaped like compiled CNN code
(per output pixel: scalar address setup, ld of the input window, mvmul, vector add + relu, st),
spread over several cores chained by sync/wait.

    .venv/bin/python benchmarks/sim_speed.py [--pixels 20000] [--cores 8] [--arch arch-a]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from raptor.arch import load_arch
from raptor.isa.opcodes import Opcode
from raptor.isa.pimdir import PimProgram
from raptor.isa.table import concat, interleave, make
from raptor.sim import simulate


def synthetic(pixels: int, cores: int, rows: int = 128, cols: int = 128) -> PimProgram:
    eb = 2
    host_buf = 1 << 16
    streams = []
    for c in range(cores):
        p = np.arange(pixels)
        blocks = [
            make(Opcode.SLDI, pixels, rd=1, r2_or_imm=(p % 64) * rows * eb),  # local input slot
            make(Opcode.SLDI, pixels, rd=2, r2_or_imm=(p % 256) * rows * eb),  # host window
            make(Opcode.SLDI, pixels, rd=3, r2_or_imm=65536 + (p % 64) * cols * eb),  # local output
            make(Opcode.LD, pixels, rd=1, r1=2, generic3=rows * eb),
            make(Opcode.MVMUL, pixels, rd=3, r1=1, r2_or_imm=16, generic2=p % 4),
            make(Opcode.VVADD, pixels, rd=3, r1=3, r2_or_imm=3, generic3=cols),
            make(Opcode.VRELU, pixels, rd=3, r1=3, generic3=cols),
            make(
                Opcode.SLDI,
                pixels,
                rd=4,
                r2_or_imm=host_buf + ((c * pixels + p) % 4096) * cols * eb,
            ),
            make(Opcode.ST, pixels, rd=4, r1=3, generic3=cols * eb),
        ]
        body = interleave(blocks)
        head = [make(Opcode.SETBW, generic1=16, generic2=16)]
        if c > 0:
            head.append(make(Opcode.WAIT, generic1=0, generic2=1))
        tail = [make(Opcode.SYNC, r2_or_imm=c + 1, generic1=0)] if c + 1 < cores else []
        streams.append(concat(head + [body] + tail))
    rng = np.random.default_rng(0)
    mats = [rng.standard_normal((rows, cols)).astype(np.float32) * 0.05 for _ in range(4)]
    return PimProgram(
        cores=streams,
        array_group_map=[[1, 1, 1, 1]] * cores,
        weight_matrices=mats,
        array_group_weights=[[0, 1, 2, 3]] * cores,
        memory=rng.standard_normal(host_buf + 4096 * cols).astype(np.float32),
        meta={"element_bytes": eb},
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pixels", type=int, default=20000)
    ap.add_argument("--cores", type=int, default=8)
    ap.add_argument("--arch", default="arch-a")
    args = ap.parse_args()
    prog = synthetic(args.pixels, args.cores)
    t0 = time.perf_counter()
    r = simulate(prog, load_arch(args.arch))
    dt = time.perf_counter() - t0
    print(
        f"{r.instructions_executed} instructions in {dt:.2f} s: {r.instructions_executed / dt:,.0f} instructions/s "
        f"(engine {r.instructions_per_s:,.0f}/s); simulated latency {r.latency_ns / 1e6:.3f} ms"
    )


if __name__ == "__main__":
    main()
