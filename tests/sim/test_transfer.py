"""send/recv rendezvous, sync/wait counting semaphores, deadlock detection."""

import numpy as np
import pytest
from simprog import make, program, recv, send, sldi, sync, wait

from raptor.errors import SimulationError
from raptor.isa.opcodes import Opcode
from raptor.sim import simulate
from raptor.sim.engine import Engine
from raptor.sim.memory import HostMemory


def test_send_recv_one_hop_timing_and_energy(arch):
    # pimsim-nn.md §9.11 measured 128 ns / 660 pJ; we model 129 ns (1 ns of pipeline difference):
    # 2 + ready 4 + receiver_ready 4 + read 40 + 4 flits x 4 + write 60 + 3
    r = simulate(program([[send(0, 1, 128)], [recv(0, 0, 128)]]), arch)
    assert r.latency_ns == 129
    assert r.energy.noc_pj == 6 * 46
    assert r.energy_pj == pytest.approx(6 * 46 + 3 * 129)


def test_send_recv_moves_values_late_receiver(arch):
    lldi = make(Opcode.LLDI, rd=0, r2_or_imm=7, generic3=32)
    prog = program([[lldi, send(0, 1, 32)], [lldi, lldi, lldi, sldi(1, 64), recv(1, 0, 32)]])
    eng = Engine(prog, arch, 1, HostMemory(prog.memory, 1, [], [], 1))
    eng.cores[0].local[:32] = np.arange(32)
    eng.run()
    np.testing.assert_array_equal(eng.cores[1].local[64:96], np.full(32, 7))


def test_sync_wait_counts(arch):
    prog = program([[sync(3, 1), sync(3, 1), sync(3, 1)], [wait(3, 2), wait(3, 1)]])
    r = simulate(prog, arch)
    assert r.per_core[1].stall_sync_ns > 0
    prog = program([[sync(3, 1), sync(3, 1), sync(3, 1)], [wait(3, 2), wait(3, 2)]])
    with pytest.raises(SimulationError, match=r"core 1 pc 1 .*wait.*event register 3 = 1 < 2"):
        simulate(prog, arch)


def test_wait_releases_at_sync_arrival(arch):
    # core 0: sync dispatches at 2, flit 1 hop = 4 ns -> arrives 6; core 1's wait ends at 6
    r = simulate(program([[sync(0, 1)], [wait(0, 1)]]), arch)
    assert r.per_core[1].finish_ns == [6 + 3]


def test_deadlock_lists_every_blocked_core(arch):
    prog = program([[recv(0, 1, 32)], [recv(0, 0, 32)]])
    with pytest.raises(SimulationError) as e:
        simulate(prog, arch)
    msg = str(e.value)
    assert "deadlock" in msg and "\n" not in msg
    assert "core 0 pc 0 round 0 waits on recv" in msg and "core 1 pc 0 round 0 waits on recv" in msg
