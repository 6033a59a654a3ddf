"""Opcode numbers, instruction classes and per-class field maps of the pimsim-nn ISA.

Numbers follow the binary `.pim` format of the HEAPLab pimsim-nn fork (`src/isa/Instruction.cpp`):
0-20 in ISA order, 21 reserved for vsoftmax (rejected by pimsim-nn), 22-32 from vmv on.
"""

from __future__ import annotations

from enum import IntEnum


class Opcode(IntEnum):
    NOP = 0
    SLDI = 1
    SLD = 2
    SADD = 3
    SSUB = 4
    SMUL = 5
    SADDI = 6
    SMULI = 7
    SETBW = 8
    MVMUL = 9
    VVADD = 10
    VVSUB = 11
    VVMUL = 12
    VVDMUL = 13
    VVMAX = 14
    VVSLL = 15
    VVSRA = 16
    VAVG = 17
    VRELU = 18
    VTANH = 19
    VSIGM = 20
    VSOFTMAX = 21
    VMV = 22
    VRSU = 23
    VRSL = 24
    LD = 25
    ST = 26
    LLDI = 27
    LMV = 28
    SEND = 29
    RECV = 30
    WAIT = 31
    SYNC = 32

    @property
    def mnemonic(self) -> str:
        return self.name.lower()

    @classmethod
    def from_mnemonic(cls, name: str) -> Opcode:
        try:
            return cls[name.upper()]
        except KeyError:
            raise KeyError(name) from None


class InstClass(IntEnum):
    """Field layout classes of the binary record (see FIELD_MAP)."""

    NOP = 0
    SCALAR = 1
    SETBW = 2
    MVMUL = 3
    VECTOR = 4
    LDST = 5
    SENDRECV = 6
    LLDI = 7
    LMV = 8
    SYNC = 9
    WAIT = 10


OPCODE_CLASS: dict[Opcode, InstClass] = {Opcode.NOP: InstClass.NOP}
for _op in (
    Opcode.SLDI,
    Opcode.SLD,
    Opcode.SADD,
    Opcode.SSUB,
    Opcode.SMUL,
    Opcode.SADDI,
    Opcode.SMULI,
):
    OPCODE_CLASS[_op] = InstClass.SCALAR
OPCODE_CLASS[Opcode.SETBW] = InstClass.SETBW
OPCODE_CLASS[Opcode.MVMUL] = InstClass.MVMUL
for _op in Opcode:
    if Opcode.VVADD <= _op <= Opcode.VRSL:
        OPCODE_CLASS[_op] = InstClass.VECTOR
OPCODE_CLASS[Opcode.LD] = InstClass.LDST
OPCODE_CLASS[Opcode.ST] = InstClass.LDST
OPCODE_CLASS[Opcode.SEND] = InstClass.SENDRECV
OPCODE_CLASS[Opcode.RECV] = InstClass.SENDRECV
OPCODE_CLASS[Opcode.LLDI] = InstClass.LLDI
OPCODE_CLASS[Opcode.LMV] = InstClass.LMV
OPCODE_CLASS[Opcode.SYNC] = InstClass.SYNC
OPCODE_CLASS[Opcode.WAIT] = InstClass.WAIT

# Which JSON key each record slot carries, per class. "offset.*" keys live in the nested
# {"offset": {"offset_select", "offset_value"}} object of the JSON form. rd/rs1 are always
# the rd and r1 bytes (and are written to JSON only for classes listed in REGISTER_KEYS).
FIELD_MAP: dict[InstClass, dict[str, str]] = {
    InstClass.NOP: {},
    InstClass.SCALAR: {"r2_or_imm": "imm", "generic2": "offset_value"},
    InstClass.SETBW: {"generic1": "ibiw", "generic2": "obiw"},
    InstClass.MVMUL: {"r2_or_imm": "mbiw", "generic1": "relu", "generic2": "group"},
    InstClass.VECTOR: {
        "r2_or_imm": "rs2",
        "generic1": "offset.offset_select",
        "generic2": "offset.offset_value",
        "generic3": "len",
    },
    InstClass.LDST: {
        "generic1": "offset.offset_select",
        "generic2": "offset.offset_value",
        "generic3": "size",
    },
    InstClass.SENDRECV: {
        "r2_or_imm": "core",
        "generic1": "offset.offset_select",
        "generic2": "offset.offset_value",
        "generic3": "size",
    },
    InstClass.LLDI: {
        "r2_or_imm": "imm",
        "generic1": "offset.offset_select",
        "generic2": "offset.offset_value",
        "generic3": "len",
    },
    InstClass.LMV: {
        "generic1": "offset.offset_select",
        "generic2": "offset.offset_value",
        "generic3": "len",
    },
    InstClass.SYNC: {
        "r2_or_imm": "core",
        "generic1": "event_register",
        "generic2": "offset.offset_value",
        "generic3": "len",
    },
    InstClass.WAIT: {"generic1": "event_register", "generic2": "wait_value", "generic3": "len"},
}

REGISTER_KEYS: dict[InstClass, tuple[str, ...]] = {
    InstClass.NOP: (),
    InstClass.SCALAR: ("rd", "rs1"),
    InstClass.SETBW: (),
    InstClass.MVMUL: ("rd", "rs1"),
    InstClass.VECTOR: ("rd", "rs1"),
    InstClass.LDST: ("rd", "rs1"),
    InstClass.SENDRECV: ("rd", "rs1"),
    InstClass.LLDI: ("rd",),
    InstClass.LMV: ("rd", "rs1"),
    InstClass.SYNC: (),
    InstClass.WAIT: (),
}

NUM_REGISTERS = 32
NUM_EVENT_REGISTERS = 32
OFFSET_RD = 1
OFFSET_RS1 = 2
OFFSET_RS2 = 4

# Opcodes pimsim-nn cannot load (it throws on them).
PIMSIM_UNSUPPORTED = frozenset({Opcode.VSOFTMAX})
