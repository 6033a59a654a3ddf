"""MVM timing/energy against pimsim-nn's measured figures (reference/pimsim-nn.md §5, §9.8) and
MVM values."""

import numpy as np
import pytest
from simprog import mvmul, program, setbw, sldi

from raptor.errors import SimulationError
from raptor.sim import simulate

W = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)


def one_mvm(agm=(1,), ibiw=8, n=1):
    return program(
        [[setbw(ibiw, ibiw)] + [mvmul(1, 0, mbiw=ibiw)] * n],
        agm=[list(agm)],
        weights=[W],
        agw=[[0] * len(agm)],
    )


def test_one_mvm_matches_pimsim_end_to_end(arch):
    r = simulate(one_mvm(), arch)
    assert r.latency_ns == 1661  # 1305 compute + 320 read (x8 quirk) + 30 write + pipeline
    assert r.energy_pj == pytest.approx(27812.24, abs=1e-6)  # 24490.24 + 2 mW x 1661 ns
    assert r.power_mw == pytest.approx(16.74427453, rel=1e-8)


def test_two_mvms_serialise_with_rob_1(arch):
    assert simulate(one_mvm(n=2), arch).latency_ns == 3319  # pimsim-nn.md §9.8


def test_16bit_and_two_crossbar_group(arch):
    assert simulate(one_mvm(ibiw=16), arch).latency_ns == 3277
    r = simulate(one_mvm(agm=(2,)), arch)
    assert r.latency_ns == 1661
    assert r.energy_pj == pytest.approx(52302.48, abs=1e-6)


def test_mvm_values_and_relu(arch):
    x = np.random.default_rng(1).standard_normal(128).astype(np.float32)
    prog = program(
        [[setbw(), sldi(1, 1000), sldi(2, 2000), mvmul(1, 0), mvmul(2, 0, relu=1)]],
        agm=[[1]],
        weights=[W],
        agw=[[0]],
    )
    from raptor.sim.engine import Engine
    from raptor.sim.memory import HostMemory

    eng = Engine(prog, arch, 1, HostMemory(prog.memory, 1, [], [], 1))
    eng.cores[0].local[:128] = x
    eng.run()
    local = eng.cores[0].local
    np.testing.assert_allclose(local[1000:1128], x @ W, rtol=1e-6)
    np.testing.assert_allclose(local[2000:2128], np.maximum(x @ W, 0), rtol=1e-6)


def test_missing_weights_and_missing_setbw_are_errors(arch):
    prog = program([[setbw(), mvmul(1, 0)]], agm=[[1]], weights=[], agw=[[]])
    with pytest.raises(SimulationError, match=r"core 0 pc 1 \(mvmul .*no weight matrix"):
        simulate(prog, arch)
    prog = program([[mvmul(1, 0)]], agm=[[1]], weights=[W], agw=[[0]])
    with pytest.raises(SimulationError, match="before setbw"):
        simulate(prog, arch)
