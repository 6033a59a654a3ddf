"""The message order's event loop, compiled: raptor.spatial.message_order lays the plan out in flat
arrays (`OrderTables`) and `run_order` runs the execution on estimated times that
`order_messages` describes, event for event as its definition there says (the same heap order,
the same staleness rules, the same float arithmetic), and returns the sequence of exchanges, the
cores' free times and the layers' time windows. Everything here is in this one file: numba
caches a function by its own file, so a kernel that called into another file could keep stale
inlined code.

Indices: cores are positions in the sorted list of cores with nodes, nodes positions in the
graph's node list, steps a node's steps after those of the nodes before it. A message is made
by one step from a template (the step's sends in creation order); its id is the order in which
the execution made it. A "cores set" is one core (id = the core) or a reduction tree's cores
(id = core count + tree), the unit a step event runs on. Row masks are bit sets of W 64-bit
words per (fed node, row, source) key."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

INF = np.inf

# run_order's status
DONE, STUCK, FULL = 0, 1, 2


class OrderTables(NamedTuple):
    """The static tables of one message order (see the module docstring for the indices)."""

    cn_ptr: np.ndarray  # core -> its nodes in cn_nodes[cn_ptr[c]:cn_ptr[c + 1]], program order
    cn_nodes: np.ndarray
    n_core: np.ndarray  # node -> core
    n_layer: np.ndarray  # node -> layer (index of the time window it widens)
    n_lane: np.ndarray  # node -> estimated ns per output pixel
    n_keep: np.ndarray  # node -> output row slots (-1: not a producer with persistent rows)
    n_sptr: np.ndarray  # node -> its steps [n_sptr[n], n_sptr[n + 1])
    n_gang: np.ndarray  # node -> its reduction tree (-1: none)
    n_rowoff: np.ndarray  # node -> offset of its pending-message counts per output row
    n_row0: np.ndarray  # node -> its first output row
    n_nrows: np.ndarray  # node -> output rows counted (0: sends nothing)
    s_oy: np.ndarray  # step -> output row (-1: a whole band)
    s_pa: np.ndarray  # step -> first pixel
    s_pb: np.ndarray  # step -> end pixel
    s_wptr: np.ndarray  # step -> waits before it: (event, count) in s_wev, s_wcnt
    s_wev: np.ndarray
    s_wcnt: np.ndarray
    s_yptr: np.ndarray  # step -> syncs after it: (target core, event) in s_ycore, s_yev
    s_ycore: np.ndarray
    s_yev: np.ndarray
    s_nptr: np.ndarray  # step -> columns it needs received: (key, first bit, end bit)
    s_nkey: np.ndarray
    s_na: np.ndarray
    s_nb: np.ndarray
    s_mptr: np.ndarray  # step -> the templates of the messages it makes
    t_dest: np.ndarray  # template -> destination core
    t_at: np.ndarray  # template -> position of the fed node on the destination core
    t_lu: np.ndarray  # template -> last step of the fed node reading the slot's previous row, -1
    t_key: np.ndarray  # template -> the key whose bits [t_a, t_b) it delivers
    t_a: np.ndarray
    t_b: np.ndarray
    t_row: np.ndarray  # template -> index in the pending counts of its producer's output row
    t_dur: np.ndarray  # template -> flits plus extra sends: the exchange takes t_dur link latencies
    g_ptr: np.ndarray  # tree -> its member nodes in g_nodes
    g_nodes: np.ndarray
    g_cs: np.ndarray  # tree -> its cores set
    cs_ptr: np.ndarray  # cores set -> its cores in cs_cores
    cs_cores: np.ndarray
    end_wptr: np.ndarray  # core -> waits before its end of round: (event, count)
    end_wev: np.ndarray
    end_wcnt: np.ndarray
    lat: np.ndarray  # (producer core, consumer core) -> link latency ns per flit
    have0: np.ndarray  # key -> W words of columns present before any message (host pieces)
    ev0: np.ndarray  # core -> event -> tokens received before the first event (start syncs)
    n_layers: int


@njit(cache=True, nogil=True)
def _bits(hv, key: int, a: int, b: int, set_them: bool) -> bool:
    """Whether bits [a, b) of key's mask were all set; sets them too if `set_them`."""
    full = True
    x = a
    while x < b:
        w = x >> 6
        lo = x & 63
        n = min(64 - lo, b - x)
        m = np.uint64(0xFFFFFFFFFFFFFFFF)
        if n < 64:
            m = ((np.uint64(1) << np.uint64(n)) - np.uint64(1)) << np.uint64(lo)
        if hv[key, w] & m != m:
            if not set_them:
                return False
            full = False
        if set_them:
            hv[key, w] |= m
        x += n
    return full


@njit(cache=True, nogil=True)
def _cur(cn_ptr, cn_nodes, ni, c: int) -> int:
    """Core c's current node, -1 once all its nodes ran."""
    i = cn_ptr[c] + ni[c]
    return cn_nodes[i] if i < cn_ptr[c + 1] else -1


@njit(cache=True, nogil=True)
def _list_add(lst, n, pos, c: int, x: int) -> None:
    """Add x to core c's list (lst[c, :n[c]], positions in pos[c]) unless it is there."""
    if pos[c, x] < 0:
        pos[c, x] = n[c]
        lst[c, n[c]] = x
        n[c] += 1


@njit(cache=True, nogil=True)
def _list_drop(lst, n, pos, c: int, x: int) -> None:
    """Remove x from core c's list if it is there (the last entry takes its place)."""
    i = pos[c, x]
    if i >= 0:
        last = lst[c, n[c] - 1]
        lst[c, i] = last
        pos[c, last] = i
        pos[c, x] = -1
        n[c] -= 1


@njit(cache=True, nogil=True)
def _heap_less(et, es, a: int, b: int) -> bool:
    """Event a pops before event b: earlier, an exchange before a step, pushed first."""
    if et[a] != et[b]:
        return et[a] < et[b]
    if es[a] != es[b]:
        return es[a] < es[b]
    return a < b


@njit(cache=True, nogil=True)
def _heap_push(hp, hn, et, es, e: int) -> None:
    i = hn[0]
    hn[0] += 1
    while i > 0:
        up = (i - 1) >> 1
        if not _heap_less(et, es, e, hp[up]):
            break
        hp[i] = hp[up]
        i = up
    hp[i] = e


@njit(cache=True, nogil=True)
def _heap_pop(hp, hn, et, es) -> int:
    top = hp[0]
    hn[0] -= 1
    n = hn[0]
    if n == 0:
        return top
    e = hp[n]
    i = 0
    while True:
        kid = 2 * i + 1
        if kid >= n:
            break
        if kid + 1 < n and _heap_less(et, es, hp[kid + 1], hp[kid]):
            kid += 1
        if not _heap_less(et, es, hp[kid], e):
            break
        hp[i] = hp[kid]
        i = kid
    hp[i] = e
    return top


class OrderState(NamedTuple):
    """The mutable state of one execution (`new_state`); counters in `ic` (IC_*) and `now`."""

    ni: np.ndarray  # core -> index of its current node among its nodes
    k: np.ndarray  # core -> steps of the current node done
    t: np.ndarray  # core -> when it is free
    ver: np.ndarray  # core -> version (bumped by every change to what its events read)
    done: np.ndarray
    ev: np.ndarray  # core -> event -> tokens received and not yet waited for
    hv: np.ndarray  # key -> columns received
    ro: np.ndarray  # pending messages per producer output row
    ro_lo: np.ndarray  # node -> no pending row of it below this index of ro
    m_tpl: np.ndarray  # message -> template
    m_next: np.ndarray  # message -> next pending message of its core pair (-1: last)
    m_prev: np.ndarray
    m_pend: np.ndarray
    m_lset: np.ndarray  # message -> the last exchange pushed for it: versions and time
    m_lvp: np.ndarray
    m_lvd: np.ndarray
    m_lwhen: np.ndarray
    pr_head: np.ndarray  # (sender, receiver) -> first pending message, last, count
    pr_tail: np.ndarray
    pr_cnt: np.ndarray
    pr_set: np.ndarray  # (sender, receiver) -> the pair's last scan: versions, due time
    pr_vp: np.ndarray
    pr_vd: np.ndarray
    pr_when: np.ndarray
    dl: np.ndarray  # core -> cores it holds pending messages for (dn of them; dpos: positions)
    dn: np.ndarray
    dpos: np.ndarray
    il: np.ndarray  # core -> cores holding pending messages for it (inn; ipos)
    inn: np.ndarray
    ipos: np.ndarray
    mv_set: np.ndarray  # core -> ready() at a version
    mv_ver: np.ndarray
    mv_val: np.ndarray
    tm_epoch: np.ndarray  # tree -> whether its members are ready together, valid for one event
    tm_val: np.ndarray
    lc_seq: np.ndarray  # cores set -> its last step event
    et: np.ndarray  # event -> time, is a step, cores set or (sender, receiver), message,
    es: np.ndarray  # versions (the sender's and receiver's, or the cores set's from vpool)
    ea: np.ndarray
    eb: np.ndarray
    emid: np.ndarray
    ev0: np.ndarray
    ev1: np.ndarray
    vpool: np.ndarray
    hp: np.ndarray  # the heap of events
    tl_start: np.ndarray  # layer -> its time window, whether it ran, the order layers first ran
    tl_end: np.ndarray
    tl_seen: np.ndarray
    tl_order: np.ndarray
    xlog: np.ndarray  # exchange -> template, sender's node and slot, receiver's node and slot
    wmark: np.ndarray  # scratch: the cores an event touches and those offered after it
    wl: np.ndarray
    umark: np.ndarray
    ul: np.ndarray
    fm: np.ndarray
    fd: np.ndarray
    fv: np.ndarray
    sc: np.ndarray  # scratch: a core's senders, sorted
    ic: np.ndarray  # counters (IC_*)
    now: np.ndarray  # [now]


# the counters in OrderState.ic: messages made, events pushed, version pool used, heap size,
# layers seen, exchanges logged, whether the event arrays overflowed
IC_NMSG, IC_SEQ, IC_NV, IC_HN, IC_NTL, IC_NX, IC_FULL = range(7)


def new_state(tb: OrderTables, cap: int) -> OrderState:
    """A fresh execution state for tables tb with room for `cap` events."""
    nc = tb.cn_ptr.size - 1
    nm = max(1, tb.t_dest.size)
    ng = max(1, tb.g_ptr.size - 1)
    nl = tb.n_layers

    def full(shape, v, dt=np.int64):
        return np.full(shape, v, dt)

    def zeros(shape, dt=np.int64):
        return np.zeros(shape, dt)

    return OrderState(
        ni=zeros(nc), k=zeros(nc), t=zeros(nc, np.float64), ver=zeros(nc), done=zeros(nc, np.bool_),
        ev=tb.ev0.copy(), hv=tb.have0.copy(), ro=zeros(max(1, int(tb.n_rowoff[-1]))),
        ro_lo=tb.n_rowoff[:-1].copy(),
        m_tpl=zeros(nm), m_next=full(nm, -1), m_prev=full(nm, -1), m_pend=zeros(nm, np.bool_),
        m_lset=zeros(nm, np.bool_), m_lvp=zeros(nm), m_lvd=zeros(nm), m_lwhen=zeros(nm, np.float64),
        pr_head=full((nc, nc), -1), pr_tail=full((nc, nc), -1), pr_cnt=zeros((nc, nc)),
        pr_set=zeros((nc, nc), np.bool_), pr_vp=zeros((nc, nc)), pr_vd=zeros((nc, nc)),
        pr_when=zeros((nc, nc), np.float64),
        dl=zeros((nc, nc)), dn=zeros(nc), dpos=full((nc, nc), -1),
        il=zeros((nc, nc)), inn=zeros(nc), ipos=full((nc, nc), -1),
        mv_set=zeros(nc, np.bool_), mv_ver=zeros(nc), mv_val=zeros(nc, np.bool_),
        tm_epoch=full(ng, -1), tm_val=zeros(ng, np.bool_), lc_seq=full(tb.cs_ptr.size - 1, -1),
        et=zeros(cap, np.float64), es=zeros(cap, np.int8), ea=zeros(cap), eb=zeros(cap),
        emid=zeros(cap), ev0=zeros(cap), ev1=zeros(cap), vpool=zeros(2 * cap + 16), hp=zeros(cap),
        tl_start=zeros(nl, np.float64), tl_end=zeros(nl, np.float64),
        tl_seen=zeros(nl, np.bool_), tl_order=zeros(nl),
        xlog=zeros((nm, 5)), wmark=full(nc, -1), wl=zeros(nc), umark=full(nc, -1), ul=zeros(nc),
        fm=zeros(nc), fd=zeros(nc), fv=zeros(nc), sc=zeros(nc), ic=zeros(7), now=zeros(1, np.float64),
    )  # fmt: skip


@njit(cache=True, nogil=True)
def _ready(tb, done, ni, k, ev, dn, ro, ro_lo, hv, c: int) -> bool:
    """Core c can run its next event (message_order.order_messages' `_ready`)."""
    if done[c]:
        return False
    nd = _cur(tb.cn_ptr, tb.cn_nodes, ni, c)
    if nd < 0:
        if dn[c] > 0:
            return False
        for i in range(tb.end_wptr[c], tb.end_wptr[c + 1]):
            if ev[c, tb.end_wev[i]] < tb.end_wcnt[i]:
                return False
        return True
    s0 = tb.n_sptr[nd]
    j = k[c]
    if j == tb.n_sptr[nd + 1] - s0:
        return True
    g = s0 + j
    keep = tb.n_keep[nd]
    if keep >= 0 and tb.n_nrows[nd] > 0:
        p = ro_lo[nd]
        end = tb.n_rowoff[nd + 1]
        while p < end and ro[p] == 0:
            p += 1
        ro_lo[nd] = p
        if p < end and p - tb.n_rowoff[nd] + tb.n_row0[nd] <= tb.s_oy[g] - keep:
            return False
    for i in range(tb.s_wptr[g], tb.s_wptr[g + 1]):
        if ev[c, tb.s_wev[i]] < tb.s_wcnt[i]:
            return False
    for i in range(tb.s_nptr[g], tb.s_nptr[g + 1]):
        if not _bits(hv, tb.s_nkey[i], tb.s_na[i], tb.s_nb[i], False):
            return False
    return True


@njit(cache=True, nogil=True)
def _free_mid(pr_head, m_next, m_tpl, t_at, t_lu, ni, k, p: int, d: int) -> int:
    """The first pending message from p to d whose row slot on d is free, -1 if none: the fed
    node is at or after d's current node and, if the slot held an earlier row, d's current node
    has done the last step reading it."""
    nd = ni[d]
    kd = k[d]
    mid = pr_head[p, d]
    while mid >= 0:
        tp = m_tpl[mid]
        at = t_at[tp]
        lu = t_lu[tp]
        if at >= nd and (lu < 0 or (at == nd and lu < kd)):
            return mid
        mid = m_next[mid]
    return -1


@njit(cache=True, nogil=True)
def _slot(cn_ptr, cn_nodes, n_sptr, ni, k, c: int) -> tuple[int, int]:
    """(node, slot) core c's messages go to now: after step k of its current node, or the end of
    its last node once all ran."""
    nd = _cur(cn_ptr, cn_nodes, ni, c)
    if nd < 0:
        last = cn_nodes[cn_ptr[c + 1] - 1]
        return last, n_sptr[last + 1] - n_sptr[last]
    return nd, k[c]


@njit(cache=True, nogil=True)
def _isort(a, n: int) -> None:
    """Sort a[:n] in place, ascending (insertion sort: the lists are short and mostly sorted)."""
    for i in range(1, n):
        x = a[i]
        j = i - 1
        while j >= 0 and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@njit(cache=True, nogil=True)
def _isort3(a, b, c, n: int) -> None:
    """Sort the triples (a[i], b[i], c[i]) of i < n in place by a, ascending (a's are distinct)."""
    for i in range(1, n):
        x, y, z = a[i], b[i], c[i]
        j = i - 1
        while j >= 0 and a[j] > x:
            a[j + 1], b[j + 1], c[j + 1] = a[j], b[j], c[j]
            j -= 1
        a[j + 1], b[j + 1], c[j + 1] = x, y, z


@njit(cache=True, nogil=True)
def _mark(mark, lst, cnt, stamp: int, x: int) -> None:
    """Add x to the list lst[:cnt[0]] unless it was added since `stamp` began."""
    if mark[x] != stamp:
        mark[x] = stamp
        lst[cnt[0]] = x
        cnt[0] += 1


@njit(cache=True, nogil=True)
def run_order(tb, st) -> int:  # noqa: C901 - order_messages' whole event loop, inlined for speed
    """Run the execution of tables tb on state st (new_state); DONE, STUCK (cores unfinished
    when no event is left) or FULL (more events than st has room for: run again with more).

    One loop: offer (push the events of every core the last event touched, in core order: all
    cores before the first), then pop the next event that is not stale and run it. The names
    follow order_messages' Python description."""
    ncore = tb.cn_ptr.size - 1
    cn_ptr, cn_nodes, n_sptr = tb.cn_ptr, tb.cn_nodes, tb.n_sptr
    ni, k, t, ver, done = st.ni, st.k, st.t, st.ver, st.done
    ev, hv, ro, ro_lo = st.ev, st.hv, st.ro, st.ro_lo
    m_tpl, m_next, m_prev, m_pend = st.m_tpl, st.m_next, st.m_prev, st.m_pend
    m_lset, m_lvp, m_lvd, m_lwhen = st.m_lset, st.m_lvp, st.m_lvd, st.m_lwhen
    pr_head, pr_tail, pr_cnt = st.pr_head, st.pr_tail, st.pr_cnt
    pr_set, pr_vp, pr_vd, pr_when = st.pr_set, st.pr_vp, st.pr_vd, st.pr_when
    dl, dn, dpos, il, inn, ipos = st.dl, st.dn, st.dpos, st.il, st.inn, st.ipos
    mv_set, mv_ver, mv_val = st.mv_set, st.mv_ver, st.mv_val
    et, es, ea, eb, emid = st.et, st.es, st.ea, st.eb, st.emid
    ev0, ev1, vpool, hp = st.ev0, st.ev1, st.vpool, st.hp
    cap = et.size
    ic = st.ic
    hn = ic[IC_HN:]
    wcnt = np.zeros(1, np.int64)
    ucnt = np.zeros(1, np.int64)
    # pushes one offer makes, in order: message, sender, receiver, versions, time
    q_mid = np.empty(2 * ncore + 1, np.int64)
    q_p = np.empty(2 * ncore + 1, np.int64)
    q_d = np.empty(2 * ncore + 1, np.int64)
    q_vp = np.empty(2 * ncore + 1, np.int64)
    q_vd = np.empty(2 * ncore + 1, np.int64)
    q_when = np.empty(2 * ncore + 1, np.float64)
    epoch = 0
    stamp = 0
    nmsg = 0
    seq = 0
    nv = 0
    ntl = 0
    nx = 0
    now = 0.0
    for c in range(ncore):
        st.ul[c] = c
    ucnt[0] = ncore
    while True:
        # ---- offer every touched core, in core order
        _isort(st.ul, ucnt[0])
        for ui in range(ucnt[0]):
            c = st.ul[ui]
            soon = INF
            tc = t[c]
            vc = ver[c]
            base = tc if tc > now else now
            nq = 0
            if dn[c] > 0:
                nf = 0
                for i in range(dn[c]):
                    d = dl[c, i]
                    vd = ver[d]
                    if pr_set[c, d] and pr_vp[c, d] == vc and pr_vd[c, d] == vd:
                        w = pr_when[c, d]
                        soon = w if w < soon else soon
                        continue
                    mid = _free_mid(pr_head, m_next, m_tpl, tb.t_at, tb.t_lu, ni, k, c, d)
                    if mid < 0:
                        pr_set[c, d] = True
                        pr_vp[c, d] = vc
                        pr_vd[c, d] = vd
                        pr_when[c, d] = INF
                    else:
                        st.fm[nf] = mid
                        st.fd[nf] = d
                        st.fv[nf] = vd
                        nf += 1
                _isort3(st.fm, st.fd, st.fv, nf)
                for i in range(nf):
                    d = st.fd[i]
                    td = t[d]
                    when = td if td > base else base
                    if when < soon:
                        soon = when
                    q_mid[nq], q_p[nq], q_d[nq] = st.fm[i], c, d
                    q_vp[nq], q_vd[nq], q_when[nq] = vc, st.fv[i], when
                    nq += 1
                    pr_set[c, d] = True
                    pr_vp[c, d] = vc
                    pr_vd[c, d] = st.fv[i]
                    pr_when[c, d] = when
            if inn[c] > 0:
                ni_c = inn[c]
                for i in range(ni_c):
                    st.sc[i] = il[c, i]
                _isort(st.sc, ni_c)
                for pi in range(ni_c):
                    p = st.sc[pi]
                    if pr_cnt[p, c] == 0:
                        continue
                    vp = ver[p]
                    if pr_set[p, c] and pr_vp[p, c] == vp and pr_vd[p, c] == vc:
                        w = pr_when[p, c]
                    else:
                        mid = _free_mid(pr_head, m_next, m_tpl, tb.t_at, tb.t_lu, ni, k, p, c)
                        w = INF
                        if mid >= 0:
                            tp, td = t[p], t[c]
                            w = tp if tp > td else td
                            w = w if w > now else now
                            q_mid[nq], q_p[nq], q_d[nq] = mid, p, c
                            q_vp[nq], q_vd[nq], q_when[nq] = vp, vc, w
                            nq += 1
                        pr_set[p, c] = True
                        pr_vp[p, c] = vp
                        pr_vd[p, c] = vc
                        pr_when[p, c] = w
                    if w < soon:
                        soon = w
            for i in range(nq):  # the exchanges, unless the same was the last pushed for them
                mid, when = q_mid[i], q_when[i]
                if m_lset[mid] and m_lvp[mid] == q_vp[i] and m_lvd[mid] == q_vd[i] and m_lwhen[mid] == when:  # fmt: skip
                    continue
                m_lset[mid] = True
                m_lvp[mid], m_lvd[mid], m_lwhen[mid] = q_vp[i], q_vd[i], when
                if seq == cap:
                    ic[IC_FULL] = 1
                    return FULL
                e = seq
                seq += 1
                et[e], es[e], ea[e], eb[e] = when, 0, q_p[i], q_d[i]
                emid[e], ev0[e], ev1[e] = mid, q_vp[i], q_vd[i]
                _heap_push(hp, hn, et, es, e)
            # ready? (memo per core version)
            if not (mv_set[c] and mv_ver[c] == vc):
                mv_set[c], mv_ver[c] = True, vc
                mv_val[c] = _ready(tb, done, ni, k, ev, dn, ro, ro_lo, hv, c)
            if not mv_val[c]:
                continue
            nd = _cur(cn_ptr, cn_nodes, ni, c)
            j = k[c]
            nid = -1 if nd < 0 or j == n_sptr[nd + 1] - n_sptr[nd] else nd
            g = tb.n_gang[nid] if nid >= 0 else -1
            if g < 0:
                cs = c
                start = base
            else:
                if st.tm_epoch[g] != epoch:  # the tree's members all at step j, ready
                    ok = True
                    for i in range(tb.g_ptr[g], tb.g_ptr[g + 1]):
                        m = tb.g_nodes[i]
                        mc = tb.n_core[m]
                        if _cur(cn_ptr, cn_nodes, ni, mc) != m or k[mc] != j:
                            ok = False
                            break
                        if not (mv_set[mc] and mv_ver[mc] == ver[mc]):
                            mv_set[mc], mv_ver[mc] = True, ver[mc]
                            mv_val[mc] = _ready(tb, done, ni, k, ev, dn, ro, ro_lo, hv, mc)
                        if not mv_val[mc]:
                            ok = False
                            break
                    st.tm_epoch[g] = epoch
                    st.tm_val[g] = ok
                if not st.tm_val[g]:
                    continue
                cs = tb.g_cs[g]
                start = now
                for i in range(tb.cs_ptr[cs], tb.cs_ptr[cs + 1]):
                    x = t[tb.cs_cores[i]]
                    if x > start:
                        start = x
            if nid >= 0:
                s = n_sptr[nid] + j
                if soon < start + (tb.s_pb[s] - tb.s_pa[s]) * tb.n_lane[nid] / 2:
                    continue
            a, b = tb.cs_ptr[cs], tb.cs_ptr[cs + 1]
            e = st.lc_seq[cs]
            if e >= 0 and et[e] == start:
                same = True
                for i in range(a, b):
                    if vpool[ev0[e] + i - a] != ver[tb.cs_cores[i]]:
                        same = False
                        break
                if same:
                    continue
            if seq == cap or nv + b - a > vpool.size:
                ic[IC_FULL] = 1
                return FULL
            e = seq
            seq += 1
            et[e], es[e], ea[e], eb[e] = start, 1, cs, 0
            for i in range(a, b):
                vpool[nv + i - a] = ver[tb.cs_cores[i]]
            ev0[e] = nv
            nv += b - a
            st.lc_seq[cs] = e
            _heap_push(hp, hn, et, es, e)
        # ---- the next event that is not stale
        found = False
        step = False
        e = -1
        while hn[0] > 0:
            e = _heap_pop(hp, hn, et, es)
            step = es[e] == 1
            if step:
                cs = ea[e]
                a, b = tb.cs_ptr[cs], tb.cs_ptr[cs + 1]
                stale = False
                for i in range(a, b):
                    if ver[tb.cs_cores[i]] != vpool[ev0[e] + i - a]:
                        stale = True
                        break
                if stale:
                    continue
            elif ver[ea[e]] != ev0[e] or ver[eb[e]] != ev1[e]:
                continue
            when = et[e]
            if when > now:
                now = when
            if not step and not m_pend[emid[e]]:
                continue
            found = True
            break
        if not found:
            break
        when = et[e]
        stamp += 1
        wcnt[0] = 0
        ucnt[0] = 0
        p = d = -1
        a = b = 0
        if step:
            cs = ea[e]
            a, b = tb.cs_ptr[cs], tb.cs_ptr[cs + 1]
            for i in range(a, b):
                _mark(st.wmark, st.wl, wcnt, stamp, tb.cs_cores[i])
            for i in range(a, b):
                c = tb.cs_cores[i]
                # ---- run core c's next event
                nd = _cur(cn_ptr, cn_nodes, ni, c)
                if nd < 0:  # the end of its round
                    for x in range(tb.end_wptr[c], tb.end_wptr[c + 1]):
                        ev[c, tb.end_wev[x]] -= tb.end_wcnt[x]
                    done[c] = True
                elif k[c] == n_sptr[nd + 1] - n_sptr[nd]:  # entering its next node
                    ni[c] += 1
                    k[c] = 0
                    for x in range(inn[c]):
                        _mark(st.wmark, st.wl, wcnt, stamp, il[c, x])
                else:  # a step
                    j = k[c]
                    g = n_sptr[nd] + j
                    for x in range(tb.s_wptr[g], tb.s_wptr[g + 1]):
                        ev[c, tb.s_wev[x]] -= tb.s_wcnt[x]
                    t[c] = when + (tb.s_pb[g] - tb.s_pa[g]) * tb.n_lane[nd]
                    ly = tb.n_layer[nd]
                    if not st.tl_seen[ly]:
                        st.tl_seen[ly] = True
                        st.tl_start[ly] = when
                        st.tl_end[ly] = 0.0
                        st.tl_order[ntl] = ly
                        ntl += 1
                    st.tl_start[ly] = min(st.tl_start[ly], when)
                    st.tl_end[ly] = max(st.tl_end[ly], t[c])
                    for x in range(tb.s_yptr[g], tb.s_yptr[g + 1]):
                        y = tb.s_ycore[x]
                        ev[y, tb.s_yev[x]] += 1
                        _mark(st.wmark, st.wl, wcnt, stamp, y)
                    k[c] = j + 1
                    for tp in range(tb.s_mptr[g], tb.s_mptr[g + 1]):
                        mid = nmsg
                        nmsg += 1
                        dd = tb.t_dest[tp]
                        m_tpl[mid] = tp
                        m_pend[mid] = True
                        tail = pr_tail[c, dd]
                        m_prev[mid] = tail
                        m_next[mid] = -1
                        if tail >= 0:
                            m_next[tail] = mid
                        else:
                            pr_head[c, dd] = mid
                        pr_tail[c, dd] = mid
                        if pr_cnt[c, dd] == 0:
                            _list_add(dl, dn, dpos, c, dd)
                        pr_cnt[c, dd] += 1
                        r = tb.t_row[tp]
                        ro[r] += 1
                        if r < ro_lo[nd]:
                            ro_lo[nd] = r
                        _list_add(il, inn, ipos, dd, c)
                        _mark(st.wmark, st.wl, wcnt, stamp, dd)
                ver[c] += 1
        else:  # ---- the exchange of message mid from core p to core d
            p, d, mid = ea[e], eb[e], emid[e]
            _mark(st.wmark, st.wl, wcnt, stamp, p)
            _mark(st.wmark, st.wl, wcnt, stamp, d)
            nxt, prv = m_next[mid], m_prev[mid]
            if prv >= 0:
                m_next[prv] = nxt
            else:
                pr_head[p, d] = nxt
            if nxt >= 0:
                m_prev[nxt] = prv
            else:
                pr_tail[p, d] = prv
            m_pend[mid] = False
            pr_cnt[p, d] -= 1
            if pr_cnt[p, d] == 0:
                _list_drop(dl, dn, dpos, p, d)
            tp = m_tpl[mid]
            st.xlog[nx, 0] = tp
            st.xlog[nx, 1], st.xlog[nx, 2] = _slot(cn_ptr, cn_nodes, n_sptr, ni, k, p)
            st.xlog[nx, 3], st.xlog[nx, 4] = _slot(cn_ptr, cn_nodes, n_sptr, ni, k, d)
            nx += 1
            ro[tb.t_row[tp]] -= 1
            _bits(hv, tb.t_key[tp], tb.t_a[tp], tb.t_b[tp], True)
            t[p] = t[d] = when + tb.t_dur[tp] * tb.lat[p, d]
            if pr_cnt[p, d] == 0:
                _list_drop(il, inn, ipos, d, p)
            ver[p] += 1
            ver[d] += 1
        # ---- the cores to offer: those touched, their senders, their trees' cores
        for w in range(wcnt[0]):
            x = st.wl[w]
            _mark(st.umark, st.ul, ucnt, stamp, x)
            inside = x == p or x == d
            for i in range(a, b):
                inside = inside or tb.cs_cores[i] == x
            if not inside:
                ver[x] += 1
            for i in range(inn[x]):
                _mark(st.umark, st.ul, ucnt, stamp, il[x, i])
            nd = _cur(cn_ptr, cn_nodes, ni, x)
            if nd >= 0 and tb.n_gang[nd] >= 0:
                gc = tb.g_cs[tb.n_gang[nd]]
                for i in range(tb.cs_ptr[gc], tb.cs_ptr[gc + 1]):
                    _mark(st.umark, st.ul, ucnt, stamp, tb.cs_cores[i])
        epoch += 1
    ic[IC_NMSG], ic[IC_SEQ], ic[IC_NV], ic[IC_NTL], ic[IC_NX] = nmsg, seq, nv, ntl, nx
    st.now[0] = now
    for c in range(ncore):
        if not done[c]:
            return STUCK
    return DONE
