"""Mesh placement (raptor.pim.placement): the emitted program's cores renumbered so that its
messages travel few hops; the same program otherwise."""

from __future__ import annotations

import itertools
import json

import numpy as np
import onnx
import pytest
from toy import max_rel_err, reference, toy_inception, toy_resnet

from raptor.arch import load_arch
from raptor.compiler import compile_model, pass_list
from raptor.isa.opcodes import Opcode
from raptor.options import CompileOptions
from raptor.pim.deadlock import check_programs
from raptor.pim.placement import (
    best_permutation,
    latencies,
    placement_cost,
    relabel_program,
    traffic,
)
from raptor.sim import simulate

ARCH = load_arch("arch-a")  # 12 x 14 mesh, 2 ns + 2 ns per hop per flit


def _local_optimum(t, g, lat, glat, p) -> bool:
    cost = placement_cost(t, g, lat, glat, p)
    for a, b in itertools.combinations(range(len(p)), 2):
        q = p.copy()
        q[[a, b]] = q[[b, a]]
        if placement_cost(t, g, lat, glat, q) < cost - 1e-6:
            return False
    return True


def test_descent_ends_where_no_swap_helps():
    """On random traffic between 10 cores of the mesh (and to the global memory) the descent's
    permutation costs less than the identity and no pair swap lowers it (checked by brute force,
    which also checks the vectorised swap delta the descent relies on)."""
    rng = np.random.default_rng(3)
    lat, glat = latencies(ARCH, 10)
    assert lat[0, 1] == 4.0 and lat[0, 9] == 2 + 2 * 9 and np.all(np.diag(lat) == 0)
    for _ in range(3):
        t = rng.integers(0, 50, (10, 10)).astype(float) * (rng.random((10, 10)) < 0.3)
        np.fill_diagonal(t, 0)
        g = rng.integers(0, 20, 10).astype(float)
        p = best_permutation(t, g, lat, glat)
        assert sorted(p) == list(range(10))
        ident = np.arange(10)
        assert placement_cost(t, g, lat, glat, p) < placement_cost(t, g, lat, glat, ident)
        assert _local_optimum(t, g, lat, glat, p)


def test_far_partners_become_neighbours():
    """Two cores at opposite corners of the mesh exchanging most of the traffic end up one hop
    apart."""
    n = ARCH.core_count
    t = np.zeros((n, n))
    t[0, n - 1] = 1000.0
    t[5, 6] = 10.0
    lat, glat = latencies(ARCH, n)
    p = best_permutation(t, np.zeros(n), lat, glat)
    assert lat[p[0], p[n - 1]] == 4.0 and lat[p[5], p[6]] == 4.0
    assert placement_cost(t, np.zeros(n), lat, glat, p) == 1000 * 4 + 10 * 4


def test_heavy_partners_share_a_chip():
    """On arch-c (16 chips of 2 x 2 cores) two cores on the farthest chips that exchange most of
    the traffic end up on one chip, next to each other, and the cores that load from global
    memory (chip 0) move towards it."""
    arch = load_arch("arch-c")
    n = arch.core_count
    t = np.zeros((n, n))
    t[0, n - 1] = 500.0
    g = np.zeros(n)
    g[n - 2] = 300.0
    lat, glat = latencies(arch, n)
    assert lat[0, n - 1] > 100 and glat[n - 2] > glat[0]  # chip hops cost far more than a core hop
    p = best_permutation(t, g, lat, glat)
    assert lat[p[0], p[n - 1]] == arch.noc.base_latency_ns + arch.noc.hop_latency_ns
    assert glat[p[n - 2]] == glat.min()


def test_traffic_counts_flits():
    res = compile_model(toy_resnet(), ARCH, CompileOptions(disable_mesh_placement=True))
    prog = res.program
    t, g = traffic(prog, ARCH.noc.bus_width)
    sends = [s[s["opcode"] == Opcode.SEND] for s in prog.cores]
    want = sum(int(np.maximum(1, np.ceil(s["generic3"] / 32)).sum()) for s in sends)
    syncs = sum(int((s["opcode"] == Opcode.SYNC).sum()) for s in prog.cores)
    assert t.sum() == want + syncs > 0
    lds = sum(int((s["opcode"] == Opcode.LD).sum()) for s in prog.cores)
    assert g.sum() >= lds > 0  # the input image at least, and the stores of the output


@pytest.mark.parametrize("model", [toy_resnet(), toy_inception()], ids=["resnet", "inception"])
def test_relabelled_program_is_the_same_program(model):
    """Any renumbering computes the same values, passes the deadlock check, keeps every core's
    instructions apart from the core operands, and renumbering back restores the program byte
    for byte."""
    prog = compile_model(model, ARCH, CompileOptions(disable_mesh_placement=True)).program
    n = prog.core_cnt
    q = np.random.default_rng(0).permutation(n)
    moved = relabel_program(prog, q)
    assert check_programs(moved.cores, 1).ok
    for c in range(n):
        a, b = prog.cores[c], moved.cores[q[c]]
        named = np.isin(a["opcode"], (Opcode.SEND, Opcode.RECV, Opcode.SYNC))
        assert np.array_equal(a[~named], b[~named])
        assert np.array_equal(q[a["r2_or_imm"][named]], b["r2_or_imm"][named])
        assert moved.array_group_map[q[c]] == prog.array_group_map[c]
        assert moved.array_group_weights[q[c]] == prog.array_group_weights[c]
    spans = moved.meta["layer_spans"]["cores"]
    assert {int(k[4:]) for k in spans} == {
        int(q[int(k[4:])]) for k in prog.meta["layer_spans"]["cores"]
    }
    back = relabel_program(moved, np.argsort(q))
    assert all(np.array_equal(a, b) for a, b in zip(back.cores, prog.cores))
    assert back.meta["layer_spans"] == prog.meta["layer_spans"]
    ins = [{"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}]
    ref = reference(model, ins)[0]
    for p in (prog, moved):
        out = simulate(p, ARCH, "latency", 1, ins).outputs[0]
        for k, want in ref.items():
            assert max_rel_err(np.asarray(out[k]).reshape(want.shape), want) <= 1e-4


def test_compiler_places_planned_programs_only(tmp_path):
    """A planned compile places its cores (the report says by how much; never worse than the
    snake numbering) and the relabelled graph agrees with the program; --pim-disable-mesh-placement
    and an unplanned compile keep the snake or plain numbering."""
    model = toy_inception()
    placed = compile_model(model, ARCH, CompileOptions())
    mp = placed.report["mesh_placement"]
    assert mp["switch_busy_ns"] <= mp["switch_busy_ns_before"]
    assert mp["flit_latency_ns"] <= mp["flit_latency_ns_before"]
    t, g = traffic(placed.program, ARCH.noc.bus_width)
    lat, glat = latencies(ARCH, placed.program.core_cnt)
    ident = np.arange(placed.program.core_cnt)
    assert placement_cost(t, g, lat, glat, ident) == pytest.approx(mp["switch_busy_ns"], abs=0.1)
    # the report's graph moved with the program: cores with nodes are the cores with code, and
    # every core holding mvmuls holds a GEMM layer's node
    rep = placed.report
    assert [k > 0 for k in rep["nodes_per_core"]] == [len(s) > 0 for s in placed.program.cores]
    mvm_cores = {
        c for c, s in enumerate(placed.program.cores) if (s["opcode"] == Opcode.MVMUL).any()
    }
    assert mvm_cores and mvm_cores <= {c for cs in rep["layer_cores"].values() for c in cs}
    for opts in (
        CompileOptions(disable_mesh_placement=True),
        CompileOptions(disable_spatial_planning=True),
    ):
        res = compile_model(model, ARCH, opts)
        assert res.report["mesh_placement"] is None
        assert "mesh-placement" not in res.report["pass_time_s"]
        assert "mesh-placement" not in [n for n, _ in pass_list(opts)]
    assert "mesh-placement" in placed.report["pass_time_s"]
    assert ("mesh-placement", False) in pass_list(CompileOptions())


def test_cli_option(tmp_path, capsys):
    from raptor.cli import main

    path = tmp_path / "m.onnx"
    onnx.save(toy_resnet(), path)
    out = tmp_path / "o"
    argv = ["compile", str(path), "--arch", "arch-a", "--out", str(out)]
    assert main([*argv, "--pim-disable-mesh-placement"]) == 0
    target = json.loads((out / "pim" / "target.json").read_text())
    assert target["options"]["disable_mesh_placement"] is True
    assert json.loads((out / "compile_report.json").read_text())["mesh_placement"] is None
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    assert "mesh placement" not in capsys.readouterr().out
    placed = tmp_path / "p"
    assert main(["compile", str(path), "--arch", "arch-a", "--out", str(placed)]) == 0
    mp = json.loads((placed / "compile_report.json").read_text())["mesh_placement"]
    capsys.readouterr()
    assert main(["inspect", str(placed)]) == 0
    want = (
        f"mesh placement flits {mp['flit_latency_ns_before']:.1f} -> {mp['flit_latency_ns']:.1f} "
        "ns each on average"
    )
    assert want in capsys.readouterr().out
