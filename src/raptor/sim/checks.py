"""Checks and descriptions shared by both engines: one instruction as text (error messages) and
the register-field check of a whole stream before it runs."""

from __future__ import annotations

import numpy as np

from raptor.isa.opcodes import NUM_EVENT_REGISTERS, NUM_REGISTERS, Opcode

_USES_RD = tuple(
    int(o)
    for o in (
        Opcode.SLDI,
        Opcode.SADD,
        Opcode.SSUB,
        Opcode.SMUL,
        Opcode.SADDI,
        Opcode.SMULI,
        Opcode.MVMUL,
        Opcode.LD,
        Opcode.ST,
        Opcode.LLDI,
        Opcode.LMV,
        Opcode.SEND,
        Opcode.RECV,
    )
)
_USES_R1 = tuple(
    int(o)
    for o in (
        Opcode.SADD,
        Opcode.SSUB,
        Opcode.SMUL,
        Opcode.SADDI,
        Opcode.SMULI,
        Opcode.MVMUL,
        Opcode.LD,
        Opcode.ST,
        Opcode.LMV,
    )
)
FIELDS_MESSAGE = (
    f"register number out of range ({NUM_REGISTERS} registers, {NUM_EVENT_REGISTERS} events)"
)


def describe(stream: np.ndarray, pc: int) -> str:
    """One-line text of instruction pc of a stream (for error messages)."""
    r = stream[pc]
    try:
        name = Opcode(int(r["opcode"])).mnemonic
    except ValueError:
        name = f"opcode{int(r['opcode'])}"
    return (
        f"{name} rd={int(r['rd'])} rs1={int(r['r1'])} r2_or_imm={int(r['r2_or_imm'])} "
        f"g1={int(r['generic1'])} g2={int(r['generic2'])} g3={int(r['generic3'])}"
    )


def bad_register_field(s: np.ndarray) -> int:
    """The first pc whose register or event-register numbers are out of range, else -1 (checked
    before a stream runs, so that an exception while running is a simulator bug, never a bad
    program)."""
    op = s["opcode"].astype(np.int64)
    vector = (op >= Opcode.VVADD) & (op <= Opcode.VRSL)
    uses_rd = np.isin(op, _USES_RD)
    uses_r1 = np.isin(op, _USES_R1)
    imm = s["r2_or_imm"].astype(np.int64)
    ev = s["generic1"]
    bad = (
        ((uses_rd | vector) & (s["rd"] >= NUM_REGISTERS))
        | ((uses_r1 | vector) & (s["r1"] >= NUM_REGISTERS))
        | (vector & ((imm < 0) | (imm >= NUM_REGISTERS)))
        | ((op == Opcode.WAIT) & ((ev < 0) | (ev >= NUM_EVENT_REGISTERS)))
    )
    return int(np.argmax(bad)) if bad.any() else -1
