"""`run_ablation.py`: rerun the suite with Raptor's synchronization and spatial-planning passes
switched off, and tabulate each variant's signed percentage difference from the baseline.

Each variant is one or more suite-runner subprocesses (`--raptor-only`), started in their own
session so Ctrl+C can end the active variant together with all of its worker processes.
"""

from __future__ import annotations

import argparse
import csv
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from raptor.suite.cases import DEFAULT_OUT_DIR, DEFAULT_PIPELINE, add_models_argument
from raptor.suite.runner import RAPTOR_COLUMNS, make_console, write_csv
from raptor.suite.runner import build_parser as runner_parser

VARIANTS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "no-sync": ("--pim-disable-synchronization",),
    "no-plan": ("--pim-disable-spatial-planning",),
    "no-sync-no-plan": ("--pim-disable-synchronization", "--pim-disable-spatial-planning"),
}
REFERENCE = "baseline"
ABLATION_COLUMNS = [
    "variant",
    "model",
    "arch",
    "mode",
    "pipeline",
    "functional_validation",
    "latency",
    "throughput",
    "power",
    "energy",
]
METRICS = {
    "latency": "raptor_latency_ms",
    "throughput": "raptor_throughput_ips",
    "power": "raptor_power_mw",
    "energy": "raptor_energy_uj",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run_ablation.py",
        allow_abbrev=False,
        description="Synchronization / spatial-planning ablation of Raptor on the pimcomp model suite. "
        "All options of run_pimcomp_models.py (--archs, --mode, --pipeline, --no-fast, --jobs, --scheduler, "
        "--raptor-extra-arg=ARG, ...) are forwarded to each variant; --only is rejected.",
    )
    p.add_argument(
        "--out-dir", default=DEFAULT_OUT_DIR, help=f"suite root (default: {DEFAULT_OUT_DIR})"
    )
    add_models_argument(p)
    p.add_argument(
        "--variant",
        action="append",
        choices=list(VARIANTS),
        metavar="NAME",
        help=f"variant to run, repeatable: {', '.join(VARIANTS)} (default: all; baseline is added when needed)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the suite-runner commands, every option spelled out (the runner's "
        "defaults included), without modifying files (default: off)",
    )
    return p


def _has_option(args: list[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def runner_defaults(forwarded: list[str]) -> list[str]:
    """The suite runner's defaults for options not forwarded (--archs, --jobs, --seed, ...),
    spelled out so that every command, and --dry-run, shows the whole case set."""
    out: list[str] = []
    for action in runner_parser()._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        name = action.option_strings[-1]
        if name in ("--out-dir", "--models") or _has_option(forwarded, name):
            continue
        if action.default in (None, [], argparse.SUPPRESS) or isinstance(action.default, bool):
            continue
        values = action.default if isinstance(action.default, list) else [action.default]
        out += [name, *(str(v) for v in values)]
    return out


def selected_variants(chosen: list[str] | None) -> list[str]:
    names = list(dict.fromkeys(chosen or VARIANTS))
    if REFERENCE not in names:
        names.insert(0, REFERENCE)  # the percentage reference is always run
    return sorted(names, key=list(VARIANTS).index)


def invocations(
    args: argparse.Namespace, forwarded: list[str], runner: list[str]
) -> list[tuple[str, str, list[str]]]:
    """(variant, part, argv) for every suite-runner invocation, in run order."""
    if _has_option(forwarded, "--mode") or _has_option(forwarded, "--pipeline"):
        parts = [("selected", [])]
    else:
        parts = [
            ("latency", ["--mode", "latency"]),
            (
                f"throughput-pipeline{DEFAULT_PIPELINE}",
                ["--mode", "throughput", "--pipeline", str(DEFAULT_PIPELINE)],
            ),
        ]
    out = []
    for v in selected_variants(args.variant):
        for part, mode_args in parts:
            argv = [
                *runner,
                "--out-dir",
                args.out_dir,
                "--models",
                *args.models,
                "--raptor-only",
                "--artifact-subdir",
                f"ablation/{v}",
                "--results-dir",
                str(Path(args.out_dir) / "ablation" / v / "parts" / part),
                "--no-chart",
                *mode_args,
                *forwarded,
                *runner_defaults(forwarded),
                *(f"--raptor-extra-arg={a}" for a in VARIANTS[v]),
            ]
            out.append((v, part, argv))
    return out


def _read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _pct(value: str, ref: str) -> str:
    try:
        v, r = float(value), float(ref)
    except (TypeError, ValueError):
        return ""
    if r == 0:
        return ""
    return f"{(v - r) / r * 100:+.2f}%"


def combine(variant_rows: dict[str, list[dict[str, str]]]) -> list[dict[str, str]]:
    """Rows of results_ablation.csv: per variant and case, % difference from the baseline case."""

    def key(r):
        return (r["model"], r["arch"], r["mode"], r["pipeline"])

    ref = {key(r): r for r in variant_rows.get(REFERENCE, [])}
    rows = []
    for v, vrows in variant_rows.items():
        for r in vrows:
            b = ref.get(key(r), {})
            row = {
                "variant": v,
                "model": r["model"],
                "arch": r["arch"],
                "mode": r["mode"],
                "pipeline": r["pipeline"],
                "functional_validation": r["raptor_functional_validation"],
            }
            for metric, col in METRICS.items():
                row[metric] = _pct(r.get(col, ""), b.get(col, ""))
            rows.append(row)
    return rows


def _run(argv: list[str]) -> int:
    """Run one suite-runner invocation in its own session; Ctrl+C/SIGTERM kill its whole group."""
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        return proc.wait()
    except BaseException:
        _kill_group(proc)
        raise


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            # the runner is gone; make sure none of its workers survive it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def _on_sigterm(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def main(argv: list[str] | None = None, runner_script: str | Path | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, forwarded = build_parser().parse_known_args(argv)
    if _has_option(forwarded, "--only"):
        print(
            "run_ablation.py: error: --only is reserved for the suite runner's comparison mode; "
            "the ablation always runs --raptor-only",
            file=sys.stderr,
        )
        return 2
    forwarded = [a for a in forwarded if a != "--raptor-only"]
    try:  # validate forwarded options with the suite runner's own parser before running anything
        runner_parser().parse_args(forwarded)
    except SystemExit as e:
        return int(e.code or 2)
    runner = (
        [sys.executable, str(runner_script)]
        if runner_script
        else [sys.executable, "-m", "raptor.suite.runner"]
    )
    plan = invocations(args, forwarded, runner)
    if args.dry_run:
        for _, _, cmd in plan:
            print(shlex.join(cmd))
        return 0

    console = make_console()
    signal.signal(signal.SIGTERM, _on_sigterm)
    out = Path(args.out_dir)
    codes: dict[str, int] = {}
    t0 = time.perf_counter()
    try:
        for i, (v, part, cmd) in enumerate(plan, 1):
            console.rule(f"[bold]ablation {i}/{len(plan)}: variant {v} ({part})")
            console.print(shlex.join(cmd), style="dim")
            t1 = time.perf_counter()
            rc = _run(cmd)
            codes[f"{v}/{part}"] = rc
            console.print(f"variant {v} ({part}) exit {rc} in {time.perf_counter() - t1:.1f} s")
    except KeyboardInterrupt:
        console.print(
            "[red]interrupted: the active variant and all of its workers were terminated[/]"
        )
        return 130

    variant_rows: dict[str, list[dict[str, str]]] = {}
    for v in selected_variants(args.variant):
        rows = []
        parts_dir = out / "ablation" / v / "parts"
        for _, part, _ in [p for p in plan if p[0] == v]:
            rows += _read_csv(parts_dir / part / "results_comparison.csv")
        variant_rows[v] = rows
        write_csv(out / "ablation" / v / "results_comparison.csv", RAPTOR_COLUMNS, rows)
        shutil.rmtree(parts_dir, ignore_errors=True)
    rows = combine(variant_rows)
    csv_path = out / "results_ablation.csv"
    write_csv(csv_path, ABLATION_COLUMNS, rows)
    try:
        from raptor.suite.charts import ablation_chart

        ablation_chart(rows, csv_path.with_suffix(".png"))
    except Exception as e:  # noqa: BLE001 - a chart failure must not hide the results
        console.print(f"[yellow]chart not written: {e}[/]")
    _print_summary(console, rows, csv_path, time.perf_counter() - t0)
    failed = [r for r in rows if r["functional_validation"] != "PASS"]
    bad_runs = [k for k, rc in codes.items() if rc not in (0, 1)]
    if failed or bad_runs or any(rc != 0 for rc in codes.values()):
        must_pass = [r for r in failed if r["variant"] in ("baseline", "no-plan")]
        console.print(
            f"[red]{len(failed)} row(s) not PASS[/] "
            f"({len(must_pass)} in baseline/no-plan, which must pass); exit 1"
        )
        return 1
    return 0


def _print_summary(console, rows, csv_path: Path, seconds: float) -> None:
    from rich.table import Table

    t = Table(title=f"ablation ({seconds:.1f} s) -> {csv_path}")
    for c in ABLATION_COLUMNS:
        t.add_column(c)
    for r in rows:
        style = None if r["functional_validation"] == "PASS" else "red"
        t.add_row(*(r[c] for c in ABLATION_COLUMNS), style=style)
    console.print(t)


if __name__ == "__main__":
    sys.exit(main())
