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

from collections import deque
from dataclasses import dataclass

import numpy as np

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


def check_programs(cores: list[np.ndarray], rounds: int = 1) -> DeadlockReport:
    """Run the untimed execution of `cores` (one stream per core) over `rounds` rounds."""
    n = len(cores)
    ops = [_ops(s) for s in cores]
    length = [len(o[0]) for o in ops]
    ops_l = [(o.tolist(), t.tolist(), v.tolist()) for o, t, v in ops]
    pos = [0] * n
    total = [length[c] * rounds for c in range(n)]
    ev: list[dict[int, int]] = [{} for _ in range(n)]
    mismatch: set[tuple[int, int]] = set()
    queue = deque(c for c in range(n) if total[c])

    def head(c: int) -> tuple[int, int, int] | None:
        if pos[c] >= total[c]:
            return None
        i = pos[c] % length[c]
        o, t, v = ops_l[c]
        return o[i], t[i], v[i]

    while queue:
        c = queue.popleft()
        while True:
            h = head(c)
            if h is None:
                break
            op, other, val = h
            if op == _SYNC:
                reg = ev[val]
                reg[other] = reg.get(other, 0) + 1
                pos[c] += 1
                queue.append(val)
                continue
            if op == _WAIT:
                reg = ev[c]
                if reg.get(other, 0) >= val:
                    reg[other] -= val
                    pos[c] += 1
                    continue
                break
            # send (other = receiver) or recv (other = sender): meet the peer's head
            if not 0 <= other < n:
                break
            ph = head(other)
            want = _RECV if op == _SEND else _SEND
            if ph is None or ph[0] != want or ph[1] != c:
                break
            if ph[2] != val:
                mismatch.add((c, other) if op == _SEND else (other, c))
            pos[c] += 1
            pos[other] += 1
            queue.append(other)
    blocked = []
    for c in range(n):
        h = head(c)
        if h is not None:
            name = {_SEND: "send to", _RECV: "recv from", _WAIT: "wait"}.get(h[0], "?")
            blocked.append(Blocked(c, name, h[1], pos[c] // max(1, length[c])))
    return DeadlockReport(blocked, sorted(mismatch))
