"""Run one case in a worker: compile, simulate (values + timing), validate, for each compiler."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import pickle
import shutil
import sys
import threading
import time
import traceback
from pathlib import Path

from raptor.frontend.files import sha256_file
from raptor.suite.cases import CaseResult, CaseSpec, CompilerResult


def _atomic_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def compile_argv(spec: CaseSpec, compiler: str, out: Path) -> list[str]:
    """The `raptor compile` command line of a case (extra args go to Raptor only)."""
    argv = [
        "compile",
        str(spec.model_path),
        "--arch",
        spec.arch,
        "--mode",
        spec.mode,
        "--pipeline",
        str(spec.pipeline),
        "--out",
        str(out),
        "--compiler",
        compiler,
    ]
    if compiler == "raptor":
        argv += list(spec.raptor_extra_args)
    return argv


def _compile(spec: CaseSpec, compiler: str, out: Path, log: io.StringIO) -> dict:
    from raptor.arch import load_arch
    from raptor.cli import build_parser, compile_options
    from raptor.compiler import compile_to_dir

    argv = compile_argv(spec, compiler, out)
    log.write("$ raptor " + " ".join(argv) + "\n")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser().parse_args(argv)
    except SystemExit:
        raise RuntimeError(
            f"bad raptor arguments: {err.getvalue().strip().splitlines()[-1]}"
        ) from None
    report_path = out / "compile_report.json"
    # the case's other variants and modes reuse this model's imported graph
    cached_model = frontend_cache(spec) if spec.fast else None
    key = {
        "argv": argv,
        "model_sha256": (
            cached_model.file_sha256 if cached_model else sha256_file(spec.model_path)
        ),
        "compiler_code": code_fingerprint(),
    }
    if spec.fast and report_path.is_file() and (out / "pim" / "config.json").is_file():
        cached = json.loads(report_path.read_text())
        if cached.get("cache_key") == key:
            log.write("compile: cached artifacts reused (fast path)\n")
            return cached
    # a compile that dies half-way must never leave a valid-looking report beside its pim/
    report_path.unlink(missing_ok=True)
    model = cached_model if cached_model is not None else args.model
    report = compile_to_dir(
        model, load_arch(args.arch), compile_options(args), out, emit_json=args.pim_emit_json
    )
    report["cache_key"] = key
    _atomic_json(report_path, report)
    return report


def frontend_cache(spec: CaseSpec):
    """The case's model file with its imported graph kept under the model's artifacts/common
    (raptor.frontend.cache), for this code."""
    from raptor.frontend.cache import CachedModel

    return CachedModel(spec.model_path, spec.common_dir, code_fingerprint())


@functools.cache
def code_fingerprint() -> str:
    """Fingerprint of the installed package: cached artifacts are reused only when they were
    compiled by exactly this code (a changed pass or arch file invalidates them)."""
    import raptor

    return tree_fingerprint(Path(raptor.__file__).resolve().parent)


def tree_fingerprint(root: Path) -> str:
    """sha256 over the relative paths and contents of every .py and .json file below root."""
    import hashlib

    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".json") and p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def run_compiler(spec: CaseSpec, compiler: str, log: io.StringIO) -> CompilerResult:
    from raptor.arch import load_arch
    from raptor.isa.pimdir import read_pimdir
    from raptor.sim import simulate
    from raptor.validation.compare import judge_outputs
    from raptor.validation.reference import ensure_reference

    res = CompilerResult(status="ERROR")
    out = spec.case_dir / compiler
    out.mkdir(parents=True, exist_ok=True)
    _sweep_stale_temps(out)
    t0 = time.perf_counter()
    report = _compile(spec, compiler, out, log)
    res.compile_s = time.perf_counter() - t0
    res.instructions = report.get("instructions_total")
    res.cores_used = report.get("cores_used")
    res.crossbars_used = report.get("crossbars_used")
    log.write(
        f"compile: {res.compile_s:.2f} s, {res.instructions} instructions, {res.cores_used} cores\n"
    )

    ref = ensure_reference(
        spec.model_path, spec.common_dir, spec.pipeline, seed=spec.seed, fast=True
    )
    arch = load_arch(spec.arch)
    t0 = time.perf_counter()
    prog = read_pimdir(out / "pim")
    sim = simulate(
        prog, arch, mode=spec.mode, pipeline=spec.pipeline, inputs=ref.inputs, trace=spec.trace
    )
    res.simulate_s = time.perf_counter() - t0
    _atomic_json(out / "sim_report.json", sim.to_dict())
    log.write(f"simulate: {res.simulate_s:.2f} s\n{sim.format()}\n")
    if spec.trace:
        _write_trace(sim, prog.meta, report, out, log)
    verdict = judge_outputs(sim.outputs, ref, spec.model_path)
    _atomic_json(out / "validation.json", verdict.to_dict())
    log.write(verdict.format() + "\n")
    res.status = verdict.status
    res.max_rel_error = verdict.max_rel
    res.latency_ms = sim.latency_ns / 1e6
    res.throughput_ips = sim.throughput_per_s
    res.power_mw = sim.power_mw
    res.energy_uj = sim.energy_per_inference_uj
    return res


def _write_trace(sim, meta: dict, report: dict, out: Path, log: io.StringIO) -> None:
    """--trace: trace.json, timeline.png and (Raptor programs) layers.json beside sim_report.json."""
    from raptor.sim.critical_path import critical_path
    from raptor.sim.layers import format_layer_rows, layer_rows, write_layers
    from raptor.sim.timeline import save_trace

    crit = critical_path(sim, meta)
    log.write(save_trace(sim, meta, out / "trace.json", out / "timeline.png", crit) + "\n")
    if meta.get("layer_spans"):
        rows = layer_rows(sim, meta, report, crit)
        info = {"arch": meta.get("arch"), "mode": sim.mode, "pipeline": sim.pipeline}
        info.update(latency_ns=sim.latency_ns, throughput_per_s=sim.throughput_per_s)
        write_layers(out, rows, info, crit)
        log.write(format_layer_rows(rows, path=crit) + "\n")


def _sweep_stale_temps(out: Path) -> None:
    """Remove temporaries an earlier attempt left when it was killed (SIGKILL skips clean-up):
    `.pim.*` staging directories of write_pimdir and `.*.tmp` files of atomic writes."""
    for p in out.glob(".*"):
        if p.is_dir() and p.name.startswith(".pim."):
            shutil.rmtree(p, ignore_errors=True)
        elif p.is_file() and p.name.endswith(".tmp"):
            p.unlink(missing_ok=True)


def run_case(spec: CaseSpec) -> CaseResult:
    """Worker entry point: never raises; errors become status ERROR with their message."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.perf_counter()
    result = CaseResult(spec=spec)
    log = io.StringIO()
    log.write(f"case {spec.key}\n")
    if os.environ.get("RAPTOR_CASE_WORKER"):
        log.write(f"runs on {os.environ['RAPTOR_CASE_WORKER']}\n")
    spec.case_dir.mkdir(parents=True, exist_ok=True)
    for compiler in ("raptor", "pimcomp"):
        if compiler not in spec.compilers:
            result.results[compiler] = CompilerResult(status="SKIPPED")
            continue
        try:
            result.results[compiler] = run_compiler(spec, compiler, log)
        except Exception as e:  # noqa: BLE001 - a case reports its error, the suite goes on
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            log.write(f"{compiler}: ERROR {type(e).__name__}: {msg}\n{traceback.format_exc()}\n")
            result.results[compiler] = CompilerResult(
                status="ERROR", error=f"{type(e).__name__}: {msg}"
            )
    result.wall_s = time.perf_counter() - t0
    log.write(f"wall time {result.wall_s:.2f} s\n")
    result.log = log.getvalue()
    tmp = spec.case_dir / ".case.log.tmp"
    tmp.write_text(result.log)
    os.replace(tmp, spec.case_dir / "case.log")
    return result


def _exit_with_parent() -> None:
    """Die when the process that started us dies (a Dask worker killed with SIGKILL)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(137)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """Child-process entry (used by Dask tasks): a pickled CaseSpec on stdin, the pickled
    CaseResult written to argv[0] (temp + rename, so a killed child leaves no result)."""
    argv = sys.argv[1:] if argv is None else argv
    _exit_with_parent()
    spec = pickle.loads(sys.stdin.buffer.read())
    result = run_case(spec)
    out = Path(argv[0])
    tmp = out.with_name(out.name + ".part")
    tmp.write_bytes(pickle.dumps(result))
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
