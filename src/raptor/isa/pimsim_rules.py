"""What a program must respect so that pimsim-nn (HEAPLab fork) runs it: the fork's input
contract and the defects our compilers steer around (pimsim-nn.md §6 and §9).

`check_pimsim_compatible(prog, mode)` returns one line per violation (empty list: OK). Each rule
names the pimsim-nn behaviour it prevents:

* every core 0..core_cnt-1 has a stream and an `array_group_map` entry ("Instruction directory
  is missing core_<i>...");
* `setbw` with positive widths before the first `mvmul` (else the MVM runs at width 0);
* `setbw` before the first vector op too: pimsim-nn sizes a vector op's local-memory traffic
  by the setbw widths, so without one it moves 0 bytes (measured: 61 ns instead of 421 ns);
* `mvmul` `mbiw` > 0 (0 divides by zero: SIGFPE) and its group inside the core's map;
* no `nop` (one before the end segfaults; one at the end never finishes);
* latency mode: the last instruction of every non-empty core retires through the ROB, i.e. it is
  not a scalar op, `setbw` or `nop` (executed in decode, so the core never reports finish);
* registers (rd, rs1, vector rs2) and event registers < 32;
* `sync`/`send`/`recv` target cores inside 0..core_cnt-1;
* crossbars per core (sum of its array groups) <= `xbar_array_count` (needs the arch);
* opcodes 0..32 only, and `vsoftmax` (21) is unsupported by pimsim-nn.
"""

from __future__ import annotations

import numpy as np

from raptor.arch.loader import Arch
from raptor.isa.opcodes import OPCODE_CLASS, InstClass, Opcode
from raptor.isa.pimdir import PimProgram

REGISTER_COUNT = 32
EVENT_REGISTER_COUNT = 32
MAX_OPCODE = int(Opcode.SYNC)

_DECODE_ONLY = np.array(
    [int(op) for op, cls in OPCODE_CLASS.items() if cls == InstClass.SCALAR]
    + [int(Opcode.SETBW), int(Opcode.NOP)]
)
_VECTOR = np.array([int(op) for op, cls in OPCODE_CLASS.items() if cls == InstClass.VECTOR])


def _name(code: int) -> str:
    try:
        return Opcode(code).mnemonic
    except ValueError:
        return f"opcode {code}"


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _resolve_arch(prog: PimProgram, arch: Arch | None) -> Arch | None:
    if arch is not None:
        return arch
    if prog.target is not None:  # pim/target.json: the chip it was compiled for, custom or not
        return prog.target.load_arch()
    name = prog.meta.get("arch")
    if isinstance(name, str):
        from raptor.arch.loader import BUILTIN, load_arch

        if name in BUILTIN:
            return load_arch(name)
    return None


def check_pimsim_compatible(
    prog: PimProgram, mode: str = "latency", arch: Arch | None = None
) -> list[str]:
    """Violations of pimsim-nn's input contract and defects, one line each ([] = compatible).

    arch (or the program's target record, or its `raptor.arch` when it names a built-in) enables
    the checks that need the chip: core count and crossbars per core."""
    if mode not in ("latency", "throughput"):
        raise ValueError(f"unknown mode {mode!r}")
    problems: list[str] = []
    n = prog.core_cnt
    arch = _resolve_arch(prog, arch)
    if n < 1:
        problems.append("core_cnt must be >= 1")
    if arch is not None and n > arch.core_count:
        problems.append(f"core_cnt {n} exceeds the arch's {arch.core_count} cores")
    if len(prog.array_group_map) != n:
        problems.append(
            f"array_group_map covers {len(prog.array_group_map)} cores, core_cnt is {n} "
            "(pimsim-nn needs an entry and a file for every core 0..core_cnt-1)"
        )

    for i, s in enumerate(prog.cores):
        where = f"core {i}"
        if s is None:
            problems.append(f"{where}: no instruction file (pimsim-nn needs core_{i}.pim|json)")
            continue
        ags = prog.array_group_map[i] if i < len(prog.array_group_map) else []
        if arch is not None and sum(ags) > arch.crossbars_per_core:
            problems.append(
                f"{where}: array groups use {sum(ags)} crossbars, the arch has "
                f"{arch.crossbars_per_core} per core"
            )
        if s.size == 0:
            continue
        op = s["opcode"].astype(np.int64)

        bad = op > MAX_OPCODE
        if bad.any():
            k = _first(bad)
            problems.append(f"{where}: instruction {k} has opcode {op[k]} (> {MAX_OPCODE})")
        sm = op == Opcode.VSOFTMAX
        if sm.any():
            problems.append(
                f"{where}: vsoftmax at instruction {_first(sm)} is unsupported by pimsim-nn "
                f"({int(sm.sum())} in total)"
            )
        nop = op == Opcode.NOP
        if nop.any():
            problems.append(
                f"{where}: nop at instruction {_first(nop)} (pimsim-nn crashes on nop, "
                f"{int(nop.sum())} in total)"
            )

        mv = op == Opcode.MVMUL
        sb = op == Opcode.SETBW
        if mv.any():
            first_mv = _first(mv)
            if not sb[:first_mv].any():
                problems.append(
                    f"{where}: mvmul at instruction {first_mv} precedes any setbw "
                    "(pimsim-nn would run it at input width 0)"
                )
            mbiw = s["r2_or_imm"]
            z = mv & (mbiw <= 0)
            if z.any():
                problems.append(
                    f"{where}: mvmul at instruction {_first(z)} has mbiw {int(mbiw[_first(z)])} "
                    "(must be > 0; 0 crashes pimsim-nn with SIGFPE)"
                )
            grp = s["generic2"]
            g = mv & ((grp < 0) | (grp >= len(ags)))
            if g.any():
                k = _first(g)
                problems.append(
                    f"{where}: mvmul at instruction {k} uses array group {int(grp[k])}, "
                    f"the core has {len(ags)}"
                )
        vec_any = np.isin(op, _VECTOR)
        if vec_any.any():
            first_v = _first(vec_any)
            if not sb[:first_v].any():
                problems.append(
                    f"{where}: {_name(int(op[first_v]))} at instruction {first_v} precedes any "
                    "setbw (pimsim-nn would move 0 bytes for it)"
                )
        widths = sb & ((s["generic1"] <= 0) | (s["generic2"] <= 0))
        if widths.any():
            k = _first(widths)
            problems.append(
                f"{where}: setbw at instruction {k} sets ibiw {int(s['generic1'][k])} / obiw "
                f"{int(s['generic2'][k])} (both must be > 0)"
            )

        if mode == "latency" and np.isin(op[-1], _DECODE_ONLY):
            problems.append(
                f"{where}: last instruction ({_name(int(op[-1]))}) does not retire through the "
                "ROB, so pimsim-nn never sees the core finish in latency mode"
            )

        for field, label in (("rd", "rd"), ("r1", "rs1")):
            r = s[field] >= REGISTER_COUNT
            if r.any():
                k = _first(r)
                problems.append(
                    f"{where}: instruction {k} ({_name(int(op[k]))}) uses register {label}="
                    f"{int(s[field][k])} (only {REGISTER_COUNT})"
                )
        vec = np.isin(op, _VECTOR)
        r2 = s["r2_or_imm"]
        r = vec & ((r2 < 0) | (r2 >= REGISTER_COUNT))
        if r.any():
            k = _first(r)
            problems.append(
                f"{where}: instruction {k} ({_name(int(op[k]))}) uses register rs2={int(r2[k])} "
                f"(only {REGISTER_COUNT})"
            )

        ev_ops = (op == Opcode.SYNC) | (op == Opcode.WAIT)
        ev = s["generic1"]
        r = ev_ops & ((ev < 0) | (ev >= EVENT_REGISTER_COUNT))
        if r.any():
            k = _first(r)
            problems.append(
                f"{where}: instruction {k} ({_name(int(op[k]))}) uses event register "
                f"{int(ev[k])} (only {EVENT_REGISTER_COUNT})"
            )

        peer = (op == Opcode.SYNC) | (op == Opcode.SEND) | (op == Opcode.RECV)
        r = peer & ((r2 < 0) | (r2 >= n))
        if r.any():
            k = _first(r)
            problems.append(
                f"{where}: instruction {k} ({_name(int(op[k]))}) targets core {int(r2[k])}, "
                f"outside 0..{n - 1}"
            )
    return problems
