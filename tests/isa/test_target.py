"""pim/target.json: what a program was compiled for, and every path that refuses to run it on a
chip, mode or pipeline it was not compiled for (or on a chip it does not fit)."""

import json
import shlex
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import onnx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))
from toy import ARCH_TINY, toy_convnet  # noqa: E402

from raptor.arch import load_arch  # noqa: E402
from raptor.cli import build_parser, main  # noqa: E402
from raptor.compiler import compile_to_dir  # noqa: E402
from raptor.errors import PimFormatError, TargetMismatchError  # noqa: E402
from raptor.isa.inspect import inspect_pimdir  # noqa: E402
from raptor.isa.pimdir import read_pimdir  # noqa: E402
from raptor.isa.pimsim_rules import check_pimsim_compatible  # noqa: E402
from raptor.isa.target_record import arch_sha256  # noqa: E402
from raptor.options import CompileOptions  # noqa: E402
from raptor.sim import simulate, simulate_dir  # noqa: E402
from raptor.sim.pimsim_engine import run_pimsim  # noqa: E402
from raptor.validation.compare import validate_dir  # noqa: E402

HINT = "recompile for the requested target or pass --force-target"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """toy_convnet compiled for arch-tiny: raptor latency (L), raptor throughput p3 (T), pimcomp
    latency (P); plus variants of arch-tiny as JSON files."""
    root = tmp_path_factory.mktemp("target")
    model = root / "model.onnx"
    onnx.save(toy_convnet(), model)
    arch = load_arch(str(ARCH_TINY))
    dirs, reports = {}, {}
    for key, opts in (
        ("L", CompileOptions()),
        ("T", CompileOptions(mode="throughput", pipeline=3)),
        ("P", CompileOptions(compiler="pimcomp")),
    ):
        dirs[key] = root / key
        reports[key] = compile_to_dir(model, arch, opts, dirs[key])
        reports[key]["opts"] = opts
    base = json.loads(ARCH_TINY.read_text())

    def variant(name: str, edit) -> Path:
        d = json.loads(json.dumps(base))
        d["name"] = name
        edit(d)
        path = root / f"{name}.json"
        path.write_text(json.dumps(d))
        return path

    def slow(d):
        d["core"]["matrix"]["xbar_latency"] *= 2

    def four_cores(d):
        d["cores_per_chip"], d["core_layout"] = 4, [2, 2]

    def one_xbar(d):
        d["core"]["matrix"]["xbar_array_count"] = 1

    def small_memory(d):
        d["core"]["local_memory"]["memory_size"] = 256

    def small_xbars(d):
        d["core"]["matrix"]["xbar_size"] = [64, 64]

    archs = {
        "slow": variant("tiny-slow", slow),
        "cores": variant("tiny-4-cores", four_cores),
        "xbars": variant("tiny-1-xbar", one_xbar),
        "memory": variant("tiny-256-bytes", small_memory),
        "renamed": variant("tiny-renamed", lambda d: None),
        "small-xbars": variant("tiny-64x64", small_xbars),
    }
    return {"model": model, "arch": arch, "dirs": dirs, "reports": reports, "archs": archs}


def run_cli(capsys, line: str) -> tuple[int, str, str]:
    rc = main(shlex.split(line))
    out, err = capsys.readouterr()
    return rc, out, err


def sha(path) -> str:
    return arch_sha256(load_arch(str(path)))[:12]


# ---- the record --------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["L", "T", "P"])
def test_both_compilers_write_the_record(built, key):
    d, rep = built["dirs"][key], built["reports"][key]
    opts = rep["opts"]
    data = json.loads((d / "pim" / "target.json").read_text())
    assert data["arch"] == "arch-tiny"
    assert data["arch_sha256"] == arch_sha256(built["arch"])
    assert load_arch(str(ARCH_TINY)).summary == read_pimdir(d / "pim").target.load_arch().summary
    assert (data["mode"], data["pipeline"], data["compiler"]) == (
        opts.mode,
        opts.pipeline,
        opts.compiler,
    )
    assert data["options"] == json.loads(json.dumps(asdict(opts)))  # tuples as JSON lists
    assert data["local_memory_peak_bytes"] == max(rep["local_memory_peak_bytes"])
    # pimsim-nn's view of the directory is unchanged: config.json keys, no extra core_ file
    cfg = json.loads((d / "pim" / "config.json").read_text())
    assert set(cfg) == {"core_cnt", "array_group_map", "raptor"}
    prog = read_pimdir(d / "pim")
    assert check_pimsim_compatible(prog, opts.mode, built["arch"]) == []


def test_hash_ignores_name_and_description_but_not_parameters(built):
    a = built["archs"]
    assert sha(a["renamed"]) == sha(ARCH_TINY)
    assert sha(a["slow"]) != sha(ARCH_TINY)


def test_a_renamed_copy_of_the_chip_is_the_same_target(built, capsys):
    rc, out, err = run_cli(
        capsys, f"simulate {built['dirs']['L']} --arch {built['archs']['renamed']}"
    )
    assert rc == 0 and err == "" and "on tiny-renamed" in out


def test_malformed_or_tampered_record(built, tmp_path):
    d = tmp_path / "pim"
    shutil.copytree(built["dirs"]["L"] / "pim", d)
    rec = json.loads((d / "target.json").read_text())
    rec["arch_params"]["core"]["rob_size"] = 8
    (d / "target.json").write_text(json.dumps(rec))
    with pytest.raises(PimFormatError) as e:
        simulate_dir(d)
    assert str(e.value) == (
        "target.json: the recorded parameters of arch-tiny do not match their sha256 "
        f"{rec['arch_sha256'][:12]}"
    )
    (d / "target.json").write_text(json.dumps({**rec, "mode": "fast"}))
    with pytest.raises(PimFormatError) as e:
        read_pimdir(d)
    assert str(e.value) == f"{d / 'target.json'}: mode must be latency or throughput, got 'fast'"


# ---- defaults from the record ------------------------------------------------------------


def test_simulate_and_validate_take_everything_from_the_record(built, capsys):
    d = built["dirs"]["T"]
    rc, out, err = run_cli(capsys, f"simulate {d} --json")
    assert rc == 0 and err == ""
    rep = json.loads(out)
    assert (rep["mode"], rep["pipeline"], rep["target"]["arch"]) == ("throughput", 3, "arch-tiny")
    assert rep["target"]["compiled_for"]["pipeline"] == 3 and rep["target_override"] == []
    rc, out, err = run_cli(capsys, f"validate {d} --model {built['model']}")
    assert rc == 0 and err == ""
    assert out.startswith("functional validation: PASS") and out.count(" input ") == 3


def test_inspect_shows_the_record_and_the_fit(built, capsys):
    d = built["dirs"]["P"]
    prog = read_pimdir(d / "pim")
    rc, out, _ = run_cli(capsys, f"inspect {d}")
    assert rc == 0
    used = sum(1 for s in prog.cores if len(s))
    peak = prog.target.local_memory_peak_bytes
    xbars = max(sum(a) for a in prog.array_group_map)
    assert (
        f"compiled for   arch-tiny (parameters sha256 {sha(ARCH_TINY)}), latency mode, "
        "pipeline 1, pimcomp 0.1.0"
    ) in out.splitlines()
    assert (
        f"fits           arch-tiny: 8 of 8 cores ({used} with instructions), at most {xbars} of 8 "
        f"crossbars per core, local memory peak {peak} of 262144 bytes"
    ) in out.splitlines()


# ---- mismatches: exact messages, exit 2, nothing printed on stdout -----------------------


def test_arch_mismatch(built, capsys):
    slow = built["archs"]["slow"]
    for cmd in ("simulate", f"validate --model {built['model']}", "inspect"):
        rc, out, err = run_cli(capsys, f"{cmd} {built['dirs']['L']} --arch {slow}")
        assert (rc, out) == (2, "")
        assert err == (
            f"raptor: error: target mismatch: compiled for arch-tiny (parameters sha256 "
            f"{sha(ARCH_TINY)}), asked for tiny-slow (sha256 {sha(slow)}); {HINT}\n"
        )


def test_mode_mismatch(built, capsys):
    rc, out, err = run_cli(capsys, f"simulate {built['dirs']['L']} --mode throughput")
    assert (rc, out) == (2, "")
    assert err == (
        f"raptor: error: target mismatch: compiled for latency mode, asked for throughput; {HINT}\n"
    )
    rc, out, err = run_cli(capsys, f"simulate {built['dirs']['T']} --mode latency")
    assert err == (
        f"raptor: error: target mismatch: compiled for throughput mode, asked for latency; {HINT}\n"
    )


def test_pipeline_mismatch(built, capsys):
    rc, out, err = run_cli(capsys, f"simulate {built['dirs']['T']} --pipeline 5")
    assert (rc, out) == (2, "")
    assert err == (
        f"raptor: error: target mismatch: compiled for pipeline 3, asked for 5; {HINT}\n"
    )


def test_validate_of_a_latency_program_as_throughput_is_refused(built, capsys):
    """The issue's case: it used to report FAIL as if the compiler were wrong."""
    line = (
        f"validate {built['dirs']['L']} --model {built['model']} --arch {ARCH_TINY} "
        "--mode throughput --pipeline 4"
    )
    rc, out, err = run_cli(capsys, line)
    assert (rc, out) == (2, "")
    assert err == (
        "raptor: error: target mismatch: compiled for latency mode, asked for throughput; "
        f"compiled for pipeline 1, asked for 4; {HINT}\n"
    )


def test_latency_with_a_pipeline_is_refused(built, capsys):
    rc, _, err = run_cli(capsys, f"simulate {built['dirs']['L']} --mode latency --pipeline 4")
    assert rc == 2
    assert err == "raptor: error: latency mode runs one input: pipeline 4 needs throughput mode\n"


def test_programs_that_do_not_fit_are_never_run_even_forced(built, capsys):
    d = built["dirs"]["L"]
    prog = read_pimdir(d / "pim")
    used = sum(1 for s in prog.cores if len(s))
    xb = [sum(a) for a in prog.array_group_map]
    worst = xb.index(max(xb))
    peak, peak_core = prog.target.local_memory_peak_bytes, prog.target.local_memory_peak_core
    a = built["archs"]
    expected = {
        "cores": f"the program does not fit tiny-4-cores: it has 8 cores ({used} with "
        "instructions), the chip has 4 (not run)",
        "xbars": f"the program does not fit tiny-1-xbar: core {worst} uses {max(xb)} crossbars, "
        "the chip has 1 per core (not run)",
        "memory": f"the program does not fit tiny-256-bytes: core {peak_core} needs {peak} bytes "
        "of local memory, the chip has 256 (not run)",
    }
    assert max(xb) > 1 and peak > 256  # the variants really are too small
    for key, msg in expected.items():
        rc, out, err = run_cli(capsys, f"simulate {d} --arch {a[key]} --force-target")
        assert (rc, out, err) == (2, "", f"raptor: error: {msg}\n")


def test_array_group_too_small_for_its_matrix(built, capsys):
    """A program for 128x128 crossbars forced onto a chip of 64x64 ones: its crossbars per core
    fit, a group's weight matrix does not."""
    d, path = built["dirs"]["L"], built["archs"]["small-xbars"]
    prog, small = read_pimdir(d / "pim"), load_arch(str(path))
    assert max(sum(a) for a in prog.array_group_map) <= small.crossbars_per_core
    core, g, (rows, cols), need, has = next(
        (
            c,
            g,
            prog.weight_matrices[m].shape,
            small.crossbars_for(*prog.weight_matrices[m].shape),
            n,
        )
        for c, (ags, mats) in enumerate(zip(prog.array_group_map, prog.array_group_weights))
        for g, (n, m) in enumerate(zip(ags, mats))
        if small.crossbars_for(*prog.weight_matrices[m].shape) > n
    )
    rc, out, err = run_cli(capsys, f"simulate {d} --arch {path} --force-target")
    assert (rc, out) == (2, "")
    assert err == (
        f"raptor: error: the program does not fit tiny-64x64: array group {g} of core {core} "
        f"holds a {rows}x{cols} weight matrix, which needs {need} crossbars of 64x64 at 16-bit "
        f"weights, the group has {has} (not run)\n"
    )


# ---- the override ------------------------------------------------------------------------


def test_force_target_runs_and_says_so_loudly(built, capsys):
    slow = built["archs"]["slow"]
    warning = (
        f"WARNING: TARGET OVERRIDE (--force-target): compiled for arch-tiny (parameters sha256 "
        f"{sha(ARCH_TINY)}), asked for tiny-slow (sha256 {sha(slow)}). These figures are not "
        "those of the program's own target."
    )
    d = built["dirs"]["L"]
    rc, out, err = run_cli(capsys, f"simulate {d} --arch {slow} --force-target")
    assert rc == 0 and err == f"raptor: {warning}\n"
    assert out.splitlines()[0] == warning and "on tiny-slow" in out.splitlines()[1]
    # the slower crossbar really ran: same program, later finish than on its own chip
    own = simulate_dir(d)
    forced = simulate_dir(d, load_arch(str(slow)), force_target=True)
    assert forced.latency_ns > own.latency_ns and forced.target_override == [warning]
    rc, out, err = run_cli(
        capsys, f"validate {d} --model {built['model']} --arch {slow} --force-target --json"
    )
    assert rc == 0 and err == f"raptor: {warning}\n"
    assert json.loads(out)["simulation"]["target_override"] == [warning]


# ---- every library path refuses, not only the CLI ----------------------------------------


def test_library_paths_refuse_a_mismatch(built):
    d = built["dirs"]["L"]
    slow = load_arch(str(built["archs"]["slow"]))
    msg = (
        f"target mismatch: compiled for arch-tiny (parameters sha256 {sha(ARCH_TINY)}), asked "
        f"for tiny-slow (sha256 {arch_sha256(slow)[:12]}); {HINT}"
    )
    prog = read_pimdir(d / "pim")
    calls = [
        lambda: simulate(prog, slow),  # the suite runner's path (raptor.suite.execute)
        lambda: simulate_dir(d, slow),
        lambda: validate_dir(d, built["model"], slow),
        lambda: run_pimsim(d / "pim", slow, binary="/nonexistent"),  # before any binary
        lambda: inspect_pimdir(d, slow),
    ]
    for call in calls:
        with pytest.raises(TargetMismatchError) as e:
            call()
        assert str(e.value) == msg
    with pytest.raises(TargetMismatchError) as e:
        simulate(prog, mode="throughput", pipeline=4)
    assert str(e.value) == (
        "target mismatch: compiled for latency mode, asked for throughput; compiled for "
        f"pipeline 1, asked for 4; {HINT}"
    )


def test_a_directory_without_record_needs_explicit_flags(built, tmp_path, capsys):
    d = tmp_path / "foreign"
    shutil.copytree(built["dirs"]["L"] / "pim", d / "pim")
    (d / "pim" / "target.json").unlink()
    rc, out, err = run_cli(capsys, f"simulate {d}")
    assert (rc, out) == (2, "")
    assert err == (
        "raptor: error: the program has no target record (target.json): pass --arch "
        "(and --mode/--pipeline) for a directory written by another tool\n"
    )
    rc, out, _ = run_cli(capsys, f"inspect {d}")
    assert rc == 0 and "compiled for   unknown (no target.json)" in out
    with_record = simulate_dir(built["dirs"]["L"])
    without = simulate_dir(d, load_arch(str(ARCH_TINY)))
    assert without.latency_ns == with_record.latency_ns and without.target["compiled_for"] is None
    # the resource check still applies without a record
    with pytest.raises(TargetMismatchError, match="does not fit tiny-4-cores: it has 8 cores"):
        simulate_dir(d, load_arch(str(built["archs"]["cores"])))


# ---- help texts ----------------------------------------------------------------------------


def _subparsers(parser):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield name, sub
                for inner, sub2 in _subparsers(sub):
                    yield f"{name} {inner}", sub2


def test_every_option_has_a_help_text_with_its_default():
    missing = []
    for name, sub in _subparsers(build_parser()):
        for action in sub._actions:
            if action.option_strings and action.option_strings[0] in ("-h", "--help"):
                continue
            h = action.help or ""
            if action.__class__.__name__ == "_SubParsersAction":
                continue
            if not action.option_strings:
                ok = bool(h)
            else:
                ok = "default" in h or "(required)" in h
            if not ok or "\n" in h:
                missing.append(f"{name} {action.option_strings or action.dest}")
    assert missing == []


def test_every_subcommand_help_renders():
    """argparse expands `%` in help texts when it prints them: a bare `5%` crashed `raptor
    compile --help`. Render every parser's help the way --help does."""
    broken = []
    for name, sub in _subparsers(build_parser()):
        try:
            text = sub.format_help()
        except (TypeError, ValueError, KeyError) as e:
            broken.append(f"{name}: {e}")
            continue
        assert "usage:" in text
    assert broken == []
