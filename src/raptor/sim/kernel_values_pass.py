"""The compiled engine's value pass. The event loop (raptor.sim.kernel) first runs as a timing
pass that computes no value and records the order of the two kinds of events through which cores
share values: the order in which ld and st reach host memory, and the numbering of send/recv
rendezvous. This pass then computes every value with the same functions, core by core: a core
executes its instructions in program order until it finishes, needs a payload whose send has not
executed here yet (sends copy their payload into an arena and never wait: the arena is compacted,
and grown when payloads not yet received fill it), or reaches an ld/st
that is not the next host access in the recorded order. So each ld sees exactly the stores that
preceded it in simulated time, also in racy programs, and a recv gets the sender's local values
at its send, as in the event loop (a core's local memory changes only through its own
instructions; a sender waits at its send until the data has moved). Consecutive MVMs of one core
use the same weight matrix while it is still in cache, instead of being interleaved with every
other core's.

It cannot deadlock: suppose every unfinished core is blocked, and take, among the instructions
they are blocked at, the one E that came first in the timing pass. Every instruction that came
before E there, on any core, has executed here (one that has not belongs to a core blocked at an
instruction no later in its program, so no later in the timing pass, than it: before E). If E is
an ld/st, every host access recorded before it has executed, so it is next in the order; if E is
a recv, its matching send came before it (the rendezvous completes after the send) and has
executed. Either way E's core is not blocked: a contradiction. The driver (raptor.sim.compiled)
runs this pass only after a timing pass without error or deadlock."""

from __future__ import annotations

from numba import njit

from raptor.sim import kernel_state as K
from raptor.sim.blas import mvm_into
from raptor.sim.kernel_core import ldst_addrs, scalar_op, vec_operands, xaddr
from raptor.sim.kernel_values import (
    fill,
    host_read,
    host_write,
    is_inline,
    move,
    mvm_store,
    vector_inline,
)


@njit(cache=True, nogil=True)
def _wake(vi, vg, ready, c: int, state: int) -> None:
    """Make core c runnable again if it is blocked in `state`."""
    if vi[c, K.V_BLOCKED] == state:
        vi[c, K.V_BLOCKED] = K.VB_NONE
        ready[vg[K.VG_NREADY]] = c
        vg[K.VG_NREADY] += 1


@njit(cache=True, nogil=True)
def _compact(arena, pay, vg, m: int) -> bool:
    """Move the payloads not yet received to the start of the arena, in the order they were sent;
    whether m more elements then fit."""
    aoff, asz, sent, order = pay
    top = 0
    k2 = 0
    for k in range(vg[K.VG_NLIST]):
        g = order[k]
        if sent[g] == 1:
            move(arena, top, arena, aoff[g], asz[g])  # never upwards: a forward copy is safe
            aoff[g] = top
            top += asz[g]
            order[k2] = g
            k2 += 1
    vg[K.VG_TOP], vg[K.VG_NLIST] = top, k2
    return top + m <= arena.size


@njit(cache=True, nogil=True)
def _core(  # noqa: C901 - one flat dispatch loop
    c, ins, ci, vi, vg, regs, local, gw, wflat, wmeta, host, log, ready, arena, pay, scratch, eb,
    rounds,
) -> int:  # fmt: skip
    """Run core c's values until it blocks, finishes (K.RC_DONE) or reaches a vector op numpy
    computes (K.RC_HOSTOP, details in vg; the core goes on after it when called again), or needs more
    arena than there is (K.RC_GROW: it goes on at the same send)."""
    hdata, hwritten, inreg, inbuf, outreg, outbuf = host
    memlog, slog, rlog, rcv_of = log
    aoff, asz, sent, order = pay
    base, n, gbase = ci[c, K.CI_BASE], ci[c, K.CI_N], ci[c, K.CI_GBASE]
    pc, rnd = vi[c, K.V_PC], vi[c, K.V_RND]
    R = regs[c]
    L = local[ci[c, K.CI_LROW]]
    rc = K.RC_DONE
    while True:
        if pc >= n:
            rnd += 1
            if rnd >= rounds:
                vi[c, K.V_BLOCKED] = K.VB_DONE
                break
            pc = 0
            continue
        i = base + pc
        op = ins[i, 0]
        if op < K.OP_SETBW:
            scalar_op(R, ins, i, op)
        elif op == K.OP_MVMUL:
            mi = gw[gbase + ins[i, 5]]
            cols = wmeta[mi, 2]
            mvm_into(L, R[ins[i, 2]] // eb, wflat, wmeta[mi, 0], wmeta[mi, 1], cols, scratch)
            mvm_store(L, R[ins[i, 1]] // eb, scratch, cols, ins[i, 4])
        elif K.OP_VEC_LO <= op <= K.OP_VEC_HI:
            d, a, b = vec_operands(R, ins, i, op, eb)
            if is_inline(op):
                vector_inline(op, L, d, a, b, ins[i, 6])
            else:  # numpy computes it: hand over, then go on after it
                vg[K.VG_OP], vg[K.VG_D], vg[K.VG_A], vg[K.VG_B] = op, d, a, b
                vg[K.VG_N] = ins[i, 6]
                pc += 1
                rc = K.RC_HOSTOP
                break
        elif op == K.OP_LLDI:
            fill(L, xaddr(R, ins, i, 1, 1, eb), ins[i, 6] // eb, ins[i, 3])
        elif op == K.OP_LMV:
            move(L, xaddr(R, ins, i, 1, 1, eb), L, xaddr(R, ins, i, 2, 2, eb), ins[i, 6] // eb)
        elif op == K.OP_LD or op == K.OP_ST:
            k = vg[K.VG_MPTR]
            if memlog[k] != c:  # not this access's turn yet
                vi[c, K.V_BLOCKED] = K.VB_HOST
                break
            la, ha = ldst_addrs(R, ins, i, op, eb)
            m = ins[i, 6] // eb
            if op == K.OP_LD:
                host_read(L, la, hdata, ha, m, rnd, inreg, inbuf)
            else:
                host_write(L, la, hdata, hwritten, ha, m, rnd, outreg, outbuf)
            vg[K.VG_MPTR] = k + 1
            if k + 1 < memlog.size:
                _wake(vi, vg, ready, memlog[k + 1], K.VB_HOST)
        elif op == K.OP_SEND:
            m = ins[i, 6] // eb
            if vg[K.VG_TOP] + m > arena.size and not _compact(arena, pay, vg, m):
                rc = K.RC_GROW
                break
            g = slog[ci[c, K.CI_SBASE] + vi[c, K.V_NSENT]]
            vi[c, K.V_NSENT] += 1
            top = vg[K.VG_TOP]
            move(arena, top, L, xaddr(R, ins, i, 1, 1, eb), m)
            aoff[g], asz[g], sent[g] = top, m, 1
            order[vg[K.VG_NLIST]] = g
            vg[K.VG_NLIST] += 1
            vg[K.VG_TOP] = top + m
            vg[K.VG_LIVE] += 1
            _wake(vi, vg, ready, rcv_of[g], K.VB_RECV)
        elif op == K.OP_RECV:
            g = rlog[ci[c, K.CI_RBASE] + vi[c, K.V_NRECV]]
            if not sent[g]:
                vi[c, K.V_BLOCKED] = K.VB_RECV
                break
            vi[c, K.V_NRECV] += 1
            move(L, xaddr(R, ins, i, 1, 1, eb), arena, aoff[g], ins[i, 6] // eb)
            sent[g] = 2  # received: its place in the arena is free
            vg[K.VG_LIVE] -= 1
            if vg[K.VG_LIVE] == 0:  # the arena is empty: start it again
                vg[K.VG_TOP] = 0
                vg[K.VG_NLIST] = 0
        # setbw, sync, wait: no values
        pc += 1
    vi[c, K.V_PC], vi[c, K.V_RND] = pc, rnd
    return rc


@njit(cache=True, nogil=True)
def run_values(vs, st, prm) -> int:
    """Run the value pass (state vs, made by raptor.sim.compiled) until every core is done
    (K.RC_DONE), a host op is due (K.RC_HOSTOP: apply it, call again) or the arena is full
    (K.RC_GROW: give vs a larger one with the same contents, call again); K.RC_DEADLOCK means the
    timing pass's record does not fit the program (an internal error)."""
    vi, vg, regs, ready, arena, pay = vs
    ins, ci, local, gw, wflat, wmeta = st[K.S_INS], st[K.S_CI], st[K.S_LOCAL], st[K.S_GW], st[K.S_WFLAT], st[K.S_WMETA]  # fmt: skip
    host, scratch, log = st[K.S_HOST], st[K.S_SCRATCH], st[K.S_LOG]
    eb, rounds = prm[1], prm[3]
    while True:
        c = vg[K.VG_CUR]
        if c < 0:
            if vg[K.VG_NREADY] == 0:
                break
            vg[K.VG_NREADY] -= 1
            c = ready[vg[K.VG_NREADY]]
            vg[K.VG_CUR] = c
        rc = _core(
            c, ins, ci, vi, vg, regs, local, gw, wflat, wmeta, host, log, ready, arena, pay, scratch,
            eb, rounds,
        )  # fmt: skip
        if rc == K.RC_HOSTOP or rc == K.RC_GROW:
            return rc
        vg[K.VG_CUR] = -1
    for c in range(vi.shape[0]):
        if ci[c, K.CI_N] > 0 and vi[c, K.V_BLOCKED] != K.VB_DONE:
            return K.RC_DEADLOCK
    return K.RC_DONE
