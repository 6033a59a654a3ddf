"""The untimed deadlock check of emitted programs (raptor.pim.deadlock) on hand-written streams."""

import numpy as np

from raptor.isa.opcodes import Opcode
from raptor.isa.table import concat, make
from raptor.pim.deadlock import check_programs


def send(to: int, size: int = 64) -> np.ndarray:
    return make(Opcode.SEND, rd=5, r2_or_imm=to, generic3=size)


def recv(frm: int, size: int = 64) -> np.ndarray:
    return make(Opcode.RECV, rd=5, r2_or_imm=frm, generic3=size)


def sync(to: int, ev: int) -> np.ndarray:
    return make(Opcode.SYNC, r2_or_imm=to, generic1=ev)


def wait(ev: int, count: int) -> np.ndarray:
    return make(Opcode.WAIT, generic1=ev, generic2=count)


def test_matching_exchange_in_both_directions_completes():
    a = concat([send(1), recv(1)])
    b = concat([recv(0), send(0)])
    assert check_programs([a, b]).ok


def test_two_cores_that_both_send_first_deadlock():
    a = concat([send(1), recv(1)])
    b = concat([send(0), recv(0)])
    rep = check_programs([a, b])
    assert not rep.ok
    assert {(x.core, x.op, x.other) for x in rep.blocked} == {(0, "send to", 1), (1, "send to", 0)}
    assert "core 0 send to core 1 (round 0)" in rep.describe()


def test_three_core_cycle_is_found_and_a_consistent_order_is_not_a_cycle():
    # P sends to C2 then C1; C1 forwards to C2; C2 expects C1's message before P's: a cycle
    p = concat([send(2), send(1)])
    c1 = concat([recv(0), send(2)])
    c2 = concat([recv(1), recv(0)])
    rep = check_programs([p, c1, c2])
    assert {(b.core, b.op, b.other) for b in rep.blocked} == {
        (0, "send to", 2),
        (1, "recv from", 0),
        (2, "recv from", 1),
    }
    # C2 receiving in the order P's messages reach it: one global order, no deadlock
    assert check_programs([p, c1, concat([recv(0), recv(1)])]).ok


def test_size_mismatch_is_reported():
    rep = check_programs([send(1, 64), recv(0, 32)])
    assert rep.size_mismatch == [(0, 1)] and not rep.ok


def test_counting_waits_consume_syncs_across_rounds():
    # core 1 waits for two syncs per round; core 0 sends two per round: fine for any round count
    prod = concat([sync(1, 3), sync(1, 3)])
    cons = wait(3, 2)
    assert check_programs([prod, cons], rounds=3).ok
    # one sync per round is not enough for a wait of two
    rep = check_programs([sync(1, 3), cons], rounds=2)
    assert [(b.core, b.op, b.other, b.round) for b in rep.blocked] == [(1, "wait", 3, 1)]


def test_restarting_rounds_can_deadlock_where_one_round_does_not():
    # round 0 completes, but in round 1 core 1 waits for a sync core 0 only sends after a recv
    a = concat([send(1), sync(1, 0)])
    b = concat([recv(0), wait(0, 1), wait(0, 1)])
    assert not check_programs([a, b], rounds=1).ok  # the second wait never gets its sync
    a2 = concat([send(1), sync(1, 0), sync(1, 0)])
    assert check_programs([a2, b], rounds=2).ok


def test_wait_for_nothing_passes_and_sync_to_a_missing_core_blocks():
    assert check_programs([concat([wait(4, 0), send(1)]), recv(0)]).ok
    rep = check_programs([sync(5, 1), wait(1, 1)])
    assert [(b.core, b.op, b.other) for b in rep.blocked] == [(0, "?", 1), (1, "wait", 1)]


def _reference(cores: list[np.ndarray], rounds: int) -> tuple[list, list]:
    """The untimed execution written plainly: repeat 'any core that can move, moves' until none
    can; (blocked (core, op, other, round), mismatched pairs)."""
    ops = []
    for s in cores:
        keep = np.isin(s["opcode"], [Opcode.SEND, Opcode.RECV, Opcode.SYNC, Opcode.WAIT])
        ops.append([tuple(int(v) for v in r) for r in s[keep][["opcode", "r2_or_imm", "generic1",
                    "generic2", "generic3"]].tolist()])  # fmt: skip
    n, pos, regs, mism = len(cores), [0] * len(cores), {}, set()

    def head(c):
        return ops[c][pos[c] % len(ops[c])] if pos[c] < len(ops[c]) * rounds else None

    moved = True
    while moved:
        moved = False
        for c in range(n):
            h = head(c)
            if h is None:
                continue
            op, imm, g1, g2, g3 = h
            if op == Opcode.SYNC and 0 <= imm < n:
                regs[imm, g1] = regs.get((imm, g1), 0) + 1
                pos[c] += 1
                moved = True
            elif op == Opcode.WAIT and regs.get((c, g1), 0) >= g2:
                regs[c, g1] = regs.get((c, g1), 0) - g2
                pos[c] += 1
                moved = True
            elif op == Opcode.SEND and 0 <= imm < n:
                p = head(imm)
                if p is not None and p[0] == Opcode.RECV and p[1] == c:
                    if p[4] != g3:
                        mism.add((c, imm))
                    pos[c] += 1
                    pos[imm] += 1
                    moved = True
    names = {Opcode.SEND: "send to", Opcode.RECV: "recv from", Opcode.WAIT: "wait"}
    blocked = []
    for c in range(n):
        h = head(c)
        if h is not None:
            other = h[1] if h[0] in (Opcode.SEND, Opcode.RECV) else h[2]
            blocked.append((c, names.get(h[0], "?"), other, pos[c] // max(1, len(ops[c]))))
    return blocked, sorted(mism)


def test_matches_a_plain_execution_on_random_programs():
    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(1, 5))
        cores = []
        for _ in range(n):
            ins = [make(Opcode.SADD, rd=1, r1=2, r2_or_imm=3)]
            for _ in range(int(rng.integers(0, 8))):
                k, peer = rng.random(), int(rng.integers(0, n))
                size = int(rng.choice([32, 64, 64]))
                ev = int(rng.choice([0, 3, 7]))
                if k < 0.35:
                    ins.append(send(peer, size))
                elif k < 0.7:
                    ins.append(recv(peer, size))
                elif k < 0.85:
                    ins.append(sync(peer, ev))
                else:
                    ins.append(wait(ev, int(rng.integers(0, 3))))
            cores.append(concat(ins))
        for rounds in (1, 2, 3):
            rep = check_programs(cores, rounds)
            got = [(b.core, b.op, b.other, b.round) for b in rep.blocked], rep.size_mismatch
            assert got == _reference(cores, rounds)
