"""Compiled small models on both engines: vgg8 at 16x16 and resnet18 at 32x32, Raptor and
pimcomp, latency and throughput (pipeline 4) on arch-a. Each case is compiled once into a pim/
directory, and that same directory runs through our simulator and through pimsim-nn's ChipTest.

Latency mode: latency and energy agree within 5 %.

Throughput mode: the two engines do not define throughput the same way. We run exactly N rounds
and report N / deadline(N-1) and energy / N. pimsim-nn loops every core for a fixed `sim_time`
and reports rounds completed within it / sim_time (1000 / "average latency") and the energy spent
in sim_time / those rounds, which also charges the partly done rounds still in flight at sim_time
(a pipelined program has one or two of them) and the static power up to sim_time. If pimsim-nn
completes R rounds, deadline(R-1) <= sim_time < deadline(R), so our R / deadline(R-1) is an upper
bound of its figure (measured 3-4 % above at R = 12), and our energy / R is below its figure (2-5 %
measured at R = 16); the steady-state rate (R-1) / (deadline(R-1) - deadline(0)), which leaves out
the pipeline fill, is a different quantity (up to 22 % above pimsim-nn on resnet18 raptor).

So the asserted comparison is between the same quantities: pimsim-nn runs sim_time = halfway
between our deadline(11) and deadline(12), and from our run of more rounds we take the rounds
completed by sim_time / sim_time (throughput, within 10 %: a cumulative drift of more than half a
round interval over 12 rounds changes the count by one, about 8 %) and our energy spent up to
sim_time (the report's energy timeline, `SimReport.energy_until_pj`) / those rounds (energy per
inference, within 5 %); that energy / sim_time (power) within 5 % too. Our R / deadline(R-1) is
also held within 10 % of pimsim-nn's figure (the bound above). Our average power over the whole
run x sim_time is no substitute: a program whose rounds start as soon as their inputs arrive is
front-loaded, and on resnet18 Raptor that estimate read 8.3 % low. Measured: equal round counts
in all four cases, energy per inference within 1.7 % (vgg8 +0.01 % and -0.00 %, resnet18 Raptor
-1.68 %).
"""

from __future__ import annotations

import warnings

import pytest
from parity_micro import needs_pimsim

from raptor.arch import load_arch
from raptor.compiler import compile_to_dir
from raptor.models import save_model
from raptor.options import CompileOptions
from raptor.sim import simulate_dir
from raptor.sim.pimsim_engine import mid_interval_sim_time_ms, run_pimsim, throughput_comparison

ROUNDS = 12  # pimsim-nn rounds in throughput mode; its wall time grows with them (about 0.4 s each)
MODELS = {"vgg8": 16, "resnet18": 32}
CASES = [
    (m, c, mode)
    for m in MODELS
    for c in ("raptor", "pimcomp")
    for mode in ("latency", "throughput")
]
_models: dict[str, object] = {}


def _compiled(tmp_path_factory, model, compiler, mode):
    if model not in _models:
        d = tmp_path_factory.mktemp(f"onnx-{model}")
        _models[model] = save_model(model, d / f"{model}.onnx", input_size=MODELS[model])
    out = tmp_path_factory.mktemp(f"{model}-{compiler}-{mode}")
    pipeline = 4 if mode == "throughput" else 1
    arch = load_arch("arch-a")
    compile_to_dir(
        _models[model], arch, CompileOptions(compiler=compiler, mode=mode, pipeline=pipeline), out
    )
    return out, arch


def _rel(a, b):
    return (a - b) / b


@needs_pimsim
@pytest.mark.parametrize("model,compiler,mode", CASES, ids=["-".join(c) for c in CASES])
def test_compiled_model_agrees_with_pimsim(model, compiler, mode, tmp_path_factory):
    out, arch = _compiled(tmp_path_factory, model, compiler, mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if mode == "latency":
            ours = simulate_dir(out, arch, "latency")
            ref = run_pimsim(out / "pim", arch, "latency", wall_limit_s=120)
            print(
                f"\n{model} {compiler} latency: latency ours {ours.latency_ns:.0f} ns pimsim "
                f"{ref.latency_ns:.0f} ns ({_rel(ours.latency_ns, ref.latency_ns):+.3%}); energy "
                f"ours {ours.energy_pj:.0f} pJ pimsim {ref.energy_pj:.0f} pJ "
                f"({_rel(ours.energy_pj, ref.energy_pj):+.3%})"
            )
            assert ours.latency_ns == pytest.approx(ref.latency_ns, rel=0.05)
            assert ours.energy_pj == pytest.approx(ref.energy_pj, rel=0.05)
            return
        # more rounds than the compiled pipeline: a deliberate override of the target record
        ours = simulate_dir(out, arch, "throughput", ROUNDS + 3, force_target=True)
        sim_ms = mid_interval_sim_time_ms(ours.deadlines_ns, ROUNDS)
        ref = run_pimsim(out / "pim", arch, "throughput", 4, sim_time_ms=sim_ms, wall_limit_s=120)
    c = throughput_comparison(ours, ref)
    print(
        f"\n{model} {compiler} throughput: sim_time {sim_ms:.4f} ms, rounds ours "
        f"{c['ours_rounds']} pimsim {c['pimsim_rounds']}; tput ours {c['ours_tput']:.2f} pimsim "
        f"{c['pimsim_tput']:.2f} ({_rel(c['ours_tput'], c['pimsim_tput']):+.2%}); N/deadline(N-1) "
        f"{c.get('ours_n_over_deadline', 0):.2f}, steady state {c.get('ours_steady_state', 0):.2f}; "
        f"energy/inference ours {c['ours_energy_uj']:.2f} uJ pimsim {c['pimsim_energy_uj']:.2f} uJ "
        f"({_rel(c['ours_energy_uj'], c['pimsim_energy_uj']):+.2%}); power ours "
        f"{c['ours_power_mw']:.2f} mW pimsim {c['pimsim_power_mw']:.2f} mW"
    )
    assert c["ours_tput"] == pytest.approx(c["pimsim_tput"], rel=0.10)
    assert c["ours_energy_uj"] == pytest.approx(c["pimsim_energy_uj"], rel=0.05)
    assert c["ours_power_mw"] == pytest.approx(c["pimsim_power_mw"], rel=0.05)
    assert c["ours_n_over_deadline"] == pytest.approx(c["pimsim_tput"], rel=0.10)
