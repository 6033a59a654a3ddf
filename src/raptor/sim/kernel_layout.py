"""Compiled passes over the whole instruction table for the compiled engine's layout
(raptor.sim.compiled): the register-field check and the setbw state in force at each
instruction, one loop each instead of a dozen numpy passes."""

from __future__ import annotations

import numpy as np
from numba import njit

from raptor.isa.opcodes import NUM_EVENT_REGISTERS, NUM_REGISTERS
from raptor.sim.kernel_state import OP_MVMUL, OP_SETBW, OP_VEC_HI, OP_VEC_LO, OP_WAIT


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


@njit(cache=True, nogil=True)
def setbw_widths(ins: np.ndarray, base: np.ndarray, ns: np.ndarray) -> np.ndarray:
    """(input, output) width of the setbw in force at each instruction in round 0: the last
    setbw before it in its core's stream, (0, 0) before the first."""
    out = np.zeros((ins.shape[0], 2), np.int64)
    for c in range(base.size):
        ib = 0
        ob = 0
        for i in range(base[c], base[c] + ns[c]):
            if ins[i, 0] == OP_SETBW:
                ib = ins[i, 4]
                ob = ins[i, 5]
            out[i, 0] = ib
            out[i, 1] = ob
    return out


@njit(cache=True, nogil=True)
def unit_rows(
    ins: np.ndarray,
    pos: np.ndarray,
    widths: np.ndarray,
    core_of: np.ndarray,
    gbase: np.ndarray,
    gn: np.ndarray,
    gw: np.ndarray,
    gx: np.ndarray,
    vec_ok: np.ndarray,
) -> np.ndarray:
    """The cost key of each mvmul or vector instruction at pos under setbw widths (input,
    output): rows (kind, a, b, c, d), kind 1: an mvmul (crossbars, input width, output width,
    mbiw), 2: a vector op (opcode, length, input bytes, output bytes), 0: none (an instruction the
    loop rejects)."""
    out = np.zeros((pos.size, 5), np.int64)
    for k in range(pos.size):
        i = pos[k]
        op = ins[i, 0]
        ib = widths[k, 0]
        ob = widths[k, 1]
        if op == OP_MVMUL:
            c = core_of[i]
            g = ins[i, 5]
            gi = gbase[c] + g if 0 <= g < gn[c] else gw.size - 1
            mb = ins[i, 3]
            if ib > 0 and mb > 0 and gw[gi] >= 0 and gx[gi] >= 0:
                out[k, 0], out[k, 1], out[k, 2], out[k, 3], out[k, 4] = 1, gx[gi], ib, ob, mb
        elif ins[i, 6] > 0 and vec_ok[op]:
            ibb = max(1, -((-ib) // 8)) if ib != 0 else 1
            obb = max(1, -((-ob) // 8)) if ob != 0 else 1
            out[k, 0], out[k, 1], out[k, 2], out[k, 3], out[k, 4] = 2, op, ins[i, 6], ibb, obb
    return out


@njit(cache=True, nogil=True)
def dense_ids(rows: np.ndarray, lo: np.ndarray, width: np.ndarray, span: int):
    """Distinct rows of an integer table whose packed codes (column j offset by lo[j], in a
    mixed radix of width) span fewer than `span` values: (first row of each distinct row, in
    order of appearance; the distinct row's number for every row)."""
    seen = np.full(span, -1, np.int64)
    inv = np.empty(rows.shape[0], np.int64)
    first = np.empty(rows.shape[0], np.int64)
    n = 0
    for r in range(rows.shape[0]):
        code = 0
        for j in range(rows.shape[1]):
            code = code * width[j] + (rows[r, j] - lo[j])
        u = seen[code]
        if u < 0:
            u = seen[code] = n
            first[n] = r
            n += 1
        inv[r] = u
    return first[:n], inv
