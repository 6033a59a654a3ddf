"""Untimed deadlock check of emitted programs: send/recv rendezvous and counting sync/wait.

Each core's program is reduced to its blocking-relevant operations (send, recv, sync, wait) and
repeated once per round. The check executes them without time: a send and the matching recv (same
pair, next in each core's program order) complete together, a sync adds one to its target's
register, a wait completes once its register holds its count and consumes it. An operation only
becomes enabled through other cores' progress and stays enabled until its core takes it, so
every maximal execution ends in the same state: if this one finishes every core, no timing of the
real machine can deadlock (raptor.spatial.noc explains the global-order argument), and if it stops,
the blocked operations it reports block in every timing. It also reports a send whose matching
recv expects another size (pimsim-nn would pair them and move the wrong bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from raptor.isa.opcodes import Opcode

_SEND, _RECV, _SYNC, _WAIT = int(Opcode.SEND), int(Opcode.RECV), int(Opcode.SYNC), int(Opcode.WAIT)


@dataclass(frozen=True)
class Blocked:
    """A core stopped at operation `op` (send/recv/wait) with `other` (peer core or register)."""

    core: int
    op: str
    other: int
    round: int


@dataclass(frozen=True)
class DeadlockReport:
    blocked: list[Blocked]
    size_mismatch: list[tuple[int, int]]  # (sender, receiver) pairs paired with different sizes

    @property
    def ok(self) -> bool:
        return not self.blocked and not self.size_mismatch

    def describe(self, limit: int = 6) -> str:
        parts = [
            f"core {b.core} {b.op} {'register ' if b.op == 'wait' else 'core '}{b.other} "
            f"(round {b.round})"
            for b in self.blocked[:limit]
        ]
        parts += [f"send {s}->{r} size mismatch" for s, r in self.size_mismatch[:limit]]
        more = len(self.blocked) + len(self.size_mismatch) - len(parts)
        return "; ".join(parts) + (f"; +{more} more" if more > 0 else "")


def _ops(stream: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(opcode, peer core / register, size / count) of the blocking-relevant records."""
    op = stream["opcode"].astype(np.int64)
    m = (op == _SEND) | (op == _RECV) | (op == _SYNC) | (op == _WAIT)
    s = stream[m]
    op = op[m]
    imm = s["r2_or_imm"].astype(np.int64)
    g1 = s["generic1"].astype(np.int64)
    g2 = s["generic2"].astype(np.int64)
    g3 = s["generic3"].astype(np.int64)
    other = np.where((op == _SEND) | (op == _RECV), imm, g1)  # peer core, or event register
    value = np.where(op == _WAIT, g2, np.where(op == _SYNC, imm, g3))  # count / sync target / size
    return op, other, value


@njit(cache=True, nogil=True)
def _execute(ptr, op, other, value, rounds, n_regs):  # pragma: no cover - compiled
    """The untimed execution over the flat operations of every core (core c's are
    [ptr[c], ptr[c + 1])): returns each core's position (operations done) and the (sender,
    receiver) pairs that met with different sizes (possibly repeated)."""
    n = ptr.size - 1
    length = ptr[1:] - ptr[:-1]
    total = length * rounds
    pos = np.zeros(n, np.int64)
    ev = np.zeros((n, max(1, n_regs)), np.int64)
    queued = np.zeros(n, np.bool_)
    ring = np.empty(n + 1, np.int64)  # cores to look at, each at most once in the ring
    head = 0
    tail = 0
    for c in range(n):
        if total[c] > 0:
            ring[tail] = c
            tail += 1
            queued[c] = True
    mism = np.empty((0, 2), np.int64)
    mlist = []
    while head != tail:
        c = ring[head]
        head = (head + 1) % (n + 1)
        queued[c] = False
        while pos[c] < total[c]:
            i = ptr[c] + pos[c] % length[c]
            o = op[i]
            x = other[i]
            v = value[i]
            if o == _SYNC:
                if not 0 <= v < n:
                    break
                ev[v, x] += 1
                pos[c] += 1
                if not queued[v]:
                    queued[v] = True
                    ring[tail] = v
                    tail = (tail + 1) % (n + 1)
                continue
            if o == _WAIT:
                if ev[c, x] >= v:
                    ev[c, x] -= v
                    pos[c] += 1
                    continue
                break
            # send (x = receiver) or recv (x = sender): meet the peer's head
            if not 0 <= x < n or pos[x] >= total[x]:
                break
            j = ptr[x] + pos[x] % length[x]
            if op[j] != (_RECV if o == _SEND else _SEND) or other[j] != c:
                break
            if value[j] != v:
                mlist.append((c, x) if o == _SEND else (x, c))
            pos[c] += 1
            pos[x] += 1
            if not queued[x]:
                queued[x] = True
                ring[tail] = x
                tail = (tail + 1) % (n + 1)
    if len(mlist):
        mism = np.empty((len(mlist), 2), np.int64)
        for k in range(len(mlist)):
            mism[k, 0] = mlist[k][0]
            mism[k, 1] = mlist[k][1]
    return pos, mism


def check_programs(cores: list[np.ndarray], rounds: int = 1) -> DeadlockReport:
    """Run the untimed execution of `cores` (one stream per core) over `rounds` rounds."""
    ops = [_ops(s) for s in cores]
    length = np.array([len(o[0]) for o in ops], np.int64)
    ptr = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
    op, other, value = (
        np.concatenate([o[k] for o in ops]) if ops else np.zeros(0, np.int64) for k in range(3)
    )
    # event registers numbered densely (a wait's and a sync's `other`)
    ev_ops = (op == _SYNC) | (op == _WAIT)
    regs, dense = np.unique(other[ev_ops], return_inverse=True)
    other[ev_ops] = dense
    pos, mism = _execute(ptr, op, other, value, rounds, len(regs))
    blocked = []
    for c in range(len(cores)):
        if pos[c] < length[c] * rounds:
            i = ptr[c] + pos[c] % length[c]
            o, x = int(op[i]), int(other[i])
            if o in (_SYNC, _WAIT):
                x = int(regs[x])
            name = {_SEND: "send to", _RECV: "recv from", _WAIT: "wait"}.get(o, "?")
            blocked.append(Blocked(c, name, x, int(pos[c] // max(1, length[c]))))
    mismatch = sorted({(int(a), int(b)) for a, b in mism})
    return DeadlockReport(blocked, mismatch)
