"""`run_pimcomp_models.py`: compile, validate and simulate the model suite with Raptor and pimcomp.

Cases run through an executor (raptor.suite.executor): a spawn process pool (`--jobs N`) whose
workers ignore SIGINT, or Dask tasks (`--scheduler ADDRESS`). Ctrl+C (or SIGTERM from the
ablation wrapper) stops every queued and running case, so no worker outlives the runner, and CSVs
are only ever replaced whole (temporary file + rename).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from raptor.suite.cases import (
    DEFAULT_ARCHS,
    DEFAULT_OUT_DIR,
    DEFAULT_PIPELINE,
    CaseResult,
    CaseSpec,
    add_models_argument,
    expand_cases,
)

COMPARISON_COLUMNS = [
    "model",
    "arch",
    "mode",
    "pipeline",
    "raptor_functional_validation",
    "pimcomp_functional_validation",
    "raptor_latency_ms",
    "raptor_throughput_ips",
    "raptor_power_mw",
    "raptor_energy_uj",
    "pimcomp_latency_ms",
    "pimcomp_throughput_ips",
    "pimcomp_power_mw",
    "pimcomp_energy_uj",
    "latency_speedup",
    "throughput_ratio",
    "energy_ratio",
    "raptor_max_rel_error",
    "pimcomp_max_rel_error",
    "raptor_instructions",
    "pimcomp_instructions",
    "raptor_cores",
    "pimcomp_cores",
    "raptor_compile_s",
    "raptor_simulate_s",
    "pimcomp_compile_s",
    "pimcomp_simulate_s",
    "wall_s",
    "error",
]
# the columns of a Raptor-only run (the ablation's per-variant results_comparison.csv): the
# comparison's columns without the pimcomp figures, the ratios and the wall time (the pimcomp
# validation column stays, empty, so both files read alike)
RAPTOR_COLUMNS = [
    c
    for c in COMPARISON_COLUMNS
    if not (c.startswith("pimcomp_") and c != "pimcomp_functional_validation")
    and c not in ("latency_speedup", "throughput_ratio", "energy_ratio", "wall_s")
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run_pimcomp_models.py",
        allow_abbrev=False,
        description="Compile, validate and simulate the model suite with Raptor and pimcomp on the same chip and simulator.",
    )
    add_models_argument(p)
    p.add_argument(
        "--archs",
        nargs="+",
        default=list(DEFAULT_ARCHS),
        metavar="ARCH",
        help="architectures: arch-a, arch-b, arch-c or JSON files (default: arch-a arch-b)",
    )
    p.add_argument(
        "--mode",
        choices=("latency", "throughput"),
        default=None,
        help="run only this mode (default: latency and throughput pipeline 4)",
    )
    p.add_argument(
        "--pipeline",
        type=int,
        default=None,
        help=f"inputs streamed in throughput mode (default {DEFAULT_PIPELINE}); alone it selects throughput mode",
    )
    p.add_argument(
        "--out-dir", default=DEFAULT_OUT_DIR, help=f"suite root (default: {DEFAULT_OUT_DIR})"
    )
    p.add_argument("--jobs", type=int, default=1, help="cases run in parallel (default 1)")
    p.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="run the cases as tasks on this Dask distributed scheduler (e.g. tcp://host:8786) "
        "instead of local processes; the out-dir must be on a filesystem every worker sees "
        "(default: local processes)",
    )
    p.add_argument(
        "--no-fast",
        action="store_true",
        help="rebuild models, reference data and artifacts instead of reusing cached ones "
        "(default: off)",
    )
    p.add_argument(
        "--raptor-extra-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for `raptor compile` (repeatable), e.g. --raptor-extra-arg=--pim-disable-synchronization (default: none)",
    )
    p.add_argument(
        "--raptor-only",
        action="store_true",
        help="run Raptor only; pimcomp is not compiled, validated or simulated (SKIPPED) "
        "(default: off)",
    )
    p.add_argument(
        "--only",
        choices=("raptor", "pimcomp"),
        default=None,
        help="comparison mode: run only this compiler's side of the comparison (default: both)",
    )
    p.add_argument(
        "--input-size",
        type=int,
        default=None,
        help="model input height/width (default: each model's own)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of model weights and reference inputs (default 0)"
    )
    p.add_argument(
        "--trace",
        action="store_true",
        help="trace every simulation: trace.json (Perfetto), timeline.png and layers.json "
        "beside each case's sim_report.json (default: off)",
    )
    p.add_argument("--artifact-subdir", default="", help=argparse.SUPPRESS)
    p.add_argument("--results-dir", default=None, help=argparse.SUPPRESS)
    # the ablation's parts: their results are combined and the parts removed, so no chart
    p.add_argument("--no-chart", action="store_true", help=argparse.SUPPRESS)
    return p


def case_modes(mode: str | None, pipeline: int | None) -> list[tuple[str, int]]:
    """The (mode, pipeline) cases selected by --mode / --pipeline."""
    if mode is None and pipeline is None:
        return [("latency", 1), ("throughput", DEFAULT_PIPELINE)]
    if mode == "latency":
        if pipeline not in (None, 1):
            raise SystemExit("run_pimcomp_models.py: error: latency mode is pipeline 1")
        return [("latency", 1)]
    p = DEFAULT_PIPELINE if pipeline is None else pipeline
    if p < 1:
        raise SystemExit("run_pimcomp_models.py: error: --pipeline must be >= 1")
    if mode is None and p == 1:
        return [("latency", 1)]
    return [("throughput", p)]


def make_console():
    """A rich console; wide enough for the summary table when output is not a terminal."""
    from rich.console import Console

    probe = Console()
    return probe if probe.is_terminal else Console(width=160)


def prepare_models(specs: list[CaseSpec], console) -> None:
    """Build each model once and its reference data once, before any case runs (see
    `prepare_model`)."""
    for s, n_inputs in _models(specs).values():
        prepare_model(s, n_inputs, console)


def _models(specs: list[CaseSpec]) -> dict[str, tuple[CaseSpec, int]]:
    """Each model of specs (in the order of its first case) with that case and the most inputs
    any of its cases streams."""
    out: dict[str, tuple[CaseSpec, int]] = {}
    for s in specs:
        first, n = out.get(s.model, (s, 0))
        out[s.model] = (first, max(n, s.pipeline))
    return out


def prepare_model(s: CaseSpec, n_inputs: int, console) -> None:
    """Build the model of case s once and its reference data for n_inputs inputs; the model
    file passes the import gate (raptor.frontend.gate) first, unless the frontend cache the
    cases compile from (raptor.frontend.cache) already holds its graph: the gate passed on
    those bytes with this code when the graph was imported. With that cache (fast) the model is
    imported here, gate included, so that the first cases of the model, started together on
    several workers, load its graph instead of each importing it."""
    from raptor.models import save_model
    from raptor.suite.execute import frontend_cache
    from raptor.validation.reference import ensure_reference

    t0 = time.perf_counter()
    if not s.fast or not s.model_path.is_file() or not _model_matches(s):
        save_model(s.model, s.model_path, input_size=s.input_size, seed=s.seed)
        _write_model_key(s)
    if s.fast:
        cached = frontend_cache(s)
        if not cached.holds_graph():
            cached.load()
    else:
        from raptor.frontend.gate import check_model

        check_model(s.model_path)
    ensure_reference(s.model_path, s.common_dir, n_inputs, seed=s.seed, fast=s.fast)
    if console is not None:
        console.log(
            f"[bold]{s.model}[/]: model and reference data ready ({time.perf_counter() - t0:.1f} s)"
        )


def prepared_cases(specs: list[CaseSpec], console, failure: list[Exception]) -> Iterator[CaseSpec]:
    """The cases longest first (longest_first), each model prepared (prepare_model) just before
    its first case is handed out, so that the workers run the cases of the models already
    prepared while the next one is built. A model that cannot be prepared ends the sequence:
    its error is appended to failure and no later case is handed out."""
    models = _models(specs)
    done: set[str] = set()
    for s in longest_first(specs):
        if s.model not in done:
            try:
                prepare_model(models[s.model][0], models[s.model][1], console)
            except Exception as e:  # noqa: BLE001 - reported by the caller once the run ends
                failure.append(e)
                return
            done.add(s.model)
        yield s


def _model_key(s: CaseSpec) -> str:
    return f"input_size={s.input_size} seed={s.seed}\n"


def _model_matches(s: CaseSpec) -> bool:
    key = s.model_dir / "model.key"
    return key.is_file() and key.read_text() == _model_key(s)


def _write_model_key(s: CaseSpec) -> None:
    tmp = s.model_dir / ".model.key.tmp"
    tmp.write_text(_model_key(s))
    os.replace(tmp, s.model_dir / "model.key")


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def comparison_row(r: CaseResult) -> dict[str, str]:
    ra, pc = r.results.get("raptor"), r.results.get("pimcomp")
    row = {
        "model": r.spec.model,
        "arch": r.spec.arch,
        "mode": r.spec.mode,
        "pipeline": str(r.spec.pipeline),
    }
    for name, res in (("raptor", ra), ("pimcomp", pc)):
        row[f"{name}_functional_validation"] = res.status if res else "SKIPPED"
        for field in ("latency_ms", "throughput_ips", "power_mw", "energy_uj", "max_rel_error"):
            row[f"{name}_{field}"] = _fmt(getattr(res, field, None) if res else None)
        row[f"{name}_instructions"] = _fmt(res.instructions if res else None)
        row[f"{name}_cores"] = _fmt(res.cores_used if res else None)
        row[f"{name}_compile_s"] = _fmt(res.compile_s if res else None)
        row[f"{name}_simulate_s"] = _fmt(res.simulate_s if res else None)

    def ratio(a, b):
        return _fmt(a / b) if a and b else ""

    row["latency_speedup"] = ratio(pc.latency_ms if pc else None, ra.latency_ms if ra else None)
    row["throughput_ratio"] = ratio(
        ra.throughput_ips if ra else None, pc.throughput_ips if pc else None
    )
    row["energy_ratio"] = ratio(pc.energy_uj if pc else None, ra.energy_uj if ra else None)
    row["wall_s"] = _fmt(r.wall_s)
    row["error"] = "; ".join(f"{k}: {v.error}" for k, v in r.results.items() if v.error)
    return row


def write_csv(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for row in rows:
            w.writerow({c: row.get(c, "") for c in columns})
    os.replace(tmp, path)


def run_cases(
    specs: list[CaseSpec], executor, console, order: Iterable[CaseSpec] | None = None
) -> list[CaseResult]:
    """Run the cases through an executor (or `--jobs N` as an int) with progress, handed out
    in `order` (default: longest_first); results come back in the order of specs.

    Ctrl+C stops every queued and running case (the executor's job) and re-raises.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from raptor.suite.executor import make_executor

    if isinstance(executor, int):
        executor = make_executor(executor, None, "")
    results: list[CaseResult] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task(f"{len(specs)} cases, {executor.description}", total=len(specs))
        for res in executor.run(longest_first(specs) if order is None else order):
            results.append(res)
            status = " ".join(
                f"{k}={v.status}" for k, v in res.results.items() if v.status != "SKIPPED"
            )
            err = "; ".join(v.error for v in res.results.values() if v.error)
            progress.console.log(
                f"{res.spec.key}: {status} ({res.wall_s:.1f} s)" + (f" {err}" if err else "")
            )
            progress.advance(task)
    order = {s.key: i for i, s in enumerate(specs)}
    results.sort(key=lambda r: order[r.spec.key])
    return results


def previous_wall(spec: CaseSpec) -> float:
    """The longest wall time an earlier run of this case recorded (its case.log, or for an
    ablation case those of the other variants beside it); for a case never run, the longest of
    any other case of the same model (another arch or mode: the models' sizes rank alike);
    0.0 when none did."""
    logs = [spec.case_dir / "case.log"]
    if spec.artifact_subdir:
        logs += spec.case_dir.parent.glob("*/case.log")
    return _longest_wall(logs) or _longest_wall((spec.model_dir / "artifacts").glob("**/case.log"))


def _longest_wall(logs) -> float:
    walls = [0.0]
    for log in logs:
        try:
            text = log.read_text()
        except OSError:
            continue
        m = re.search(r"^wall time ([0-9.]+) s$", text, re.MULTILINE)
        if m:
            walls.append(float(m.group(1)))
    return max(walls)


def longest_first(specs: list[CaseSpec]) -> list[CaseSpec]:
    """The cases in the order to start them: longest first by their earlier runs
    (previous_wall), so that the last ones to finish are short and no worker waits long for
    the others at the end; the given order for cases never run (a stable sort)."""
    walls = {s.key: previous_wall(s) for s in specs}
    return sorted(specs, key=lambda s: -walls[s.key])


def summary_table(results: list[CaseResult], title: str):
    from rich.table import Table

    t = Table(title=title)
    for c in (
        "case",
        "raptor",
        "pimcomp",
        "latency ms",
        "throughput/s",
        "power mW",
        "energy uJ",
        "speedup",
        "wall s",
    ):
        t.add_column(c)
    for r in results:
        row = comparison_row(r)
        ra = r.results.get("raptor")
        t.add_row(
            r.spec.key,
            row["raptor_functional_validation"],
            row["pimcomp_functional_validation"],
            _fmt(ra.latency_ms) if ra else "",
            _fmt(ra.throughput_ips) if ra else "",
            _fmt(ra.power_mw) if ra else "",
            _fmt(ra.energy_uj) if ra else "",
            row["latency_speedup"] or row["throughput_ratio"],
            f"{r.wall_s:.1f}",
        )
    return t


def _on_sigterm(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = make_console()
    if args.jobs < 1:
        console.print("run_pimcomp_models.py: error: --jobs must be >= 1")
        return 2
    compilers: tuple[str, ...] = ("raptor", "pimcomp")
    if args.raptor_only or args.only == "raptor":
        compilers = ("raptor",)
    elif args.only == "pimcomp":
        compilers = ("pimcomp",)
    modes = case_modes(args.mode, args.pipeline)
    # absolute, so every process (pool or Dask worker, whatever its cwd) sees the same paths
    out_dir = os.path.abspath(args.out_dir)
    specs = expand_cases(
        args.models,
        args.archs,
        modes,
        out_dir=out_dir,
        compilers=compilers,
        raptor_extra_args=tuple(args.raptor_extra_arg),
        artifact_subdir=args.artifact_subdir,
        fast=not args.no_fast,
        seed=args.seed,
        input_size=args.input_size,
        trace=args.trace,
    )
    from raptor.arch import load_arch
    from raptor.errors import RaptorError
    from raptor.models import check_input_size

    try:
        for a in args.archs:
            load_arch(a)
        for m in args.models:
            check_input_size(m, args.input_size)
    except RaptorError as e:
        console.print(f"run_pimcomp_models.py: error: {e}")
        return 2
    from raptor.suite.executor import ExecutorError, make_executor

    t0 = time.perf_counter()
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        try:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            executor = make_executor(args.jobs, args.scheduler, out_dir)
        except ExecutorError as e:
            console.print(
                f"run_pimcomp_models.py: error: {e}", soft_wrap=True, highlight=False, markup=False
            )
            return 2
        with executor:
            failure: list[Exception] = []
            results = run_cases(specs, executor, console, prepared_cases(specs, console, failure))
            if failure:
                if not isinstance(failure[0], RaptorError):
                    raise failure[0]
                console.print(
                    f"run_pimcomp_models.py: error: {failure[0]}",
                    soft_wrap=True,
                    highlight=False,
                    markup=False,
                )
                return 2
    except KeyboardInterrupt:
        console.print(
            "[red]interrupted: every queued and running case stopped, no results written[/]"
        )
        return 130
    results_dir = Path(args.results_dir) if args.results_dir else Path(out_dir)
    csv_path = results_dir / "results_comparison.csv"
    write_csv(csv_path, COMPARISON_COLUMNS, [comparison_row(r) for r in results])
    try:
        if not args.no_chart:
            from raptor.suite.charts import comparison_chart

            comparison_chart(results, csv_path.with_suffix(".png"))
    except Exception as e:  # noqa: BLE001 - a chart failure must not hide the results
        console.print(f"[yellow]chart not written: {e}[/]")
    console.print(
        summary_table(results, f"suite results ({time.perf_counter() - t0:.1f} s) -> {csv_path}")
    )
    failed = [r for r in results if r.failed]
    if failed:
        console.print(
            f"[red]{len(failed)} case(s) FAIL or ERROR[/]: " + ", ".join(r.spec.key for r in failed)
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
