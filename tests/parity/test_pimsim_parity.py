"""Micro-programs through pimsim-nn's ChipTest (figures of pimsim-nn.md §5/§9 and our own
measurements of this build) and through our engine (agreement within 1% on latency and energy).

Known disagreements of our engine are xfail with the measured numbers in the reason.
"""

from __future__ import annotations

import warnings

import pytest
from parity_micro import (
    deadlock,
    make_arch,
    micros,
    needs_ours,
    needs_pimsim,
    one_mvm,
    program,
    setbw,
)

from raptor.errors import SimulationError
from raptor.isa.opcodes import Opcode as O
from raptor.isa.pimdir import write_pimdir
from raptor.isa.pimsim_rules import check_pimsim_compatible
from raptor.isa.table import make
from raptor.sim.pimsim_engine import find_binary, parse_report, run_pimsim

MICROS = {m.name: m for m in micros()}

# pimsim-nn (f7446df, built by shared/tools/build-pimsim-nn.sh) measured on these programs:
# (latency ns, energy pJ) in latency mode; (sim_time/rounds ns, pJ per round) in throughput mode
MEASURED = {
    "mvm8": (1661.0, 27812.24),
    "mvm16": (3277.0, 55534.48),
    "mvm8_ag2": (1661.0, 52302.48),
    "mvm16_ag4": (3307.0, 202535.92),
    "mvm8_iso": (1312.0, 24490.24),
    "mvm16_iso": (2608.0, 48980.48),
    "two_mvm_rob1": (3319.0, 55618.48),
    "two_mvm_rob8_shared": (3319.0, 55618.48),
    "two_mvm_rob1_disjoint": (3323.0, 55626.48),
    "two_mvm_rob8_disjoint": (1985.0, 52950.48),
    "vector16": (657.0, 1314.0),
    "vector8": (417.0, 834.0),
    "vector_no_setbw": (61.0, 122.0),
    "ld_st": (764.0, 1758.0),
    "lldi_lmv": (168.0, 336.0),
    "lldi_only": (35.0, 70.0),
    "send_1hop": (128.0, 660.0),
    "send_14hop_1k": (1824.0, 251452.0),
    "send_interchip": (474.0, 3824.0),
    "sync_wait": (163.0, 535.0),
    "tp_mvm8": (1655.629139, 27760.95152),
    "tp_ld_mvm_st": (2202.643172, 28987.3237),
}

# Our engine vs pimsim-nn where they disagree by more than 1% (measured; see the final report).
OURS_XFAIL = {
    "vector_no_setbw": "without setbw pimsim-nn moves 0 bytes per vector op (61 ns, 122 pJ); our "
    "engine charges the traffic (416 ns, 832 pJ); pimsim_rules flags such programs",
}

_cache: dict[str, object] = {}


def pimsim_result(name, tmp_path_factory):
    if name not in _cache:
        m = MICROS[name]
        d = write_pimdir(m.prog, tmp_path_factory.mktemp(name) / "pim")
        _cache[name] = run_pimsim(
            d, m.get_arch(), m.mode, m.pipeline, sim_time_ms=m.sim_time_ms, wall_limit_s=60
        )
    return _cache[name]


def figures(report, mode):
    if mode == "latency":
        return report.latency_ns, report.energy_pj
    return 1e9 / report.throughput_per_s, report.energy_per_inference_uj * 1e6


@needs_pimsim
@pytest.mark.parametrize("name", [m.name for m in micros() if m.doc])
def test_pimsim_reproduces_documented_figures(name, tmp_path_factory):
    m = MICROS[name]
    r = pimsim_result(name, tmp_path_factory)
    doc = m.doc
    if "latency_ns" in doc:
        assert r.latency_ns == pytest.approx(doc["latency_ns"], abs=0.5)
    if "energy_pj" in doc:
        assert r.energy_pj == pytest.approx(doc["energy_pj"], rel=1e-9)
    if "rounds" in doc:
        assert r.pimsim["rounds"] == doc["rounds"] == r.pipeline
        assert r.latency_ns == pytest.approx(doc["average_latency_ns"], rel=1e-9)
        assert r.energy_per_inference_uj * 1e6 == pytest.approx(
            doc["energy_per_round_pj"], rel=1e-9
        )
        assert r.throughput_per_s == pytest.approx(604000, rel=1e-6)


@needs_pimsim
def test_worked_figure_power(tmp_path_factory):
    r = pimsim_result("mvm8", tmp_path_factory)
    assert r.power_mw == pytest.approx(16.74427453, rel=1e-9)
    assert r.per_core[0].finish_ns == [pytest.approx(1661.0)]


@needs_pimsim
@pytest.mark.parametrize("name", list(MEASURED))
def test_pimsim_measured_figures(name, tmp_path_factory):
    m = MICROS[name]
    t, e = figures(pimsim_result(name, tmp_path_factory), m.mode)
    assert (t, e) == pytest.approx(MEASURED[name], rel=1e-6)


def _ours_params():
    out = []
    for m in micros():
        marks = (
            [pytest.mark.xfail(reason=OURS_XFAIL[m.name], strict=False)]
            if (m.name in OURS_XFAIL)
            else []
        )
        out.append(pytest.param(m.name, marks=marks))
    return out


@needs_pimsim
@needs_ours
@pytest.mark.parametrize("name", _ours_params())
def test_our_engine_agrees_within_1pct(name, tmp_path_factory):
    from raptor.sim import simulate

    m = MICROS[name]
    ref = pimsim_result(name, tmp_path_factory)
    pipeline = ref.pipeline if m.mode == "throughput" else 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # random weights overflow float32
        ours = simulate(m.prog, m.get_arch(), m.mode, pipeline)
    t_ref, e_ref = figures(ref, m.mode)
    t, e = figures(ours, m.mode)
    assert t == pytest.approx(t_ref, rel=0.01), f"latency ours {t} vs pimsim {t_ref}"
    assert e == pytest.approx(e_ref, rel=0.01), f"energy ours {e} vs pimsim {e_ref}"


# ---- throughput sim_time choice ------------------------------------------------------------------
@needs_pimsim
def test_throughput_sim_time_is_chosen_for_enough_rounds(tmp_path):
    d = write_pimdir(one_mvm(8), tmp_path / "pim")
    r = run_pimsim(d, make_arch(), "throughput", pipeline=40, min_rounds=8)
    assert r.pipeline >= 40 and r.pimsim["sim_time_ms"] < 0.2
    assert r.throughput_per_s == pytest.approx(1e3 / r.pimsim["average_latency_ms"])


# ---- failures are one clear line -----------------------------------------------------------------
@needs_pimsim
def test_deadlock_quotes_pimsim_error(tmp_path):
    d = write_pimdir(deadlock(), tmp_path / "pim")
    with pytest.raises(SimulationError, match=r"Simulation error: Latency simulation did not"):
        run_pimsim(d, make_arch(), "latency", latency_timeout_ms=0.2, wall_limit_s=60)


@needs_pimsim
def test_vsoftmax_rejected(tmp_path):
    p = program([[setbw(16), make(O.VSOFTMAX, rd=1, r1=2, generic3=10)]], [[]])
    assert any("vsoftmax" in x for x in check_pimsim_compatible(p))
    d = write_pimdir(p, tmp_path / "pim")
    with pytest.raises(SimulationError, match="does not support opcode vsoftmax") as e:
        run_pimsim(d, make_arch(), "latency", wall_limit_s=60)
    assert "\n" not in str(e.value)


@needs_pimsim
def test_mbiw_zero_crash_is_reported(tmp_path):
    p = program([[setbw(8), make(O.MVMUL, r2_or_imm=0)]], [[1]])
    assert any("mbiw 0" in x for x in check_pimsim_compatible(p))
    d = write_pimdir(p, tmp_path / "pim")
    with pytest.raises(SimulationError, match="SIGFPE"):
        run_pimsim(d, make_arch(), "latency", wall_limit_s=60)


@needs_pimsim
def test_wall_limit(tmp_path):
    d = write_pimdir(deadlock(), tmp_path / "pim")
    with pytest.raises(SimulationError, match="wall-clock limit of 0.3 s"):
        run_pimsim(d, make_arch(), "latency", latency_timeout_ms=1e5, wall_limit_s=0.3)


def test_missing_binary(tmp_path, monkeypatch):
    monkeypatch.delenv("PIMSIM_NN_BIN", raising=False)
    with pytest.raises(SimulationError, match="--pimsim-bin PATH or set PIMSIM_NN_BIN"):
        find_binary(None)
    with pytest.raises(SimulationError, match="does not exist or is not executable"):
        find_binary(tmp_path / "nope")
    from raptor.cli import main

    d = write_pimdir(one_mvm(8), tmp_path / "pim")
    argv = ["simulate", str(d), "--arch", "arch-a", "--engine", "pimsim-nn"]
    assert main(argv + ["--pimsim-bin", str(tmp_path / "nope")]) == 2


def test_parse_report_formats():
    lat = """Chip Simulation Result:
  - latency:            0.001661 ms
  - average power:      16.74427453 mW
  - average energy:     27812.239999999998 pJ
Core 0 Information
  - finish time:        0.001661 ms
"""
    f = parse_report(lat)
    assert f["latency_ms"] == 0.001661 and f["energy_pj"] == 27812.239999999998
    assert f["cores"] == {0: {"finish_ms": 0.001661}}
    tp = """  - output count:       604 samples
  - throughput:         6.04e+05 samples/s
  - average latency:    0.001655629139 ms
  - average power:      16.76761472 mW
  - average energy:     27760.95152 pJ/it
Core 3 Information
  - rounds:             604 samples
  - average power:      16.7 mW
"""
    f = parse_report(tp)
    assert f["throughput_printed"] == 6.04e5 and f["average_latency_ms"] == 0.001655629139
    assert f["energy_per_round_pj"] == 27760.95152 and "energy_pj" not in f
    assert f["cores"] == {3: {"rounds": 604}}


@needs_pimsim
def test_cli_simulate_with_pimsim(tmp_path, capsys):
    import json

    from raptor.cli import main

    d = write_pimdir(one_mvm(8), tmp_path / "pim")
    assert (
        main(["simulate", str(tmp_path), "--arch", "arch-a", "--engine", "pimsim-nn", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["engine"] == "pimsim-nn" and out["latency_ns"] == 1661.0
    assert out["energy_pj"] == pytest.approx(27812.24)
    assert d.is_dir()
