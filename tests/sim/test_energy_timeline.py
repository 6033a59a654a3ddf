"""The energy-vs-time record (raptor.sim.energy.EnergyTimeline, SimReport.energy_until_pj):
bin arithmetic by hand, and the energy spent up to a time on a program whose charges are known
from pimsim-nn's figures (one 8-bit MVM: 24490.24 pJ; static power 2 mW on this arch)."""

import numpy as np
import pytest
from simprog import mvmul, program, setbw

from raptor.sim import simulate
from raptor.sim.energy import TIMELINE_BINS, EnergyTimeline

W = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
MVM_PJ = 24490.24


def test_bins_merge_and_width_doubles():
    tl = EnergyTimeline(static_mw=0.5)
    tl.add(0.5, 1.0)
    tl.add(3.0, 4.0)
    assert tl.width_ns == 1.0
    tl.add(5000.0, 2.0)  # 5000 / 8 = 625 < 1024: three doublings
    assert tl.width_ns == 8.0
    assert len(tl.bins) == TIMELINE_BINS
    assert tl.bins[0] == 5.0 and tl.bins[625] == 2.0 and sum(tl.bins) == 7.0
    assert tl.energy_until_pj(4000.0) == 5.0 + 0.5 * 4000.0
    assert tl.energy_until_pj(5004.0) == 5.0 + 2.0 * 0.5 + 0.5 * 5004.0  # half of bin 625
    assert tl.energy_until_pj(1e9) == 7.0 + 0.5 * 1e9
    assert tl.energy_until_pj(0.0) == 0.0


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_energy_until_a_time_between_two_mvms(arch, engine):
    prog = program([[setbw(), mvmul(1, 0), mvmul(1, 0)]], agm=[[1]], weights=[W], agw=[[0]])
    r = simulate(prog, arch, engine=engine)
    assert r.latency_ns == 3319  # the second MVM dispatches after the first ends (1661 ns)
    assert r.energy_until_pj(1000.0) == pytest.approx(MVM_PJ + 2 * 1000.0, rel=1e-12)
    assert r.energy_until_pj(3319.0) == pytest.approx(2 * MVM_PJ + 2 * 3319.0, rel=1e-12)
    assert r.energy_until_pj(3319.0) == pytest.approx(r.energy_pj, rel=1e-12)
