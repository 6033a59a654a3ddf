"""Instruction emit helpers shared by Raptor's lowering and pimcomp: the register convention,
per-lane instruction blocks, local-address registers and one function per instruction pattern.

Register convention (32 registers): r0 = 0, r1/r2 = host base of the inputs, r3 = host base of
the output, r4 = host base of a constant; r5..r27 hold the node's fixed local addresses (set in
its prologue); r28..r31 are temporaries for local addresses beyond that (an sldi right before the
instruction that uses it). Host addresses of lanes ride in the offset field (ld: rs1 offset, st:
rd offset), so an ld or st is one record per lane.

A lowering also sets temporaries itself (T_DST, or an operand address it loads with its own sldi);
`Regs.loc` then takes its temporary among the ones the block has not set itself, and never one
that an earlier operand of the same instruction holds, so an address register it loads never
overwrites another operand of the instruction (it raises instead when none is left).
"""

from __future__ import annotations

import numpy as np

from raptor.isa.opcodes import OFFSET_RD, OFFSET_RS1, Opcode
from raptor.isa.table import INST_DTYPE, RECORD, make

R_ZERO, R_IN0, R_IN1, R_OUT, R_CONST = 0, 1, 2, 3, 4
FIRST_LOCAL, LAST_LOCAL = 5, 27
TEMPS = (28, 29, 30, 31)
T_DST = TEMPS[1]  # per-lane destination in a NoC producer's output row


_FIELD_AT = {name: i for i, name in enumerate(INST_DTYPE.names)}


class Block:
    """A per-lane instruction template over `lanes` lanes; a field is a scalar or a lane array."""

    def __init__(self, lanes: int):
        self.lanes = lanes
        self.slots: list[tuple[int, dict]] = []
        self.fixed: set[int] = set()  # temporaries the lowering set itself in this block
        self.pending: list[int] = []  # temporaries Regs.loc loaded for the next instruction

    def add(self, op: Opcode, **fields) -> None:
        if op == Opcode.SLDI and fields.get("rd") in TEMPS:
            self.fixed.add(fields["rd"])
        self.pending = []
        self.slots.append((int(op), fields))

    def add_temp(self, r: int, addr: int) -> None:
        """The sldi of a temporary Regs.loc chose for an operand of the next instruction."""
        self.pending.append(r)
        self.slots.append((int(Opcode.SLDI), {"rd": r, "r2_or_imm": addr}))

    def build(self) -> np.ndarray:
        """The records lane by lane: every slot of lane 0, then of lane 1, ... (what
        interleaving one block per slot gives). The scalars of each slot make one record,
        repeated over the lanes; lane arrays then fill their slot's column."""
        if not self.slots or self.lanes == 0:
            return make(0, 0)
        records = []  # the scalar fields of each slot (0 where a lane array goes)
        columns = []
        for i, (op, fields) in enumerate(self.slots):
            rec = [op, 0, 0, 0, 0, 0, 0, 0]
            for key, v in fields.items():
                if isinstance(v, (int, np.integer)):
                    rec[_FIELD_AT[key]] = v
                else:
                    columns.append((key, i, v))
            records.append(tuple(rec))
        row = np.array(records, dtype=INST_DTYPE).view(RECORD)  # repeated as opaque records
        out = np.repeat(row[None], self.lanes, 0).view(INST_DTYPE)
        for key, i, v in columns:
            out[key][:, i] = v
        return out.reshape(-1)


class Regs:
    """Local-address registers of one node: preset in the prologue while they last."""

    def __init__(self, prologue: list[np.ndarray]):
        self.map: dict[int, int] = {}
        self.next = FIRST_LOCAL
        self.prologue = prologue  # sldi of new preset registers go here until flush()
        self.t = 0

    def flush(self) -> list[np.ndarray]:
        """The sldi records of registers preset since the last flush (emit before the block)."""
        out, self.prologue[:] = list(self.prologue), []
        return out

    def loc(self, addr: int, block: Block | None = None) -> int:
        r = self.map.get(addr)
        if r is not None:
            return r
        if self.next <= LAST_LOCAL or block is None:
            if self.next > LAST_LOCAL:
                raise RuntimeError("out of preset registers outside a block")
            r = self.next
            self.next += 1
            self.map[addr] = r
            self.prologue.append(make(Opcode.SLDI, rd=r, r2_or_imm=addr))
            return r
        for _ in range(len(TEMPS)):
            r = TEMPS[self.t % len(TEMPS)]
            self.t += 1
            if r not in block.fixed and r not in block.pending:
                block.add_temp(r, addr)
                return r
        raise RuntimeError(
            f"no free temporary register for local address {addr}: the block set "
            f"{sorted(block.fixed)} itself and the instruction holds {block.pending}"
        )


def sldi(r: int, v: int) -> np.ndarray:
    return make(Opcode.SLDI, rd=r, r2_or_imm=int(v))


def prologue_ld(
    pro: list[np.ndarray], regs: Regs, local: int, base_reg: int, host_off: int, size: int
) -> None:
    """An ld in a node's prologue (`pro`), its local address in a preset register."""
    pro.append(
        make(
            Opcode.LD,
            rd=regs.loc(local),
            r1=base_reg,
            generic1=OFFSET_RS1,
            generic2=host_off,
            generic3=size,
        )
    )


def emit_ld(block: Block, regs: Regs, local: int, base_reg: int, host_off, size: int) -> None:
    block.add(
        Opcode.LD,
        rd=regs.loc(local, block),
        r1=base_reg,
        generic1=OFFSET_RS1,
        generic2=host_off,
        generic3=size,
    )


def emit_st(block: Block, regs: Regs, local: int, host_off, size: int) -> None:
    block.add(
        Opcode.ST,
        rd=R_OUT,
        r1=regs.loc(local, block),
        generic1=OFFSET_RD,
        generic2=host_off,
        generic3=size,
    )


def emit_vv(block: Block, regs: Regs, op: Opcode, d: int, a: int, b: int | None, n: int) -> None:
    rd = regs.loc(d, block)
    ra = regs.loc(a, block)
    rb = regs.loc(b, block) if b is not None else 0
    block.add(op, rd=rd, r1=ra, r2_or_imm=rb, generic3=n)


def emit_activation(
    block: Block, regs: Regs, act: str | None, a: int, tmp: int | None, n: int
) -> None:
    if act == "relu":
        emit_vv(block, regs, Opcode.VRELU, a, a, None, n)
    elif act == "sigmoid":
        emit_vv(block, regs, Opcode.VSIGM, a, a, None, n)
    elif act == "silu":
        emit_vv(block, regs, Opcode.VSIGM, tmp, a, None, n)
        emit_vv(block, regs, Opcode.VVMUL, a, a, tmp, n)


def merge_lanes(parts: list[tuple[np.ndarray, int, np.ndarray]]) -> np.ndarray:
    """Merge per-lane blocks built for disjoint lane subsets back into lane order."""
    if len(parts) == 1:
        return parts[0][2]
    keys = np.concatenate([np.repeat(lanes, slots) for lanes, slots, _ in parts])
    code = np.concatenate([blk for _, _, blk in parts])
    return code[np.argsort(keys, kind="stable")]


def chunks(start: int, total: int, limit: int = 1 << 20) -> list[tuple[int, int]]:
    return [(a, min(limit, start + total - a)) for a in range(start, start + total, limit)]


def emit_zero(block: Block, local: int, size: int) -> None:
    """lldi 0 over `size` bytes of local memory at `local` (per lane: scalar or lane arrays)."""
    block.add(
        Opcode.LLDI, rd=R_ZERO, r2_or_imm=0, generic1=OFFSET_RD, generic2=local, generic3=size
    )
