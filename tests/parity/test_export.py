"""The pimsim-nn arch export: config keys, sim_config, and the NoC table rule (pimsim-nn.md §7)."""

import json
from importlib import resources
from pathlib import Path

import pytest
from parity_micro import make_arch

from raptor.arch import load_arch
from raptor.arch.loader import parse_arch
from raptor.arch.pimsim_export import export_pimsim, network_table
from raptor.arch.timing import link_energy_pj, link_latency_ns
from raptor.cli import main
from raptor.errors import ArchConfigError

# CI clones the repo next to a copy of shared/
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"


@pytest.mark.skipif(
    not (REFERENCE / "pimcomp_network.json").is_file(), reason="shared/reference not present"
)
def test_12x12_table_reproduces_reference():
    ref = json.loads((REFERENCE / "pimcomp_network.json").read_text())
    ours = network_table(_mesh_12x12())
    assert ours == ref  # every (src, dst) entry, switch -10 included, nothing more


def _mesh_12x12():
    """arch-a's NoC rule on the reference table's 12x12 mesh (144 cores)."""
    d = json.loads(resources.files("raptor.arch").joinpath("arch-a.json").read_text())
    d["cores_per_chip"] = 144
    d["core_layout"] = [12, 12]
    return parse_arch(d)


def test_table_rule_and_completeness():
    arch = _mesh_12x12()
    t = network_table(arch)
    assert len(t["latency"]) == 145 and all(len(r) == 144 for r in t["latency"].values())
    assert t["latency"]["0"]["1"] == 4 and t["latency"]["0"]["143"] == 2 * 22 + 2
    assert t["latency"]["-10"]["77"] == 15 and t["latency"]["77"]["-10"] == 15
    assert {v for r in t["energy"].values() for v in r.values()} == {46}


def test_arch_c_inter_chip_links_are_entries():
    arch = load_arch("arch-c")
    t = network_table(arch)
    assert len(t["latency"]) == 65 and all(len(r) == 64 for r in t["latency"].values())
    for src, dst in ((0, 1), (0, 4), (3, 60), (63, 0)):
        assert t["latency"][str(src)][str(dst)] == link_latency_ns(arch, src, dst)
        assert t["energy"][str(src)][str(dst)] == link_energy_pj(arch, src, dst)
    assert t["latency"]["0"]["4"] > t["latency"]["0"]["1"]
    assert t["energy"]["0"]["4"] > t["energy"]["0"]["1"] == 46


@pytest.mark.parametrize("name", ["arch-a", "arch-b", "arch-c"])
def test_config_keys(tmp_path, name):
    arch = load_arch(name)
    path = export_pimsim(arch, tmp_path, mode="latency", latency_timeout_ms=2)
    cfg = json.loads(path.read_text())
    chip = cfg["chip_config"]
    core = chip["core_config"]
    assert chip["core_cnt"] == arch.core_count
    assert core["matrix_config"]["xbar_array_count"] == arch.crossbars_per_core
    assert core["matrix_config"]["xbar_size"] == list(arch.matrix.xbar_size)
    assert core["rob_size"] == arch.core.rob_size
    assert core["vector_width"] == 32 and core["vector_latency_cycle"] == 4
    assert "vector_reg_read_dynamic_energy" in core and "vector_reg_read_energy" not in core
    assert core["local_memory_config"]["read_latency_cycle"] == 20
    assert chip["global_memory_config"]["write_latency_cycle"] == 50
    assert chip["global_memory_switch_id"] == core["global_memory_switch_id"] == -10
    net = chip["network_config"]
    assert net["bus_width"] == 32 and net["net_config_file_path"] == "network.json"
    assert net["layout"][0] * net["layout"][1] >= arch.core_count
    assert (tmp_path / net["net_config_file_path"]).is_file()
    assert cfg["sim_config"] == {
        "sim_mode": 1,
        "sim_time": 1,
        "latency_timeout_ms": 2,
        "report_verbose_level": 0,
    }


def test_pimcomp_hw_config_values_match(tmp_path):
    """Our PIMCOMP-config arch exports the values of PIMCOMP's own pimsim-nn config."""
    ref_path = REFERENCE / "pimcomp_hw_config.json"
    if not ref_path.is_file():
        pytest.skip("shared/reference not present")
    ref = json.loads(ref_path.read_text())["chip_config"]
    ours = json.loads(export_pimsim(make_arch("pimcomp"), tmp_path).read_text())["chip_config"]
    for key, val in ref["core_config"]["matrix_config"].items():
        assert ours["core_config"]["matrix_config"][key] == val, key
    for sec in ("local_memory_config",):
        for key, val in ref["core_config"][sec].items():
            assert ours["core_config"][sec][key] == val, key
    for key, val in ref["global_memory_config"].items():
        assert ours["global_memory_config"][key] == val, key
    assert ours["core_cnt"] == ref["core_cnt"] == 136
    assert ours["network_config"]["layout"] == ref["network_config"]["layout"]


def test_throughput_mode_and_errors(tmp_path):
    cfg = json.loads(
        export_pimsim(load_arch("arch-a"), tmp_path, "throughput", sim_time_ms=0.25).read_text()
    )
    assert cfg["sim_config"]["sim_mode"] == 0 and cfg["sim_config"]["sim_time"] == 0.25
    with pytest.raises(ArchConfigError):
        export_pimsim(load_arch("arch-a"), tmp_path, "fast")
    with pytest.raises(ArchConfigError):
        export_pimsim(load_arch("arch-a"), tmp_path, report_verbose_level=2)


def test_cli_export(tmp_path, capsys):
    assert main(["arch", "export-pimsim", "arch-c", "--out", str(tmp_path / "x")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "x" / "config.json")
    assert (tmp_path / "x" / "network.json").is_file()
    assert (
        main(
            [
                "arch",
                "export-pimsim",
                "arch-b",
                "--out",
                str(tmp_path / "y"),
                "--mode",
                "throughput",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "y" / "config.json").read_text())["sim_config"]["sim_mode"] == 0
