import json

import numpy as np
import pytest

from raptor.arch import load_arch
from raptor.arch.loader import parse_arch
from raptor.arch.timing import chip_hops, link_costs, link_energy_pj, link_latency_ns, mvm_cost
from raptor.cli import main
from raptor.errors import ArchConfigError


@pytest.mark.parametrize(
    "name,cores,xbars,rows,cols",
    [("arch-a", 168, 96, 128, 128), ("arch-b", 138, 128, 128, 128), ("arch-c", 64, 8, 512, 1024)],
)
def test_builtin_archs(name, cores, xbars, rows, cols):
    a = load_arch(name)
    assert a.core_count == cores and a.crossbars_per_core == xbars
    assert a.matrix.xbar_size == (rows, cols)
    assert a.weight_bits == 16 and a.activation_bits == 16 and a.matrix.cell_precision == 2
    # 16-bit weights on 2-bit cells: a crossbar holds cols/8 weight columns
    assert a.weights_per_crossbar_row == cols // 8


def test_arch_c_is_multichip():
    a = load_arch("arch-c")
    assert a.chips == 16 and a.cores_per_chip == 4 and a.inter_chip.bandwidth_gb_per_s == 6.4
    assert a.hops(0, 1) == (1, 0)
    assert a.hops(0, 4)[1] == 1  # core 4 is on chip 1
    assert link_latency_ns(a, 0, 4) > link_latency_ns(a, 0, 1)


def test_worked_mvm_figure():
    # PIMCOMP default matrix config, one 128x128 MVM with 8-bit inputs: 1305 cycles, 24490.24 pJ
    c = mvm_cost(load_arch("arch-a"), 8)
    assert c.cycles == 1305
    assert c.energy_per_crossbar_pj == pytest.approx(24490.24)
    assert mvm_cost(load_arch("arch-a"), 16).cycles == 2601


def test_mesh_latency_rule():
    a = load_arch("arch-a")  # 12 x 14 mesh, row-major ids
    assert link_latency_ns(a, 0, 1) == 4  # 2*1+2
    assert link_latency_ns(a, 0, 14) == 4
    assert link_latency_ns(a, 0, 15) == 6
    assert link_latency_ns(a, 0, -10) == 15


@pytest.mark.parametrize("name", ["arch-a", "arch-b", "arch-c"])
def test_link_costs_of_many_pairs_are_the_per_pair_figures(name):
    """link_costs over every core pair, either way to and from the global memory, and a pair of
    one core: the floats link_latency_ns, link_energy_pj and chip_hops give pair by pair."""
    a = load_arch(name)
    gm = a.noc.global_memory_switch_id
    ends = [*range(a.core_count), gm]
    pairs = [(s, d) for s in ends for d in ends]
    src, dst = np.array(pairs).T
    lat, e, chips, extra = link_costs(a, src, dst)
    flit = a.noc.flit_energy_pj
    for k, (s, d) in enumerate(pairs):
        want = (link_latency_ns(a, s, d), link_energy_pj(a, s, d), chip_hops(a, s, d))
        assert (lat[k], e[k], chips[k]) == want, (s, d)
        assert extra[k] == link_energy_pj(a, s, d) - flit


def test_crossbars_for():
    a = load_arch("arch-a")
    assert a.crossbars_for(128, 16) == 1
    assert a.crossbars_for(129, 17) == 4
    assert a.crossbars_for(4608, 512) == 36 * 32


def test_user_file_and_errors(tmp_path):
    path = tmp_path / "mine.json"
    src = json.loads(open(_builtin_path("arch-a")).read())
    src["name"] = "mine"
    src["core"]["matrix"]["xbar_array_count"] = 4
    path.write_text(json.dumps(src))
    assert load_arch(str(path)).crossbars_per_core == 4
    with pytest.raises(ArchConfigError, match="unknown architecture 'nope'"):
        load_arch("nope")
    bad = dict(src, core_layout=[2, 2])
    with pytest.raises(ArchConfigError, match="core_layout"):
        parse_arch(bad, "bad.json")
    extra = json.loads(json.dumps(src))
    extra["core"]["matrix"]["xbar_sise"] = [1, 1]
    with pytest.raises(ArchConfigError, match="unknown key"):
        parse_arch(extra, "typo.json")
    missing = {k: v for k, v in src.items() if k != "noc"}
    with pytest.raises(ArchConfigError, match="missing section 'noc'"):
        parse_arch(missing, "m.json")


def _builtin_path(name):
    from importlib import resources

    return str(resources.files("raptor.arch").joinpath(f"{name}.json"))


def test_cli_arch_show(capsys):
    assert main(["arch", "show", "arch-b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cores"] == 138 and out["physical_crossbars"] == 138 * 128


def test_cli_error_is_one_line(capsys):
    assert main(["arch", "show", "arch-z"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown architecture 'arch-z'" in err
