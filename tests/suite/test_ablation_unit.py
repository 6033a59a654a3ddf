"""The ablation wrapper's contract pieces that need no simulation: options, plan, percentages."""

import subprocess
import sys
from pathlib import Path

import pytest

from raptor.suite.ablation import combine, main, selected_variants
from raptor.suite.runner import case_modes

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "validation/tools/pim/ablation/run_ablation.py"


def test_default_case_set_is_latency_and_throughput_p4():
    assert case_modes(None, None) == [("latency", 1), ("throughput", 4)]
    assert case_modes("latency", None) == [("latency", 1)]
    assert case_modes("throughput", None) == [("throughput", 4)]
    assert case_modes(None, 8) == [("throughput", 8)]
    assert case_modes(None, 1) == [("latency", 1)]


def test_baseline_is_added_and_order_is_fixed():
    assert selected_variants(None) == ["baseline", "no-sync", "no-plan", "no-sync-no-plan"]
    assert selected_variants(["no-plan"]) == ["baseline", "no-plan"]
    assert selected_variants(["no-sync-no-plan", "no-sync", "no-sync"]) == [
        "baseline",
        "no-sync",
        "no-sync-no-plan",
    ]


def test_dry_run_prints_commands_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "suite"
    assert (
        main(
            [
                "--dry-run",
                "--out-dir",
                str(out),
                "--models",
                "vgg8",
                "--archs",
                "arch-a",
                "--no-fast",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 8  # 4 variants x (latency, throughput pipeline 4)
    assert all(
        "--raptor-only" in ln and "--no-fast" in ln and "--archs arch-a" in ln for ln in lines
    )
    assert sum("--mode latency" in ln for ln in lines) == 4
    assert sum("--mode throughput --pipeline 4" in ln for ln in lines) == 4
    assert sum("--raptor-extra-arg=--pim-disable-synchronization" in ln for ln in lines) == 4
    assert sum("--raptor-extra-arg=--pim-disable-spatial-planning" in ln for ln in lines) == 4
    assert all("ablation/" in ln for ln in lines)
    assert not out.exists()


def test_mode_or_pipeline_override_gives_one_invocation_per_variant(capsys):
    assert main(["--dry-run", "--variant", "no-sync", "--mode", "latency"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(ln.count(" --mode ") == 1 for ln in lines)
    assert main(["--dry-run", "--pipeline", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and all("--pipeline 2" in ln and " --mode " not in ln for ln in lines)


@pytest.mark.parametrize("arg", [["--only", "raptor"], ["--only=pimcomp"]])
def test_only_is_rejected(arg, capsys):
    assert main(["--dry-run", *arg]) == 2
    assert "--only is reserved" in capsys.readouterr().err


def test_bad_forwarded_option_fails_before_running(capsys):
    assert main(["--dry-run", "--archs"]) == 2  # missing value
    assert main(["--dry-run", "--jobs", "x"]) == 2
    err = capsys.readouterr().err
    assert "--archs: expected at least one argument" in err and "invalid int value: 'x'" in err


def test_percentages_against_baseline():
    def row(lat, tp, status="PASS", model="vgg8"):
        return {
            "model": model,
            "arch": "arch-a",
            "mode": "latency",
            "pipeline": "1",
            "raptor_functional_validation": status,
            "raptor_latency_ms": lat,
            "raptor_throughput_ips": tp,
            "raptor_power_mw": "10",
            "raptor_energy_uj": "",
        }

    rows = combine(
        {
            "baseline": [row("2.0", "500")],
            "no-sync": [row("1.5", "666.666", "FAIL")],
            "no-plan": [row("3", "400"), row("1", "1", model="resnet18")],
        }
    )
    base, nosync, noplan, orphan = rows
    assert (base["latency"], base["throughput"], base["power"], base["energy"]) == (
        "+0.00%",
        "+0.00%",
        "+0.00%",
        "",
    )
    assert nosync["latency"] == "-25.00%" and nosync["throughput"] == "+33.33%"
    assert nosync["functional_validation"] == "FAIL"
    assert noplan["latency"] == "+50.00%" and noplan["throughput"] == "-20.00%"
    assert orphan["latency"] == ""  # no baseline row for that case: no percentage


def test_help_runs_from_a_fresh_shell():
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 0 and "--variant" in r.stdout and "--dry-run" in r.stdout


def test_code_fingerprint_tracks_sources(tmp_path):
    from raptor.suite.execute import code_fingerprint, tree_fingerprint

    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "arch.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("ignored")
    before = tree_fingerprint(tmp_path)
    (tmp_path / "notes.txt").write_text("still ignored")
    assert tree_fingerprint(tmp_path) == before
    (tmp_path / "a.py").write_text("x = 2\n")
    assert tree_fingerprint(tmp_path) != before
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "arch.json").write_text('{"cores": 2}')
    assert tree_fingerprint(tmp_path) != before
    assert len(code_fingerprint()) == 64


def test_dry_run_spells_out_the_runner_defaults(capsys):
    """The whole case set is visible: architectures, jobs and seed appear even when not given,
    and a forwarded value replaces its default instead of joining it."""
    from raptor.suite.cases import DEFAULT_ARCHS

    assert main(["--dry-run", "--variant", "no-plan"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4
    for ln in lines:
        assert f" --archs {' '.join(DEFAULT_ARCHS)} " in ln
        assert " --jobs 1 " in ln and " --seed 0" in ln and "SUPPRESS" not in ln
    assert main(["--dry-run", "--archs", "arch-c", "--jobs", "2", "--seed", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    for ln in lines:
        assert ln.count("--archs") == ln.count("--jobs") == ln.count("--seed") == 1
        assert "--archs arch-c" in ln and "--jobs 2" in ln and "--seed 3" in ln


def test_every_script_option_states_its_default():
    from raptor.suite.ablation import build_parser as ablation_parser
    from raptor.suite.runner import build_parser as runner_parser

    missing = [
        f"{p.prog} {a.option_strings[-1]}"
        for p in (runner_parser(), ablation_parser())
        for a in p._actions
        if a.option_strings
        and a.option_strings[0] != "-h"
        and a.help != "==SUPPRESS=="
        and "default" not in (a.help or "")
    ]
    assert missing == []


def test_chart_marks_a_change_too_small_for_its_bar(monkeypatch, tmp_path):
    """A variant equal to the baseline (+0.00 %) or far below the panel's scale gets a diamond
    at its value; a visible bar gets none."""
    import raptor.suite.charts as charts

    figs = []
    monkeypatch.setattr(charts, "save_figure", lambda fig, path: figs.append(fig))

    def row(variant, lat, status="PASS"):
        return {
            "variant": variant,
            "model": "vgg8",
            "arch": "arch-a",
            "mode": "latency",
            "pipeline": "1",
            "functional_validation": status,
            "latency": lat,
            "throughput": "+0.00%",
            "power": "",
            "energy": "-40.00%",
        }

    rows = [
        row("baseline", "+0.00%"),
        row("no-sync", "+0.00%"),
        row("no-plan", "+900.00%"),
        row("no-sync-no-plan", "+5.00%", "FAIL"),  # under 1 % of 900: no visible bar
    ]
    charts.ablation_chart(rows, tmp_path / "a.png")
    (fig,) = figs
    lat, tput, power, energy = fig.axes[:4]

    def diamonds(ax):
        return sorted(
            (round(float(ln.get_xdata()[0]), 4), float(ln.get_ydata()[0]))
            for ln in ax.get_lines()
            if ln.get_marker() == "D"
        )

    # three variants in 0.8 of a case: bars at -0.2667, 0, +0.2667
    assert diamonds(lat) == [(-0.2667, 0.0), (0.2667, 5.0)]
    assert diamonds(tput) == [(-0.2667, 0.0), (0.0, 0.0), (0.2667, 0.0)]
    assert diamonds(power) == []  # no numbers
    assert diamonds(energy) == []  # -40 % everywhere: visible bars
    # the failed program's diamond is half white, and the legend says so
    fills = {
        round(float(ln.get_xdata()[0]), 4): ln.get_fillstyle()
        for ln in lat.get_lines()
        if ln.get_marker() == "D"
    }
    assert fills == {-0.2667: "full", 0.2667: "bottom"}
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "about 0 % (bar too short to see; half white: FAIL)" in labels


def test_chart_keeps_a_status_mark_without_bar_inside_the_panel(monkeypatch, tmp_path):
    """An ERROR (no numbers) in the last variant slot of the last case is drawn inside the axes,
    at mid-height, even on a panel whose values are all negative."""
    import raptor.suite.charts as charts

    figs = []
    monkeypatch.setattr(charts, "save_figure", lambda fig, path: figs.append(fig))
    base = {"model": "vgg8", "arch": "arch-a", "mode": "latency", "pipeline": "1"}
    nums = {"latency": "+10.00%", "throughput": "-9.00%", "power": "-5.00%", "energy": "+3.00%"}
    empty = dict.fromkeys(nums, "")
    rows = [
        {**base, "variant": "baseline", "functional_validation": "PASS", **nums},
        {**base, "variant": "no-sync", "functional_validation": "PASS", **nums},
        {**base, "variant": "no-plan", "functional_validation": "ERROR", **empty},
    ]
    charts.ablation_chart(rows, tmp_path / "a.png")
    (fig,) = figs
    for ax in fig.axes[:4]:
        (mark,) = [t for t in ax.texts if t.get_text() == "ERROR"]
        x, y = mark.xy
        lo, hi = ax.get_xlim()
        assert lo < x < hi and x == 0.2 and y == 0.5  # two variants in 0.8: slots at -0.2, +0.2
