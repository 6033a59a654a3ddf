"""Structure of the package: no import cycles, no underscore names taken across modules, one
pass protocol with a pass list the options decide."""

import dataclasses
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

from raptor.compiler import pass_list
from raptor.options import CompileOptions
from raptor.spatial.passes import round_passes, spatial_passes

ROOT = Path(__file__).resolve().parents[1]


def _structure():
    spec = importlib.util.spec_from_file_location("structure", ROOT / "benchmarks" / "structure.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["structure"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_import_graph_sees_function_level_and_relative_imports(tmp_path):
    """The graph reader itself, on a hand-written package: a function-level import and a
    `from . import` count, an underscore name is reported, a two-module cycle is found."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.b import _hidden\n    return _hidden\n")
    (pkg / "b.py").write_text("from . import c\n_hidden = 1\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    s = _structure()
    mods = s.import_graph(tmp_path, "pkg")
    assert mods["pkg.a"].imports == {"pkg.b"}
    assert mods["pkg.b"].imports == {"pkg.c"}
    assert mods["pkg.c"].imports == {"pkg.a"}
    assert [(t, n) for t, n, _ in mods["pkg.a"].private] == [("pkg.b", "_hidden")]
    assert s.cycles(mods) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_no_import_cycles_and_no_private_imports():
    s = _structure()
    mods = s.import_graph()
    assert "raptor.pim.lowering" in mods and "raptor.compiler" in mods
    assert s.cycles(mods) == []
    private = [f"{m} imports {t}.{n}" for m, i in mods.items() for t, n, _ in i.private]
    assert private == []
    import networkx as nx

    pkgs = nx.DiGraph(
        (s.package_of(m), s.package_of(t))
        for m, i in mods.items()
        for t in i.imports
        if s.package_of(m) != s.package_of(t)
    )
    assert nx.is_directed_acyclic_graph(pkgs)  # what docs/img/structure.png draws


def _names(opts: CompileOptions) -> list[str]:
    return [n for n, _ in pass_list(opts)]


def test_every_pass_is_a_frozen_dataclass_with_name_and_apply():
    opts = [
        CompileOptions(mode="throughput", pipeline=4),
        CompileOptions(disable_spatial_planning=True),
    ]
    passes = [p for o in opts for p in spatial_passes(o) + round_passes(o)]
    assert len({type(p) for p in passes}) == 7
    for p in passes:
        assert dataclasses.is_dataclass(p) and type(p).__dataclass_params__.frozen
        assert isinstance(p.name, str) and p.name
        assert list(inspect.signature(p.apply).parameters) == ["arch", "sg"]


@pytest.mark.parametrize(
    "field,gone",
    [
        ("disable_sibling_merge", {"sibling-gemm-merge"}),
        ("disable_noc_dataflow", {"noc-dataflow", "noc-message-order"}),
        ("disable_synchronization", {"synchronization"}),
        ("disable_spatial_planning", {"spatial-planning", "mesh-placement"}),
        ("disable_mesh_placement", {"mesh-placement"}),
    ],
)
def test_an_option_removes_its_pass(field, gone):
    full = _names(CompileOptions())
    less = _names(CompileOptions(**{field: True}))
    assert set(full) - set(less) == gone
    if field == "disable_spatial_planning":
        assert "plain-assignment" in less and "plain-assignment" not in full


def test_default_pass_order():
    assert _names(CompileOptions()) == [
        "frontend",
        "build-spatial",
        "residual-add-fusion",
        "sibling-gemm-merge",
        "conv-to-gemm-tiling",
        "spatial-planning",
        "noc-dataflow",
        "synchronization",
        "noc-message-order",
        "verify-spatial",
        "pim-codegen",
        "verify-pim",
        "deadlock-check",
        "mesh-placement",
        "finalists",
        "estimates",
    ]
    assert "finalists" not in _names(CompileOptions(mode="throughput", pipeline=4))
    loop = [n for n, again in pass_list(CompileOptions()) if again]
    assert loop[0] == "synchronization" and loop[-1] == "deadlock-check"


def test_print_passes_lists_every_timed_pass(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "tests" / "pim"))
    import onnx
    from toy import ARCH_TINY, toy_convnet

    from raptor.cli import main

    model = tmp_path / "m.onnx"
    onnx.save(toy_convnet(hw=8, c=4), model)
    argv = ["compile", str(model), "--arch", str(ARCH_TINY), "--out", str(tmp_path / "o")]
    assert main([*argv, "--print-passes", "--pim-disable-sibling-merge"]) == 0
    out = capsys.readouterr().out.splitlines()
    listed = [line.split()[1] for line in out if line[:2].strip().isdigit()]
    assert listed == _names(CompileOptions(disable_sibling_merge=True))
    assert all(line.rstrip().split()[2].replace(".", "").isdigit() for line in out[: len(listed)])
