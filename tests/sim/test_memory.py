"""ld/st through the global memory's single request queue."""

import numpy as np
import pytest
from simprog import ld, program, sldi, st

from raptor.errors import SimulationError
from raptor.sim import simulate


def test_single_ld_timing(arch):
    prog = program([[ld(0, 0, 64)]], memory=np.zeros(256))
    # dispatch 2, request flit 15, read ceil(64/32) x 40, local write 30, retire 2 (as vector)
    assert simulate(prog, arch).latency_ns == 2 + 15 + 80 + 30 + 2


def test_two_cores_contend_for_global_memory(arch):
    prog = program([[ld(0, 0, 64)], [ld(0, 0, 64)]], memory=np.zeros(256))
    r = simulate(prog, arch)
    assert [c.finish_ns[0] for c in r.per_core] == [129, 209]  # second waits 80 ns in the queue
    assert r.per_core[1].stall_memory_ns == 80


def test_st_timing_and_values(arch):
    prog = program([[sldi(1, 128), ld(0, 0, 64), st(1, 0, 64)]], memory=np.arange(256))
    r = simulate(prog, arch)
    # ld ends at 3+15+80+30=128, st dispatch 130: local read 20, 2 flits x 15, write 2 x 50
    assert r.latency_ns == 130 + 20 + 30 + 100 + 3


def test_host_out_of_range(arch):
    with pytest.raises(SimulationError, match=r"core 0 pc 0 \(ld .*host range"):
        simulate(program([[ld(0, 0, 64)]], memory=np.zeros(16)), arch)
