"""Per-layer figures: the compile report's plan (replicas, cores, estimated ns per layer) joined
with what a traced simulation measured for each layer (busy and stalled time on its cores, when
it ran, and how much of the run's critical path it held: raptor.sim.critical_path), so the
bottleneck layer is one look away. Needs the layer spans that Raptor's codegen records in
config.json (`layer_spans`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from raptor.errors import SimulationError
from raptor.sim.critical_path import critical_path, format_path
from raptor.sim.trace import KIND_COUNTER, MVMUL, TRACK_STRIDE, VECTOR, slice_spans

_STALL = np.array([c.startswith("stall_") for c in KIND_COUNTER])
LAYERS_FILE = "layers.json"
# layers.json of another format is recomputed, never misread (4: segments, 5: progress_ns)
LAYERS_FORMAT = 5
# shares of a layer's matrix + vector work whose completion times progress_ns gives
PROGRESS_SHARES = (0.25, 0.5, 0.75, 1.0)


def layer_rows(
    report, meta: dict, compile_report: dict, path: dict | None = None
) -> list[dict[str, Any]]:
    """One row per layer in program order. Measured figures are per inference (throughput mode:
    totals over the run / pipeline): busy_max_node_ns is the largest busy time (matrix + vector +
    transfer) of one of the layer's compute nodes (each pixel chunk of a replica is a node), the
    measured counterpart of the planner's estimate (its slowest node); busy_max_core_ns is the
    same summed per core (a core holds every chunk of a replica's row group and may hold more of
    the layer's nodes), what bounds a pipeline; busy_ns and stall_ns sum over its
    cores; start_ns/end_ns bound its matrix and vector slices (over all rounds), when it
    computes; progress_ns gives when its matrix and vector slices had done each share of
    PROGRESS_SHARES of their busy time (the last is end_ns), how it kept up with its producers;
    path_ns is its time on the run's critical path (raptor.sim.critical_path), and
    path that time by category (None for both when the trace has more than one track per
    core). `path`: the run's critical path when the caller already has it."""
    spans = meta.get("layer_spans")
    if not spans:
        raise SimulationError(
            "per-layer figures need the layer spans Raptor's codegen records in pim/config.json "
            f"(this program was compiled by {meta.get('compiler', 'another compiler')})"
        )
    names = spans["layers"]
    s = report.trace.arrays()
    layer, span = slice_spans(s, meta)
    core = s["track"] % TRACK_STRIDE
    stall = _STALL[s["kind"]]
    rounds = max(1, report.pipeline)
    n = len(names)
    busy = np.zeros((n, len(report.per_core)))
    stalls = np.zeros(n)
    keep = layer >= 0
    np.add.at(busy, (layer[keep & ~stall], core[keep & ~stall]), s["busy"][keep & ~stall])
    node_busy = np.bincount(span[keep & ~stall], weights=s["busy"][keep & ~stall])
    node_layer = np.full(len(node_busy), -1, dtype=np.int64)
    node_layer[span[keep]] = layer[keep]
    busy_node = np.zeros(n)
    np.maximum.at(busy_node, node_layer[node_layer >= 0], node_busy[node_layer >= 0])
    np.add.at(stalls, layer[keep & stall], s["busy"][keep & stall])
    start = np.full(n, np.inf)
    end = np.full(n, -np.inf)
    work = keep & np.isin(s["kind"], (MVMUL, VECTOR))
    np.minimum.at(start, layer[work], s["start"][work])
    np.maximum.at(end, layer[work], s["end"][work])
    progress = progress_times(layer[work], s["end"][work], s["busy"][work], n)
    path = critical_path(report, meta) if path is None else path
    on_path = path["by_layer"] if path is not None else {}
    reps = compile_report.get("replication", {})
    cores = compile_report.get("layer_cores") or _span_cores(spans)
    est = compile_report.get("estimated_layer_ns", {})
    rows = []
    for i, name in enumerate(names):
        ran = np.isfinite(start[i])
        rows.append(
            {
                "layer": name,
                "replicas": reps.get(name),
                "cores": len(cores[name]) if name in cores else None,
                "estimated_ns": est.get(name),
                "busy_max_node_ns": float(busy_node[i]) / rounds,
                "busy_max_core_ns": float(busy[i].max()) / rounds,
                "busy_ns": float(busy[i].sum()) / rounds,
                "stall_ns": float(stalls[i]) / rounds,
                "start_ns": float(start[i]) if ran else None,
                "end_ns": float(end[i]) if ran else None,
                "progress_ns": [float(t) for t in progress[i]] if ran else None,
                "path_ns": sum(on_path.get(name, {}).values()) / rounds if path else None,
                "path": {k: v / rounds for k, v in on_path.get(name, {}).items()} if path else None,
            }
        )
    return rows


def progress_times(
    layer: np.ndarray, end: np.ndarray, busy: np.ndarray, n: int, shares=PROGRESS_SHARES
) -> np.ndarray:
    """(n, len(shares)) array: for each of n layers, the end time of the slice with which the
    layer's cumulative busy time (its slices taken in order of their ends) first reaches each
    share of its total; NaN for a layer without slices. A slice counts whole at its end, so a
    share is reached no earlier than it was."""
    out = np.full((n, len(shares)), np.nan)
    order = np.lexsort((end, layer))
    layer, end, busy = layer[order], end[order], busy[order]
    bounds = np.searchsorted(layer, np.arange(n + 1))
    for i in range(n):
        a, b = bounds[i], bounds[i + 1]
        if a == b:
            continue
        cum = np.cumsum(busy[a:b])
        at = np.searchsorted(cum, np.asarray(shares) * cum[-1] * (1 - 1e-12))
        out[i] = end[a:b][np.minimum(at, b - a - 1)]
    return out


def format_progress(rows: list[dict[str, Any]], title: str = "") -> str:
    """When each layer had done a quarter, half, three quarters and all of its matrix + vector
    work (progress_ns), and how long its last quarter took: a layer whose last quarter is long
    computed it after its producers ended."""
    width = max([len(r["layer"]) for r in rows] + [5])
    heads = [f"{int(q * 100)} % us" for q in PROGRESS_SHARES[:-1]] + ["done us"]
    lines = [title] if title else []
    lines.append(
        f"{'layer':<{width}} {'replicas':>8} "
        + " ".join(f"{h:>9}" for h in heads)
        + f" {'last quarter us':>15}"
    )
    for r in rows:
        reps = "-" if r["replicas"] is None else str(int(r["replicas"]))
        if r.get("progress_ns") is None:
            lines.append(f"{r['layer']:<{width}} {reps:>8} not run")
            continue
        t = [v / 1e3 for v in r["progress_ns"]]
        lines.append(
            f"{r['layer']:<{width}} {reps:>8} "
            + " ".join(f"{v:>9.1f}" for v in t)
            + f" {t[-1] - t[-2]:>15.1f}"
        )
    lines.append(
        "time at which each layer's matrix and vector slices had done that share of their busy "
        "time (over all rounds in throughput mode); last quarter: done minus 75 %"
    )
    return "\n".join(lines)


def _span_cores(spans: dict) -> dict[str, list[int]]:
    """Cores holding each layer, from the layer spans (when the compile report has no
    layer_cores, as pimcomp's does not)."""
    out: dict[str, list[int]] = {}
    for key, rows in spans.get("cores", {}).items():
        for _, ly in rows:
            if ly >= 0:
                cores = out.setdefault(spans["layers"][ly], [])
                if int(key[4:]) not in cores:
                    cores.append(int(key[4:]))
    return out


def format_layer_rows(
    rows: list[dict[str, Any]], title: str = "", path: dict[str, Any] | None = None
) -> str:
    """The per-layer table as text; the layer with the largest busy time on one core is marked.
    With `path` (raptor.sim.critical_path), a last line breaks the critical path down."""
    top = max(range(len(rows)), key=lambda i: rows[i]["busy_max_core_ns"], default=-1)
    width = max([len(r["layer"]) for r in rows] + [5])

    def f(v, scale=1e3):
        return "-" if v is None else f"{v / scale:.1f}"

    def i_(v):
        return "-" if v is None else str(int(v))

    lines = [title] if title else []
    lines.append(
        f"{'layer':<{width}} {'replicas':>8} {'cores':>5} {'est. us':>9} {'busy/node us':>12} "
        f"{'busy/core us':>12} "
        f"{'busy us':>10} {'stall us':>10} {'path us':>9} {'runs from..to us':>22}"
    )
    for i, r in enumerate(rows):
        span = f"{f(r['start_ns'])}..{f(r['end_ns'])}" if r["start_ns"] is not None else "not run"
        lines.append(
            f"{r['layer']:<{width}} {i_(r['replicas']):>8} {i_(r['cores']):>5} "
            f"{f(r['estimated_ns']):>9} {f(r['busy_max_node_ns']):>12} "
            f"{f(r['busy_max_core_ns']):>12} {f(r['busy_ns']):>10} "
            f"{f(r['stall_ns']):>10} {f(r.get('path_ns')):>9} {span:>22}"
            + ("  <- bottleneck" if i == top else "")
        )
    lines.append(
        "per inference; est.: the cost model's busy time of the layer's slowest node (cost.lane_ns; "
        "the planner ranks plans by cost.plan_lane_ns); busy/node: the "
        "largest busy time (matrix + vector + transfer) measured on one of its nodes (each pixel "
        "chunk of a replica is a node of its own); busy/core: the same summed per core (a core "
        "holds all chunks of a replica's row group, and can hold several); busy, stall: over all its "
        "cores; path: time on the critical path (the chain of work that set the run's end); "
        "runs from..to: first and last matrix/vector slice (over all rounds)"
    )
    if path is not None:
        lines.append(format_path(path))
    return "\n".join(lines)


def write_layers(
    case_dir: str | Path, rows: list[dict[str, Any]], sim: dict, crit: dict | None = None
) -> Path:
    """layers.json in the case directory (temporary file, then rename); `crit`: the run's
    critical path (raptor.sim.critical_path)."""
    path = Path(case_dir) / LAYERS_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    data = {"format": LAYERS_FORMAT, "simulation": sim, "layers": rows, "critical_path": crit}
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def case_layers(
    case_dir: str | Path, arch=None, force_target: bool = False, option: str = "--layers"
) -> tuple[list[dict[str, Any]], str, dict | None]:
    """The per-layer rows of a compiled case directory (pim/ and compile_report.json): read from
    layers.json when it is newer than the program and of this format, else simulated now (traced, for the mode and
    pipeline the program was compiled for) and written there. Returns rows, a title and the
    run's critical path (None where it has none). `option`: the CLI option named in errors."""
    from raptor.arch import load_arch
    from raptor.isa.pimdir import read_pimdir
    from raptor.sim import simulate

    case_dir = Path(case_dir)
    if (case_dir / "config.json").is_file() and case_dir.name == "pim":
        case_dir = case_dir.parent  # the pim/ directory itself
    cfg = case_dir / "pim" / "config.json"
    rep_path = case_dir / "compile_report.json"
    if not cfg.is_file() or not rep_path.is_file():
        raise SimulationError(
            f"{case_dir}: {option} needs a compiled case directory (pim/ and compile_report.json)"
        )
    path = case_dir / LAYERS_FILE
    if path.is_file() and path.stat().st_mtime >= cfg.stat().st_mtime:
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            data = {}
        if data.get("format") == LAYERS_FORMAT:
            return data["layers"], _title(data["simulation"]), data.get("critical_path")
    prog = read_pimdir(case_dir / "pim")
    meta = prog.meta
    if not meta.get("layer_spans"):
        layer_rows(None, meta, {})  # raises the one-line reason
    if prog.target is None and arch is None:  # no target record: what config.json says
        mode = meta.get("mode", "latency")
        pipeline = int(meta.get("pipeline", 1)) if mode == "throughput" else 1
        report = simulate(prog, load_arch(meta["arch"]), mode, pipeline, trace=True)
    else:  # the record's target (raptor.isa.target), checked against --arch
        report = simulate(prog, arch, trace=True, force_target=force_target)
    crit = critical_path(report, meta)
    rows = layer_rows(report, meta, json.loads(rep_path.read_text()), crit)
    sim = {
        "arch": report.target.get("arch", meta.get("arch")) if report.target else meta["arch"],
        "mode": report.mode,
        "pipeline": report.pipeline,
        "latency_ns": report.latency_ns,
        "throughput_per_s": report.throughput_per_s,
    }
    write_layers(case_dir, rows, sim, crit)
    return rows, _title(sim), crit


def _title(sim: dict) -> str:
    return (
        f"per-layer plan and measurement ({sim['arch']}, {sim['mode']}, pipeline "
        f"{sim['pipeline']}; latency {sim['latency_ns'] / 1e3:.1f} us)"
    )
