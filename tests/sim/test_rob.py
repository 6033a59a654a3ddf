"""rob_size > 1: MVMs on different array groups overlap unless a local-memory hazard or a busy
unit orders them (pimsim-nn.md §9.8, pimcomp.md §3.2); values equal rob_size 1's."""

import numpy as np
from simprog import arch_with, ld, mvmul, program, setbw, sldi, st, vop

from raptor.isa.opcodes import Opcode
from raptor.sim import simulate
from raptor.sim.engine import Engine
from raptor.sim.memory import HostMemory

W = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
W2 = np.random.default_rng(2).standard_normal((128, 128)).astype(np.float32)


def two_mvms(disjoint: bool, groups=(0, 1)):
    if disjoint:
        body = [setbw(), sldi(1, 0), sldi(2, 4096), sldi(3, 8192), sldi(4, 12288)]
        body += [mvmul(3, 1, group=groups[0]), mvmul(4, 2, group=groups[1])]
    else:
        body = [setbw(), mvmul(0, 0, group=groups[0]), mvmul(0, 0, group=groups[1])]
    return program([body], agm=[[1, 1]], weights=[W, W2], agw=[[0, 1]])


def test_two_mvms_on_two_groups_overlap_with_rob_8():
    r = simulate(two_mvms(True), arch_with(rob_size=8))
    assert r.latency_ns == 1985  # pimsim-nn: 1985 (the 2nd read queues 320 ns on the port)
    assert simulate(two_mvms(True), arch_with(rob_size=1)).latency_ns == 3323


def test_hazard_serialises_with_rob_8():
    assert simulate(two_mvms(False), arch_with(rob_size=8)).latency_ns == 3319  # pimsim-nn 3319


def test_same_array_group_is_a_busy_unit():
    a8 = simulate(two_mvms(True, (0, 0)), arch_with(rob_size=8)).latency_ns
    assert a8 == simulate(two_mvms(True, (0, 0)), arch_with(rob_size=1)).latency_ns == 3323


def test_rob_full_blocks_dispatch():
    body = [setbw()] + [sldi(i + 1, 1024 * i) for i in range(6)]
    body += [mvmul(4, 1, group=0), mvmul(5, 2, group=1), mvmul(6, 3, group=2)]
    prog = program([body], agm=[[1, 1, 1]], weights=[W, W2, W], agw=[[0, 1, 0]])
    t2 = simulate(prog, arch_with(rob_size=2)).latency_ns
    t8 = simulate(prog, arch_with(rob_size=8)).latency_ns
    t1 = simulate(prog, arch_with(rob_size=1)).latency_ns
    assert t8 < t2 < t1


def _run(prog, arch):
    eng = Engine(prog, arch, 1, HostMemory(prog.memory, 1, [], [], 1))
    eng.run()
    return eng


def test_values_equal_rob_1():
    x = np.random.default_rng(1).standard_normal(128).astype(np.float32)
    mem = np.zeros(1024, np.float32)
    mem[:128] = x
    body = [setbw(), sldi(1, 0), sldi(2, 512), sldi(3, 1024), sldi(4, 2048), sldi(5, 640)]
    body += [
        ld(1, 0, 128),  # local 0 <- host 0
        mvmul(2, 1, group=0),  # 512 <- x W
        mvmul(3, 1, group=1),  # 1024 <- x W2
        vop(Opcode.VVADD, 4, 2, 3, 128),  # 2048 <- xW + xW2 (RAW on both)
        vop(Opcode.VRELU, 1, 4, 4, 128),  # 0 <- relu (WAR with the MVMs' input)
        st(5, 1, 128),  # host 640 <- local 0
    ]
    prog = program([body], agm=[[1, 1]], weights=[W, W2], agw=[[0, 1]], memory=mem)
    e1 = _run(prog, arch_with(rob_size=1))
    e8 = _run(prog, arch_with(rob_size=8))
    want = np.maximum(x @ W + x @ W2, 0)
    np.testing.assert_allclose(e8.host.data[640:768], want, rtol=1e-5)
    np.testing.assert_array_equal(e8.host.data, e1.host.data)
    np.testing.assert_array_equal(e8.cores[0].local, e1.cores[0].local)
    t1 = e1.cores[0].stats.finish_ns[0]
    t8 = e8.cores[0].stats.finish_ns[0]
    assert t8 < t1
