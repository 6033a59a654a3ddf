"""Compiled passes over the whole instruction table for the compiled engine's layout
(raptor.sim.compiled), one loop each instead of a dozen numpy passes and sorts: the table itself
from the `.pim` records, the register-field check, the cost key of every instruction (its
distinct (unit, operands) row, under the setbw state in force) with the distinct rows, and the
NoC link of every instruction with the distinct (source, destination) pairs. `lay_out` runs
them all."""

from __future__ import annotations

import numpy as np
from numba import njit

from raptor.isa.opcodes import NUM_EVENT_REGISTERS, NUM_REGISTERS
from raptor.sim.kernel_state import (
    OP_LD,
    OP_MVMUL,
    OP_RECV,
    OP_SEND,
    OP_SETBW,
    OP_ST,
    OP_SYNC,
    OP_VEC_HI,
    OP_VEC_LO,
    OP_WAIT,
)

# kinds of cost rows (column 0 of `cost_keys`'s rows)
ROW_MVM, ROW_VECTOR, ROW_SIZED = 1, 2, 3


@njit(cache=True, nogil=True)
def first_bad_row(ins: np.ndarray, rd_mask: np.ndarray, r1_mask: np.ndarray) -> int:
    """The first row of ins (columns opcode, rd, r1, r2_or_imm, generic1, ...) whose register or
    event-register numbers are out of range (raptor.sim.checks.bad_register_rows), else -1."""
    for i in range(ins.shape[0]):
        op = ins[i, 0]
        vector = OP_VEC_LO <= op <= OP_VEC_HI
        if (rd_mask[op] or vector) and ins[i, 1] >= NUM_REGISTERS:
            return i
        if (r1_mask[op] or vector) and ins[i, 2] >= NUM_REGISTERS:
            return i
        if vector and not 0 <= ins[i, 3] < NUM_REGISTERS:
            return i
        if op == OP_WAIT and not 0 <= ins[i, 4] < NUM_EVENT_REGISTERS:
            return i
    return -1


@njit(cache=True, nogil=True, inline="always")
def _slot(row, cap: int) -> int:
    """Home slot of a row in a hash table of cap (a power of two) slots."""
    h = np.int64(-3750763034362895579)
    for v in row:
        h = (h ^ v) * np.int64(1099511628211)
    return (h ^ (h >> 29)) & (cap - 1)


@njit(cache=True, nogil=True, inline="always")
def _lookup(row, table: np.ndarray, rows: np.ndarray) -> int:
    """The number of `row` among the distinct rows hashed in table, or -1 - the free slot where
    it would go."""
    cap = table.size
    s = _slot(row, cap)
    while True:
        u = table[s]
        if u < 0:
            return -1 - s
        same = True
        for j in range(len(row)):
            if rows[u, j] != row[j]:
                same = False
                break
        if same:
            return u
        s = (s + 1) & (cap - 1)


@njit(cache=True, nogil=True)
def _add(row, s: int, table: np.ndarray, rows: np.ndarray, nd: int):
    """Add `row` as distinct row nd at free slot s: (table, rows), replaced by larger arrays
    when full."""
    if nd == rows.shape[0]:
        grown = np.empty((2 * nd, rows.shape[1]), np.int64)
        grown[:nd] = rows
        rows = grown
    rows[nd] = row
    table[s] = nd
    if 2 * (nd + 1) > table.size:  # keep the table at most half full
        cap = 2 * table.size
        table = np.full(cap, -1, np.int64)
        for u in range(nd + 1):
            s = _slot(rows[u], cap)
            while table[s] >= 0:
                s = (s + 1) & (cap - 1)
            table[s] = u
    return table, rows


@njit(cache=True, nogil=True, inline="always")
def _unit_row(ins, i: int, c: int, ib: int, ob: int, gbase, gn, gw, gx, vec_ok, row) -> bool:
    """The cost row of mvmul or vector instruction i of core c under setbw widths (ib, ob), into
    row: (ROW_MVM, crossbars, input width, output width, mbiw) or (ROW_VECTOR, opcode, length,
    input bytes, output bytes); False for one the loop rejects (it has no cost)."""
    op = ins[i, 0]
    if op == OP_MVMUL:
        g = ins[i, 5]
        gi = gbase[c] + g if 0 <= g < gn[c] else gw.size - 1
        mb = ins[i, 3]
        if ib > 0 and mb > 0 and gw[gi] >= 0 and gx[gi] >= 0:
            row[0], row[1], row[2], row[3], row[4] = ROW_MVM, gx[gi], ib, ob, mb
            return True
    elif ins[i, 6] > 0 and vec_ok[op]:
        ibb = max(1, -((-ib) // 8)) if ib != 0 else 1
        obb = max(1, -((-ob) // 8)) if ob != 0 else 1
        row[0], row[1], row[2], row[3], row[4] = ROW_VECTOR, op, ins[i, 6], ibb, obb
        return True
    return False


@njit(cache=True, nogil=True)
def cost_keys(ins, base, ns, gbase, gn, gw, gx, vec_ok, sized_mask, carry: bool):
    """The cost key of every instruction, written to ins column 7: the number of its distinct
    cost row, -1 for none (an instruction without a cost row, or one the loop rejects). Rows
    (kind, a, b, c, d): ROW_MVM
    (crossbars, input width, output width, mbiw) and ROW_VECTOR (opcode, length, input bytes,
    output bytes) under the last setbw before the instruction in its core's stream ((0, 0)
    before the first), ROW_SIZED (opcode, size in bytes) for sized_mask's opcodes.

    With carry (more than one round), a core whose stream starts with instructions before its
    first setbw runs them in later rounds under its last setbw: their keys then are akey[alt_base
    + pc] for pc < first_setbw. Returns (akey, first_setbw, alt_base, distinct rows)."""
    nc = base.size
    first_setbw = np.zeros(nc, np.int64)
    alt_base = np.zeros(nc, np.int64)
    n_alt = 0
    if carry:
        for c in range(nc):
            for pc in range(ns[c]):
                if ins[base[c] + pc, 0] == OP_SETBW:
                    if pc > 0:
                        first_setbw[c] = pc
                        alt_base[c] = n_alt
                        n_alt += pc
                    break
    key = ins[:, 7]
    key[:] = -1
    akey = np.full(max(n_alt, 1), -1, np.int32)
    slots = np.full(1024, -1, np.int64)
    rows = np.empty((256, 5), np.int64)
    nd = 0
    row = np.zeros(5, np.int64)
    for c in range(nc):
        ib = 0
        ob = 0
        last = -1
        for i in range(base[c], base[c] + ns[c]):
            op = ins[i, 0]
            if op == OP_SETBW:
                ib, ob, last = ins[i, 4], ins[i, 5], i
                continue
            if op == OP_MVMUL or OP_VEC_LO <= op <= OP_VEC_HI:
                if not _unit_row(ins, i, c, ib, ob, gbase, gn, gw, gx, vec_ok, row):
                    continue
            elif sized_mask[op]:
                row[0], row[1], row[2], row[3], row[4] = ROW_SIZED, op, ins[i, 6], 0, 0
            else:
                continue
            u = _lookup(row, slots, rows)
            if u < 0:
                slots, rows = _add(row, -1 - u, slots, rows, nd)
                u = nd
                nd += 1
            key[i] = u
        for pc in range(first_setbw[c]):  # the prefix in later rounds, under the last setbw
            i = base[c] + pc
            op = ins[i, 0]
            k = key[i]
            if op == OP_MVMUL or OP_VEC_LO <= op <= OP_VEC_HI:
                k = -1
                if _unit_row(ins, i, c, ins[last, 4], ins[last, 5], gbase, gn, gw, gx, vec_ok, row):
                    k = _lookup(row, slots, rows)
                    if k < 0:
                        slots, rows = _add(row, -1 - k, slots, rows, nd)
                        k = nd
                        nd += 1
            akey[alt_base[c] + pc] = k
    return akey, first_setbw, alt_base, rows[:nd].copy()


@njit(cache=True, nogil=True)
def instruction_table(words: np.ndarray, ns: np.ndarray):
    """The loop's instruction table from `.pim` records read as 5 little-endian int32 words each
    (cores back to back, ns records each): columns opcode, rd, r1 (the first word's low three
    bytes), r2_or_imm, generic1, generic2, generic3, then two for `cost_keys` and `link_keys` to
    fill; and each core's count of each opcode (cores x 256)."""
    ins = np.empty((words.shape[0], 9), np.int32)
    counts = np.zeros((ns.size, 256), np.int64)
    i = 0
    for c in range(ns.size):
        for _ in range(ns[c]):
            w = words[i, 0]
            op = w & 0xFF
            ins[i, 0], ins[i, 1], ins[i, 2] = op, (w >> 8) & 0xFF, (w >> 16) & 0xFF
            ins[i, 3], ins[i, 4] = words[i, 1], words[i, 2]
            ins[i, 5], ins[i, 6] = words[i, 3], words[i, 4]
            counts[c, op] += 1
            i += 1
    return ins, counts


@njit(cache=True, nogil=True)
def link_keys(ins, base, ns, gm: int):
    """The NoC link of every ld, st, send, recv and sync, written to ins column 8: 1 + the number
    of its distinct (source core, destination) pair, the destination being the global memory
    (switch id gm) for ld/st and the core operand otherwise; -1 for other instructions and for a
    send or recv naming no other existing core, or a sync naming no existing core (the loop
    reports those). Returns the distinct pairs."""
    nc = base.size
    link = ins[:, 8]
    link[:] = -1
    slots = np.full(64, -1, np.int64)
    rows = np.empty((16, 2), np.int64)
    nd = 0
    pair = np.zeros(2, np.int64)
    for c in range(nc):
        for i in range(base[c], base[c] + ns[c]):
            op = ins[i, 0]
            if op == OP_LD or op == OP_ST:
                d = gm
            elif op == OP_SEND or op == OP_RECV or op == OP_SYNC:
                d = ins[i, 3]
                if d < 0 or d >= nc or (d == c and op != OP_SYNC):
                    continue
            else:
                continue
            pair[0], pair[1] = c, d
            u = _lookup(pair, slots, rows)
            if u < 0:
                slots, rows = _add(pair, -1 - u, slots, rows, nd)
                u = nd
                nd += 1
            link[i] = u + 1
    return rows[:nd].copy()


@njit(cache=True, nogil=True)
def lay_out(
    words, ns, base, rd_mask, r1_mask, gbase, gn, gw, gx, vec_ok, sized_mask, carry: bool, gm: int
):
    """The compiled engine's tables in one call (one compiled entry point for a process to
    load): `instruction_table`, its `first_bad_row`, and unless there is one, `cost_keys` and
    `link_keys`. Returns (ins, opcode counts, the bad row or -1, akey, first_setbw, alt_base,
    cost rows, link pairs)."""
    ins, counts = instruction_table(words, ns)
    bad = first_bad_row(ins, rd_mask, r1_mask)
    if bad >= 0:
        none = np.zeros(0, np.int64)
        return (
            ins,
            counts,
            bad,
            np.zeros(1, np.int32),
            none,
            none,
            np.zeros((0, 5), np.int64),
            np.zeros((0, 2), np.int64),
        )
    akey, first_setbw, alt_base, rows = cost_keys(
        ins, base, ns, gbase, gn, gw, gx, vec_ok, sized_mask, carry
    )
    pairs = link_keys(ins, base, ns, gm)
    return ins, counts, bad, akey, first_setbw, alt_base, rows, pairs
