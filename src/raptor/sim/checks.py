"""Checks and descriptions shared by both engines: one instruction as text (error messages) and
the register-field check of a whole stream before it runs."""

from __future__ import annotations

import numpy as np

from raptor.isa.opcodes import NUM_EVENT_REGISTERS, NUM_REGISTERS, Opcode

_SCALAR_R1 = range(Opcode.SADD, Opcode.SMULI + 1)  # sadd ssub smul saddi smuli
_USES_R1 = (*_SCALAR_R1, Opcode.MVMUL, Opcode.LD, Opcode.ST, Opcode.LMV)
_USES_RD = (*_USES_R1, Opcode.SLDI, Opcode.LLDI, Opcode.SEND, Opcode.RECV)
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


def opcode_mask(ops) -> np.ndarray:
    """A 256-entry table, True at the given opcodes (`mask[op]` tests a whole column)."""
    m = np.zeros(256, bool)
    m[[int(o) for o in ops]] = True
    return m


RD_MASK = opcode_mask(_USES_RD)
R1_MASK = opcode_mask(_USES_R1)


def bad_register_rows(
    op: np.ndarray, rd: np.ndarray, r1: np.ndarray, imm: np.ndarray, g1: np.ndarray
) -> np.ndarray:
    """Rows whose register or event-register numbers are out of range (field columns)."""
    vector = (op >= Opcode.VVADD) & (op <= Opcode.VRSL)
    return (
        ((RD_MASK[op] | vector) & (rd >= NUM_REGISTERS))
        | ((R1_MASK[op] | vector) & (r1 >= NUM_REGISTERS))
        | (vector & ((imm < 0) | (imm >= NUM_REGISTERS)))
        | ((op == Opcode.WAIT) & ((g1 < 0) | (g1 >= NUM_EVENT_REGISTERS)))
    )


def bad_register_field(s: np.ndarray) -> int:
    """The first pc whose register or event-register numbers are out of range, else -1 (checked
    before a stream runs, so that an exception while running is a simulator bug, never a bad
    program)."""
    bad = bad_register_rows(s["opcode"], s["rd"], s["r1"], s["r2_or_imm"], s["generic1"])
    return int(np.argmax(bad)) if bad.any() else -1
