"""The compiled engine's core run-ahead: one core runs through core-private instructions until it
blocks on a shared-state instruction (ld, st, send, recv, an unsatisfied wait), finishes, fails,
or reaches a vector op whose values numpy computes (RC_HOSTOP: the driver applies it and calls
the loop again, which continues the same core). Timing, statistics and the order of every float
addition are those of `Engine._run_inner` (raptor.sim.engine), so results match bit for bit; the
per-run accumulators live in the core's state so that a host op does not split a sum."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from raptor.sim import kernel_state as K
from raptor.sim.blas import mvm_into
from raptor.sim.kernel_values import fill, is_inline, move, mvm_store, vector_inline


@njit(cache=True, nogil=True)
def heap_push(gi, ht, hi, t: float, kind: int, a: int, b: int) -> None:
    """Push event (t, seq, kind, a, b); the heap orders by (t, seq) as heapq orders the tuples
    (ht: times, hi rows: seq, kind, a, b)."""
    gi[K.I_SEQ] += 1
    seq = gi[K.I_SEQ]
    i = gi[K.I_HN]
    gi[K.I_HN] += 1
    while i > 0:
        p = (i - 1) >> 1
        if ht[p] < t or (ht[p] == t and hi[p, 0] < seq):
            break
        ht[i] = ht[p]
        hi[i, 0], hi[i, 1], hi[i, 2], hi[i, 3] = hi[p, 0], hi[p, 1], hi[p, 2], hi[p, 3]
        i = p
    ht[i] = t
    hi[i, 0], hi[i, 1], hi[i, 2], hi[i, 3] = seq, kind, a, b


@njit(cache=True, nogil=True)
def charge(gf, eh, t: float, e: float) -> None:
    """`EnergyTimeline.add`: e pJ into the bin of time t (bins merged pairwise, width doubled,
    while t lies past the last bin)."""
    w = gf[K.G_EW]
    k = int(t / w)
    nb = eh.size
    while k >= nb:
        h = nb // 2
        for j in range(h):
            eh[j] = eh[2 * j] + eh[2 * j + 1]
        for j in range(h, nb):
            eh[j] = 0.0
        w *= 2.0
        gf[K.G_EW] = w
        k = int(t / w)
    eh[k] += e


@njit(cache=True, nogil=True)
def noc_message(
    net, swfree, gf, gi, eh, bus: int, t: float, src: int, link: int, size: int, hold: float
) -> float:
    """`Noc.message`: queue size bytes on src's switch at t over link (net rows: per-flit
    latency, energy, chip hops, inter-chip energy); returns the arrival."""
    lat = net[link, 0]
    k = max(1, math.ceil(size / bus)) if size > 0 else 0
    if net[link, 2]:
        gi[K.I_ICB] += k * bus
        gf[K.G_ICE] += k * net[link, 3]
    free = swfree[src]
    start = t if t > free else free
    arrival = start + k * lat
    swfree[src] = arrival + hold
    gi[K.I_FLITS] += k
    gf[K.G_NE] += k * net[link, 1]
    charge(gf, eh, start, k * net[link, 1])
    return arrival


@njit(cache=True, nogil=True)
def scalar_op(R: np.ndarray, ins: np.ndarray, i: int, op: int) -> None:
    """Scalar instruction i (nop: nothing) on registers R."""
    if op == K.OP_SLDI:
        R[ins[i, 1]] = ins[i, 3]
    elif op == K.OP_SADDI:
        R[ins[i, 1]] = R[ins[i, 2]] + ins[i, 3]
    elif op == K.OP_SMULI:
        R[ins[i, 1]] = R[ins[i, 2]] * ins[i, 3]
    elif op == K.OP_SADD:
        R[ins[i, 1]] = R[ins[i, 2]] + R[0]  # the binary has no rs2: register 0
    elif op == K.OP_SSUB:
        R[ins[i, 1]] = R[ins[i, 2]] - R[0]
    elif op == K.OP_SMUL:
        R[ins[i, 1]] = R[ins[i, 2]] * R[0]


@njit(cache=True, nogil=True)
def vec_operands(R: np.ndarray, ins: np.ndarray, i: int, op: int, eb: int) -> tuple:
    """Element indices (d, a, b) of vector instruction i (b: rs2's, or vmv/vavg's stride); the
    offset generic2 counts elements."""
    sel, off = ins[i, 4], ins[i, 5]
    a = R[ins[i, 2]] // eb + (off if sel & 2 else 0)
    d = R[ins[i, 1]] // eb + (off if sel & 1 else 0)
    if op == K.OP_VMV or op == K.OP_VAVG:
        b = R[ins[i, 3]]
    else:
        b = R[ins[i, 3]] // eb + (off if sel & 4 else 0)
    return d, a, b


@njit(cache=True, nogil=True)
def xaddr(R: np.ndarray, ins: np.ndarray, i: int, f: int, bit: int, eb: int) -> int:
    """Element address of register field f of transfer instruction i (lldi, lmv, ld, st, send,
    recv): the offset generic2 counts bytes and applies when select bit `bit` is set."""
    return (R[ins[i, f]] + (ins[i, 5] if ins[i, 4] & bit else 0)) // eb


@njit(cache=True, nogil=True)
def ldst_addrs(R: np.ndarray, ins: np.ndarray, i: int, op: int, eb: int) -> tuple:
    """(local, host) element addresses of ld / st instruction i."""
    if op == K.OP_LD:
        return xaddr(R, ins, i, 1, 1, eb), xaddr(R, ins, i, 2, 2, eb)
    return xaddr(R, ins, i, 2, 2, eb), xaddr(R, ins, i, 1, 1, eb)


@njit(cache=True, nogil=True, inline="always")
def _mark(ci, c: int, a: int, end: int, LN: int) -> None:
    """Widen core c's marks of checked local memory (K.CI_LLO, K.CI_LHI) to cover [a, end)."""
    mid = LN // 2
    if a < mid and end > ci[c, K.CI_LLO]:
        ci[c, K.CI_LLO] = end if end < mid else mid
    if end > mid and a < ci[c, K.CI_LHI]:
        ci[c, K.CI_LHI] = a if a > mid else mid


@njit(cache=True, nogil=True)
def _fail(ci, gi, c: int, pc: int, code: int, x1=0, x2=0, x3=0, x4=0, x5=0) -> int:
    ci[c, K.CI_PC] = pc
    gi[K.I_CORE], gi[K.I_X1], gi[K.I_X2], gi[K.I_X3], gi[K.I_X4], gi[K.I_X5], gi[K.I_X6] = (
        c,
        code,
        x1,
        x2,
        x3,
        x4,
        x5,
    )
    return K.RC_ERROR


@njit(cache=True, nogil=True)
def run_core(  # noqa: C901 - one flat dispatch loop, kept for speed
    c,
    ins,
    akey,
    ci,
    cf,
    regs,
    evr,
    fin,
    local,
    gw,
    wflat,
    wmeta,
    ctab,
    net,
    swfree,
    gf,
    gi,
    ht,
    hi,
    hsize,
    scratch,
    eh,
    prm,
) -> int:
    """Run core c ahead (ins rows: opcode, rd, r1, r2_or_imm, generic1-3, cost key, link)."""
    P, eb, LN, rounds, bus, nc, vals = prm
    P2 = 2 * P
    P3 = 3 * P
    PF = 2 * P
    if ci[c, K.CI_FRESH]:
        ci[c, K.CI_FRESH] = 0
        for k in range(K.CF_AM, K.CF_EL + 1):
            cf[c, k] = 0.0
    busy_m, busy_v, busy_t = cf[c, K.CF_AM], cf[c, K.CF_AV], cf[c, K.CF_AT]
    e_m, e_v, e_l = cf[c, K.CF_EM], cf[c, K.CF_EV], cf[c, K.CF_EL]
    base, n = ci[c, K.CI_BASE], ci[c, K.CI_N]
    pc, rnd = ci[c, K.CI_PC], ci[c, K.CI_RND]
    tf, te = cf[c, K.CF_TF], cf[c, K.CF_TE]
    ibiw, obiw = ci[c, K.CI_IBIW], ci[c, K.CI_OBIW]
    first_setbw, alt_base = ci[c, K.CI_FIRST_SETBW], ci[c, K.CI_ALT_BASE]
    R = regs[c]
    L = local[ci[c, K.CI_LROW]]
    gbase, gn = ci[c, K.CI_GBASE], ci[c, K.CI_GN]
    rc = K.RC_DONE
    while True:
        if pc >= n:
            fin[c, rnd] = te if te > tf else tf
            rnd += 1
            if rnd >= rounds:
                ci[c, K.CI_DONE] = 1
                break
            pc = 0
            continue
        i = base + pc
        op = ins[i, 0]
        if op < K.OP_SETBW:  # scalar (and nop), executed in decode
            scalar_op(R, ins, i, op)
            tf += P
            pc += 1
            continue
        if op == K.OP_SETBW:
            ibiw, obiw = ins[i, 4], ins[i, 5]
            tf += P
            pc += 1
            continue
        key = ins[i, 7]
        if rnd > 0 and pc < first_setbw:  # setbw state carried over from the previous round
            key = akey[alt_base + pc]
        s = tf + P2
        if te > s:
            s = te
        tf = s
        if op == K.OP_MVMUL:
            if ibiw <= 0:
                return _fail(ci, gi, c, pc, K.E_MVM_WIDTH)
            g = ins[i, 5]
            mi = gw[gbase + g] if 0 <= g < gn else -1
            if mi < 0:
                return _fail(ci, gi, c, pc, K.E_MVM_WEIGHT, g)
            if ins[i, 3] <= 0:
                return _fail(ci, gi, c, pc, K.E_MVM_MBIW)
            a = R[ins[i, 2]] // eb
            d = R[ins[i, 1]] // eb
            rows, cols = wmeta[mi, 1], wmeta[mi, 2]
            if a < 0 or a + rows > LN or d < 0 or d + cols > LN:
                return _fail(ci, gi, c, pc, K.E_MVM_RANGE, a, rows, d, cols, LN)
            _mark(ci, c, a, a + rows, LN)
            _mark(ci, c, d, d + cols, LN)
            if key < 0:
                return _fail(ci, gi, c, pc, K.E_INTERNAL)
            if vals:
                mvm_into(L, a, wflat, wmeta[mi, 0], rows, cols, scratch)
                mvm_store(L, d, scratch, cols, ins[i, 4])
            dur = ctab[key, 0]
            busy_m += dur
            e_m += ctab[key, 1]
            e_l += ctab[key, 2]
            charge(gf, eh, s, ctab[key, 1] + ctab[key, 2])
            te = s + dur + P3
        elif op <= K.OP_VEC_HI:
            length = ins[i, 6]
            if length <= 0:
                return _fail(ci, gi, c, pc, K.E_VEC_LEN)
            if op == K.OP_VVSLL or op == K.OP_VVSRA or op == K.OP_VRSU or op == K.OP_VRSL:
                return _fail(ci, gi, c, pc, K.E_VEC_UNSUPPORTED)
            d, a, b = vec_operands(R, ins, i, op, eb)
            if op == K.OP_VMV or op == K.OP_VAVG:
                span = (length - 1) * b + 1 if b > 0 else 1
                if a < 0 or a + span > LN or d < 0 or d + length > LN:
                    return _fail(ci, gi, c, pc, K.E_LOCAL_RANGE)
                _mark(ci, c, a, a + span, LN)
                _mark(ci, c, d, d + length, LN)
            else:
                if a < 0 or a + length > LN or d < 0 or d + length > LN or b < 0 or b + length > LN:
                    return _fail(ci, gi, c, pc, K.E_LOCAL_RANGE)
                _mark(ci, c, a, a + length, LN)
                _mark(ci, c, b, b + length, LN)
                _mark(ci, c, d, d + length, LN)
            lat = ctab[key, 0]
            busy_v += lat
            e_v += ctab[key, 1]
            e_l += ctab[key, 2]
            charge(gf, eh, s, ctab[key, 1] + ctab[key, 2])
            te = s + lat + PF
            if not vals:
                pass
            elif is_inline(op):
                vector_inline(op, L, d, a, b, length)
            else:  # numpy computes it: hand over, then continue after it
                gi[K.I_CORE], gi[K.I_X1], gi[K.I_X2], gi[K.I_X3], gi[K.I_X4], gi[K.I_X5] = (
                    c,
                    op,
                    d,
                    a,
                    b,
                    length,
                )
                pc += 1
                rc = K.RC_HOSTOP
                break
        elif op == K.OP_LLDI or op == K.OP_LMV:
            m = ins[i, 6] // eb
            d = xaddr(R, ins, i, 1, 1, eb)
            if d < 0 or d + m > LN:
                return _fail(ci, gi, c, pc, K.E_LOCAL_RANGE)
            _mark(ci, c, d, d + m, LN)
            if op == K.OP_LLDI:
                if vals:
                    fill(L, d, m, ins[i, 3])
            else:
                a = xaddr(R, ins, i, 2, 2, eb)
                if a < 0 or a + m > LN:
                    return _fail(ci, gi, c, pc, K.E_LOCAL_RANGE)
                _mark(ci, c, a, a + m, LN)
                if vals:
                    move(L, d, L, a, m)
            lat = ctab[key, 0]
            busy_t += lat
            e_l += ctab[key, 1]
            charge(gf, eh, s, ctab[key, 1])
            te = s + lat + PF
        elif op == K.OP_SYNC:
            dst = ins[i, 3]
            ev = ins[i, 4]
            if not 0 <= dst < nc or not 0 <= ev < 32:
                return _fail(ci, gi, c, pc, K.E_SYNC_TARGET)
            arr = noc_message(net, swfree, gf, gi, eh, bus, s, c, ins[i, 8], 1, 0.0)
            heap_push(gi, ht, hi, arr, K.EV_SYNC, dst, ev)
            busy_t += P
            te = s + P + P3
        elif op == K.OP_WAIT:
            ev = ins[i, 4]
            val = ins[i, 5]
            if evr[c, ev] >= val:  # already satisfied: arrivals only add
                evr[c, ev] -= val
                te = s + P3
            else:
                ci[c, K.CI_PA], ci[c, K.CI_PB] = ev, val
                ci[c, K.CI_BLOCKED] = K.B_WAIT_DISPATCH
                heap_push(gi, ht, hi, s, K.EV_WAIT, c, 0)
                break
        else:  # ld, st, send, recv: block and hand over to the event heap
            size = ins[i, 6]
            m = size // eb
            if op == K.OP_LD or op == K.OP_ST:
                la, ha = ldst_addrs(R, ins, i, op, eb)
                if la < 0 or la + m > LN:
                    return _fail(ci, gi, c, pc, K.E_CHECK_LOCAL, la, m, LN)
                _mark(ci, c, la, la + m, LN)
                if ha < 0 or ha + m > hsize:
                    return _fail(ci, gi, c, pc, K.E_CHECK_HOST, ha, m, hsize)
                ci[c, K.CI_PA], ci[c, K.CI_PB], ci[c, K.CI_PC2] = op == K.OP_ST, ha, la
                ci[c, K.CI_PD], ci[c, K.CI_PE], ci[c, K.CI_PG] = m, size, key
                cf[c, K.CF_PS] = s
                ci[c, K.CI_BLOCKED] = K.B_MEMORY
                if op == K.OP_ST:
                    e_l += ctab[key, 1]
                    charge(gf, eh, s, ctab[key, 1])
                    arr = noc_message(
                        net, swfree, gf, gi, eh, bus, s + ctab[key, 0], c, ins[i, 8], size, 0.0
                    )
                else:
                    arr = noc_message(net, swfree, gf, gi, eh, bus, s, c, ins[i, 8], 1, 0.0)
                heap_push(gi, ht, hi, arr, K.EV_MEM, c, 0)
            else:
                other = ins[i, 3]
                la = xaddr(R, ins, i, 1, 1, eb)
                if la < 0 or la + m > LN:
                    return _fail(ci, gi, c, pc, K.E_CHECK_LOCAL, la, m, LN)
                _mark(ci, c, la, la + m, LN)
                if not 0 <= other < nc or other == c:
                    code = K.E_SEND_TARGET if op == K.OP_SEND else K.E_RECV_TARGET
                    return _fail(ci, gi, c, pc, code, other)
                ci[c, K.CI_PA], ci[c, K.CI_PC2], ci[c, K.CI_PD], ci[c, K.CI_PE] = other, la, m, size
                ci[c, K.CI_PF], ci[c, K.CI_PG] = ins[i, 8], key
                cf[c, K.CF_PS] = s
                if op == K.OP_SEND:
                    ci[c, K.CI_BLOCKED] = K.B_SEND
                    a1 = noc_message(net, swfree, gf, gi, eh, bus, s, c, ins[i, 8], 1, P)
                    heap_push(gi, ht, hi, a1, K.EV_READY, other, c)
                else:
                    ci[c, K.CI_BLOCKED] = K.B_RECV
                    heap_push(gi, ht, hi, s, K.EV_RECV, c, 0)
            break
        pc += 1
    ci[c, K.CI_PC], ci[c, K.CI_RND] = pc, rnd
    cf[c, K.CF_TF], cf[c, K.CF_TE] = tf, te
    ci[c, K.CI_IBIW], ci[c, K.CI_OBIW] = ibiw, obiw
    if rc == K.RC_HOSTOP:  # the run continues after the host op: keep the sums open
        cf[c, K.CF_AM], cf[c, K.CF_AV], cf[c, K.CF_AT] = busy_m, busy_v, busy_t
        cf[c, K.CF_EM], cf[c, K.CF_EV], cf[c, K.CF_EL] = e_m, e_v, e_l
        return rc
    cf[c, K.CF_MB] += busy_m
    cf[c, K.CF_VB] += busy_v
    cf[c, K.CF_TB] += busy_t
    gf[K.G_EM] += e_m
    gf[K.G_EV] += e_v
    gf[K.G_EL] += e_l
    return rc
