"""The compiled engine's event loop: the global event heap, the global-memory request queue, the
send/recv rendezvous and sync/wait arrivals, over flat arrays (layout: raptor.sim.kernel_state).
Semantics, event order and float arithmetic are those of `Engine.run` and its handlers in
raptor.sim.engine; resumed cores run from a FIFO queue in the order the Python engine's nested
calls run them (a handler's resumes come last, first resumed first)."""

from __future__ import annotations

import math

from numba import njit

from raptor.sim import kernel_state as K
from raptor.sim.kernel_core import charge, heap_push, noc_message, run_core
from raptor.sim.kernel_values import host_read, host_write, move


@njit(cache=True, nogil=True)
def _pop(gi, ht, hi):
    """Remove the earliest (t, seq) event; returns (t, kind, a, b)."""
    t, kind, a, b = ht[0], hi[0, 1], hi[0, 2], hi[0, 3]
    gi[K.I_HN] -= 1
    n = gi[K.I_HN]
    lt, ls = ht[n], hi[n, 0]
    i = 0
    while True:
        j = 2 * i + 1
        if j >= n:
            break
        if j + 1 < n and (ht[j + 1] < ht[j] or (ht[j + 1] == ht[j] and hi[j + 1, 0] < hi[j, 0])):
            j += 1
        if lt < ht[j] or (lt == ht[j] and ls < hi[j, 0]):
            break
        ht[i] = ht[j]
        hi[i, 0], hi[i, 1], hi[i, 2], hi[i, 3] = hi[j, 0], hi[j, 1], hi[j, 2], hi[j, 3]
        i = j
    if n > 0:
        ht[i] = lt
        hi[i, 0], hi[i, 1], hi[i, 2], hi[i, 3] = ls, hi[n, 1], hi[n, 2], hi[n, 3]
    return t, kind, a, b


@njit(cache=True, nogil=True)
def _resume(
    ci, cf, gi, q, P: float, c: int, start: float, end: float, stall: float, kind: int, retire: int
):
    """A blocked shared-state instruction of core c completed at end: queue the core to go on."""
    cf[c, K.CF_TB] += end - start - stall
    if kind == K.K_SYNC:
        cf[c, K.CF_SS] += stall
    elif kind == K.K_RECV:
        cf[c, K.CF_SR] += stall
    else:
        cf[c, K.CF_SM] += stall
    cf[c, K.CF_TE] = end + retire * P
    ci[c, K.CI_BLOCKED] = K.B_NONE
    ci[c, K.CI_PC] += 1
    ci[c, K.CI_FRESH] = 1
    q[gi[K.I_QT] % q.size] = c
    gi[K.I_QT] += 1


@njit(cache=True, nogil=True)
def _mem_arrive(
    ci, cf, gf, gi, q, ctab, swfree, local, host, eh, log, P: float, vals: int, c: int, t: float
) -> None:
    hdata, hwritten, inreg, inbuf, outreg, outbuf = host
    is_st, ha, la, m, size, key = (
        ci[c, K.CI_PA],
        ci[c, K.CI_PB],
        ci[c, K.CI_PC2],
        ci[c, K.CI_PD],
        ci[c, K.CI_PE],
        ci[c, K.CI_PG],
    )
    s = cf[c, K.CF_PS]
    glat = ctab[key, 2]
    busy = gf[K.G_GBUSY]
    mstart = t if t > busy else busy
    mend = mstart + glat
    gf[K.G_GBUSY] = mend
    gf[K.G_GE] += ctab[key, 3]
    charge(gf, eh, mstart, ctab[key, 3])
    gf[K.G_GNS] += glat
    gi[K.I_GREQ] += 1
    gi[K.I_GBYTES] += size
    swfree[c] = mend  # transport mode: switch held until the response
    L = local[ci[c, K.CI_LROW]]
    rnd = ci[c, K.CI_RND]
    if not vals:  # timing pass: the value pass makes this access in this place of the order
        log[0][gi[K.I_NMEM]] = c
        gi[K.I_NMEM] += 1
    if is_st:
        if vals:
            host_write(L, la, hdata, hwritten, ha, m, rnd, outreg, outbuf)
        _resume(ci, cf, gi, q, P, c, s, mend, mstart - t, K.K_MEMORY, 3)
    else:
        if vals:
            host_read(L, la, hdata, ha, m, rnd, inreg, inbuf)
        gf[K.G_EL] += ctab[key, 1]
        charge(gf, eh, mend + ctab[key, 0], ctab[key, 1])
        _resume(ci, cf, gi, q, P, c, s, mend + ctab[key, 0], mstart - t, K.K_MEMORY, 2)


@njit(cache=True, nogil=True)
def _rendezvous(
    ci, cf, gf, gi, q, ctab, net, swfree, local, eh, log, prm, snd: int, rcv: int, t: float
) -> int:
    P, bus = prm[0], prm[4]
    s_addr, n, size, s_start = (
        ci[snd, K.CI_PC2],
        ci[snd, K.CI_PD],
        ci[snd, K.CI_PE],
        cf[snd, K.CF_PS],
    )
    r_addr, rsize, r_start = ci[rcv, K.CI_PC2], ci[rcv, K.CI_PE], cf[rcv, K.CF_PS]
    if rsize != size:
        gi[K.I_CORE], gi[K.I_X1], gi[K.I_X2], gi[K.I_X3], gi[K.I_X4] = (
            rcv,
            K.E_SIZE_MISMATCH,
            rsize,
            size,
            snd,
        )
        return K.RC_ERROR
    if prm[K.P_VALUES]:
        move(local[ci[rcv, K.CI_LROW]], r_addr, local[ci[snd, K.CI_LROW]], s_addr, n)
    else:  # timing pass: number the rendezvous for the value pass
        g = gi[K.I_NRDV]
        gi[K.I_NRDV] += 1
        log[1][ci[snd, K.CI_SBASE] + ci[snd, K.CI_NSENT]] = g
        log[2][ci[rcv, K.CI_RBASE] + ci[rcv, K.CI_NRECV]] = g
        log[3][g] = rcv
        ci[snd, K.CI_NSENT] += 1
        ci[rcv, K.CI_NRECV] += 1
    gi[K.I_NOCB] += size
    key, link = ci[snd, K.CI_PG], ci[snd, K.CI_PF]
    rd, wr = ctab[key, 0], ctab[key, 2]
    gf[K.G_EL] += ctab[key, 1] + ctab[key, 3]
    charge(gf, eh, t, ctab[key, 1] + ctab[key, 3])
    r_end = t + rd
    a3 = noc_message(net, swfree, gf, gi, eh, bus, r_end, snd, link, size, 0.0)
    lat = net[link, 0]
    data_ns = (max(1, math.ceil(size / bus)) if size > 0 else 0) * lat
    recv_end = a3 + wr
    x = t - s_start - 2 * lat
    s_stall = x if x > 0.0 else 0.0
    y = recv_end - r_start - rd - wr - data_ns - 2 * lat
    r_stall = y if y > 0.0 else 0.0
    _resume(ci, cf, gi, q, P, snd, s_start, r_end, s_stall, K.K_RECV, 3)
    _resume(ci, cf, gi, q, P, rcv, r_start, recv_end, r_stall, K.K_RECV, 3)
    return K.RC_DONE


@njit(cache=True, nogil=True)
def _receiver_ready(
    ci, net, swfree, gf, gi, ht, hi, eh, bus: int, t: float, rcv: int, snd: int
) -> None:
    """Receiver rcv, at its recv, answers sender snd (1 flit); the data follows at arrival."""
    a2 = noc_message(net, swfree, gf, gi, eh, bus, t, rcv, ci[rcv, K.CI_PF], 1, 0.0)
    heap_push(gi, ht, hi, a2, K.EV_RDV, snd, rcv)


@njit(cache=True, nogil=True)
def run(st, prm) -> int:  # noqa: C901 - the event loop, one branch per event kind
    """Run until every core is done (K.RC_DONE), a host op is due (K.RC_HOSTOP: apply it, call
    again), a program error (K.RC_ERROR) or a deadlock (K.RC_DEADLOCK); details in gi."""
    (ins, akey, ci, cf, regs, evr, fin, local, gw, wflat, wmeta, ctab, net, swfree, gf, gi, ht,
     hi, q, rwait, pend_to, host, scratch, eh, log) = st  # fmt: skip
    P, bus, vals = prm[0], prm[4], prm[K.P_VALUES]
    hsize = host[0].size
    while True:
        if gi[K.I_QH] < gi[K.I_QT]:
            c = q[gi[K.I_QH] % q.size]
            rc = run_core(
                c, ins, akey, ci, cf, regs, evr, fin, local, gw, wflat, wmeta, ctab, net, swfree,
                gf, gi, ht, hi, hsize, scratch, eh, prm,
            )  # fmt: skip
            if rc == K.RC_HOSTOP or rc == K.RC_ERROR:
                return rc
            gi[K.I_QH] += 1
            continue
        if gi[K.I_HN] == 0:
            break
        t, kind, a, b = _pop(gi, ht, hi)
        gf[K.G_NOW] = t
        if kind == K.EV_MEM:
            _mem_arrive(ci, cf, gf, gi, q, ctab, swfree, local, host, eh, log, P, vals, a, t)
        elif kind == K.EV_SYNC:
            evr[a, b] += 1
            if (
                ci[a, K.CI_BLOCKED] == K.B_WAIT
                and ci[a, K.CI_PA] == b
                and evr[a, b] >= ci[a, K.CI_PB]
            ):
                evr[a, b] -= ci[a, K.CI_PB]
                tf = cf[a, K.CF_TF]
                _resume(ci, cf, gi, q, P, a, tf, t, t - tf, K.K_SYNC, 3)
        elif kind == K.EV_WAIT:
            ev, val = ci[a, K.CI_PA], ci[a, K.CI_PB]
            if evr[a, ev] >= val:
                evr[a, ev] -= val
                _resume(ci, cf, gi, q, P, a, t, t, 0.0, K.K_SYNC, 3)
            else:
                ci[a, K.CI_BLOCKED] = K.B_WAIT
        elif kind == K.EV_READY:  # a: receiver, b: sender
            if rwait[a] == b:
                rwait[a] = -1
                _receiver_ready(ci, net, swfree, gf, gi, ht, hi, eh, bus, t, a, b)
            else:
                pend_to[b] = a
        elif kind == K.EV_RECV:
            src = ci[a, K.CI_PA]
            if ci[src, K.CI_N] == 0:
                gi[K.I_CORE], gi[K.I_X1], gi[K.I_X2] = a, K.E_RECV_NO_PROGRAM, src
                return K.RC_ERROR
            if pend_to[src] == a:
                pend_to[src] = -1
                _receiver_ready(ci, net, swfree, gf, gi, ht, hi, eh, bus, t, a, src)
            else:
                rwait[a] = src
                ci[a, K.CI_BLOCKED] = K.B_RECV
        elif kind == K.EV_RDV:
            rc = _rendezvous(ci, cf, gf, gi, q, ctab, net, swfree, local, eh, log, prm, a, b, t)
            if rc != K.RC_DONE:
                return rc
    for c in range(ci.shape[0]):
        if not ci[c, K.CI_DONE]:
            return K.RC_DEADLOCK
    return K.RC_DONE
