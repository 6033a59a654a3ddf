"""Simulation traces: what every core did when, recorded by the engine as a side channel, and
written as a Chrome trace-event / Perfetto JSON file.

The engine calls a `TraceRecorder` only when one is attached (`Engine.trace`); an untraced run
pays one `is None` check per instruction. Records are compact tuples, kept in plain lists and
turned into numpy arrays by `TraceRecorder.arrays()`:

* slices `(track, kind, start_ns, end_ns, count, busy_ns, pc)`: one per run of consecutive
  instructions of the same kind on one track (aggregated: a run of 40 mvmuls between two loads
  is one slice with count 40). A run never crosses a layer boundary (`layer_spans` in
  config.json) or a round. `busy_ns` is what the engine adds to the core's busy counters for
  those instructions; `end - start` also covers the dispatch and retire cycles between them.
  Stalls are their own slices (kinds STALL_*), with `busy_ns` the stall the engine counts.
* flows `(kind, src_track, src_ns, dst_track, dst_ns)`: send -> recv (every rendezvous) and
  sync -> wait (the sync that released a blocked wait). Each end lies inside its slice: the
  start of a 1-ns sync, else whole ns strictly inside (`inside`), so a viewer binds it there.
* counters: global-memory requests `(arrival, served)` and NoC messages `(start, arrival, bytes)`.

Tracks: with rob_size 1 a core is one track (track id = core id). With rob_size > 1 each core has
a main track (blocking instructions and stalls), a vector track, a transfer track and one track
per array group (see `track_id`).
"""

from __future__ import annotations

import bisect
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

# slice kinds
MVMUL, VECTOR, LOCAL, SYNC, LD, ST, SEND, RECV, WAIT, STALL_SYNC, STALL_RECV, STALL_MEMORY = range(
    12
)
KIND_NAMES = (
    "mvmul",
    "vector",
    "lldi/lmv",
    "sync",
    "ld",
    "st",
    "send",
    "recv",
    "wait",
    "sync stall",
    "recv stall",
    "memory stall",
)
# the engine counter (CoreStats field) each kind adds to
KIND_COUNTER = (
    "matrix_busy_ns",
    "vector_busy_ns",
    "transfer_busy_ns",
    "transfer_busy_ns",
    "transfer_busy_ns",
    "transfer_busy_ns",
    "transfer_busy_ns",
    "transfer_busy_ns",
    "transfer_busy_ns",
    "stall_sync_ns",
    "stall_recv_ns",
    "stall_memory_ns",
)
# Chrome trace category of each kind (also the heat map's classes, see raptor.sim.timeline)
KIND_CATEGORY = (
    "matrix",
    "vector",
    "transfer",
    "transfer",
    "memory",
    "memory",
    "transfer",
    "transfer",
    "transfer",
    "sync stall",
    "recv stall",
    "memory stall",
)
STALL_OF = {"sync": STALL_SYNC, "recv": STALL_RECV, "memory": STALL_MEMORY}
FLOW_SEND, FLOW_SYNC = 0, 1

# Chrome trace ids: process 1 ("chip": counters, deadlines) has thread 1; process 2 holds the
# tracks, track t as thread t + TID0. Thread ids are unique over both processes (viewers key
# threads by tid) and never 0 (the idle task's id in Linux-based viewers).
TID0 = 2


def track_of_tid(tid: int) -> int:
    return tid - TID0


# sub-tracks of a core when rob_size > 1
SUB_CORE, SUB_VECTOR, SUB_TRANSFER, SUB_AG0 = 0, 1, 2, 3
TRACK_STRIDE = 4096

CHUNK = 1 << 18  # slices kept as tuples before they are packed into an array
SLICE_DTYPE = np.dtype(
    [
        ("track", "<i8"),
        ("kind", "<i4"),
        ("start", "<f8"),
        ("end", "<f8"),
        ("count", "<i8"),
        ("busy", "<f8"),
        ("pc", "<i8"),
    ]
)

# The size cap. Runs of identical instructions are always aggregated. Past MAX_SLICES slices
# (about 180 bytes each in the JSON) the writer merges each run of core-private slices (mvmul,
# vector, lldi/lmv, sync) of one track and layer into one "compute" slice, and if that is still
# too many, every run of slices of one track and layer into one "merged" slice; merged slices
# carry the exact ns of each engine counter they cover. Counters are resampled to at most
# MAX_COUNTER_POINTS points.
MAX_SLICES = 2_000_000
MAX_COUNTER_POINTS = 20_000


def inside(start: float, end: float) -> float:
    """A time in [start, end) at least 1 ns from both ends when the span allows (flow ends)."""
    return start + math.floor((end - start) / 2)


def layer_bounds(meta: dict, core_cnt: int) -> list[list[int]]:
    """Per core, the first pc of each layer span in config.json's `layer_spans` (empty when the
    compiler did not record them)."""
    cores = (meta.get("layer_spans") or {}).get("cores", {})
    return [[int(pc) for pc, _ in cores.get(f"core{i}", [])] for i in range(core_cnt)]


def track_id(core: int, sub: int) -> int:
    """Track of (core, sub-track): the core id itself for the main track."""
    return core if sub == SUB_CORE else (sub * TRACK_STRIDE + core)


def track_core(track: int) -> int:
    return track % TRACK_STRIDE


class TraceRecorder:
    """Collects slices, flows and counters while an Engine runs (see the module docstring)."""

    def __init__(self, layer_bounds: list[list[int]] | None = None) -> None:
        self.slices: list[tuple] = []
        self.flows: list[tuple] = []
        self.gmem: list[tuple[float, float]] = []
        self.noc: list[tuple[float, float, int]] = []
        # per track: [kind, start, end, count, busy, pc0, last pc, segment end pc]
        self.open: dict[int, list] = {}
        # per core: sorted pcs where a new layer span starts (merging never crosses one)
        self.bounds = layer_bounds or []
        self._arrays: np.ndarray | None = None
        self._chunks: list[np.ndarray] = []  # slices already packed into arrays

    def _segment_end(self, core: int, pc: int) -> int:
        if core >= len(self.bounds):
            return 1 << 62
        b = self.bounds[core]
        i = bisect.bisect_right(b, pc)
        return b[i] if i < len(b) else 1 << 62

    def add(self, track: int, kind: int, start: float, end: float, busy: float, pc: int) -> None:
        """One instruction (or stall) on a track; merged into the open slice when it continues a
        run of the same kind within one layer span and round."""
        o = self.open.get(track)
        if o is None:
            seg = self._segment_end(track_core(track), pc)
            self.open[track] = [kind, start, end, 1, busy, pc, pc, seg]
            return
        same_span = o[6] < pc < o[7]  # later in the round, before the span's end
        if same_span and o[0] == kind:
            o[2] = end
            o[3] += 1
            o[4] += busy
            o[6] = pc
            return
        self._emit((track, o[0], o[1], o[2], o[3], o[4], o[5]))
        seg = o[7] if same_span else self._segment_end(track_core(track), pc)
        o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7] = kind, start, end, 1, busy, pc, pc, seg

    def stall(self, track: int, kind: int, start: float, end: float, pc: int) -> None:
        """A stall slice: never merged with a neighbour."""
        o = self.open.pop(track, None)
        if o is not None:
            self._close(track, o)
        self._emit((track, kind, start, end, 1, end - start, pc))

    def _close(self, track: int, o: list) -> None:
        self._emit((track, o[0], o[1], o[2], o[3], o[4], o[5]))

    def _emit(self, rec: tuple) -> None:
        sl = self.slices
        sl.append(rec)
        if len(sl) >= CHUNK:  # keep memory at ~52 bytes a slice on long runs
            self._chunks.append(np.array(sl, dtype=SLICE_DTYPE))
            self.slices = []

    def flow(self, kind: int, src: int, src_ns: float, dst: int, dst_ns: float) -> None:
        self.flows.append((kind, src, src_ns, dst, dst_ns))

    def finish(self) -> None:
        """Close every open slice (the engine calls this when the run ends)."""
        for track, o in list(self.open.items()):
            self._close(track, o)
        self.open.clear()

    def arrays(self) -> np.ndarray:
        """The slices as a structured array (SLICE_DTYPE), sorted by track and start (built once
        the run has finished, then cached)."""
        n = len(self.slices) + sum(len(c) for c in self._chunks)
        if self._arrays is None or len(self._arrays) != n:
            a = np.concatenate(self._chunks + [np.array(self.slices, dtype=SLICE_DTYPE)])
            self._arrays = a[np.lexsort((a["start"], a["track"]))]
        return self._arrays


# ---------------------------------------------------------------------------------------------
# Chrome trace-event / Perfetto JSON

COMPUTE_KINDS = (MVMUL, VECTOR, LOCAL, SYNC)
COMPUTE = 12  # a merged run of core-private instructions (only past the MAX_SLICES cap)
MERGED = 13  # a merged run of any slices of one layer (if still past the cap)


def slice_layers(slices: np.ndarray, meta: dict, core_cnt: int) -> np.ndarray:
    """Layer index of every slice (its first instruction's layer span), -1 where none."""
    return slice_spans(slices, meta)[0]


def slice_spans(slices: np.ndarray, meta: dict) -> tuple[np.ndarray, np.ndarray]:
    """Layer index and span id of every slice (-1, -1 outside any span). A span is one compute
    node of the compiler (a core's consecutive instructions of one node); ids are unique over
    the cores."""
    cores = (meta.get("layer_spans") or {}).get("cores", {})
    layer = np.full(len(slices), -1, dtype=np.int64)
    span = np.full(len(slices), -1, dtype=np.int64)
    tracks = slices["track"] % TRACK_STRIDE
    base = 0
    for core in np.unique(tracks):
        spans = cores.get(f"core{int(core)}")
        if not spans:
            continue
        arr = np.asarray(spans, dtype=np.int64)
        m = tracks == core
        i = np.searchsorted(arr[:, 0], slices["pc"][m], side="right") - 1
        ly = np.where(i >= 0, arr[np.maximum(i, 0), 1], -1)
        layer[m] = ly
        span[m] = np.where(ly >= 0, base + i, -1)
        base += len(arr)
    return layer, span


def _merge(
    s: np.ndarray, layers: np.ndarray, kinds: tuple[int, ...], merged_kind: int, old: list
) -> tuple[np.ndarray, np.ndarray, list]:
    """The MAX_SLICES cap: merge consecutive slices whose kinds are in `kinds` on one track and
    layer into one slice of `merged_kind`. Returns the new slices, their layers and, per slice,
    the ns per engine counter (a dict) of merged slices (None for slices kept as they are); `old`
    holds such dicts of the input slices (a second pass)."""
    if len(s) == 0:
        return s, layers, []
    comp = np.isin(s["kind"], kinds)
    prev_same = np.zeros(len(s), dtype=bool)
    prev_same[1:] = (
        comp[1:] & comp[:-1] & (s["track"][1:] == s["track"][:-1]) & (layers[1:] == layers[:-1])
    )
    first = np.flatnonzero(~prev_same)
    out = s[first].copy()
    out["end"] = np.maximum.reduceat(s["end"], first)
    out["count"] = np.add.reduceat(s["count"], first)
    sizes = np.diff(np.append(first, len(s)))
    breakdown: list = [old[i] for i in first]
    for gi in np.flatnonzero(sizes > 1):
        a, b = first[gi], first[gi] + sizes[gi]
        d: dict[str, float] = {}
        for j in range(a, b):
            part = old[j] or {KIND_COUNTER[s["kind"][j]]: float(s["busy"][j])}
            for f, v in part.items():
                d[f] = d.get(f, 0.0) + v
        breakdown[gi] = d
        out["kind"][gi] = merged_kind
        out["busy"][gi] = float(s["busy"][a:b].sum())
    return out, layers[first], breakdown


def _step_counter(times: np.ndarray, deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A step function from (time, delta) events: value after all events at each distinct time,
    resampled to at most MAX_COUNTER_POINTS points (each the maximum over its interval)."""
    if len(times) == 0:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(times, kind="stable")
    t = times[order]
    v = np.cumsum(deltas[order])
    last = np.append(t[1:] != t[:-1], True)
    t, v = t[last], v[last]
    if len(t) > MAX_COUNTER_POINTS:
        edges = np.linspace(0.0, float(t[-1]), MAX_COUNTER_POINTS + 1)
        b = np.minimum(np.searchsorted(edges, t, side="right") - 1, MAX_COUNTER_POINTS - 1)
        vmax = np.full(MAX_COUNTER_POINTS, -np.inf)
        np.maximum.at(vmax, b, v)
        # a bin without events keeps the value of the previous bin
        has = np.isfinite(vmax)
        idx = np.maximum.accumulate(np.where(has, np.arange(MAX_COUNTER_POINTS), 0))
        vmax = np.where(has, vmax, vmax[idx])
        vmax[~np.isfinite(vmax)] = 0.0
        t, v = edges[:-1], vmax
    return t, v


def _us(ns: float) -> str:
    """Microseconds with nanosecond resolution (trace-event timestamps are in us)."""
    return f"{round(ns) / 1000.0:.3f}"


def chrome_trace_events(report, meta: dict, title: str = "") -> tuple[list[str], dict]:
    """The trace's events as JSON strings (one per event) and a summary (event counts, whether
    the cap merged slices). `report` is a SimReport of a traced run."""
    tr: TraceRecorder = report.trace
    if tr is None:
        raise ValueError("the simulation was not traced")
    core_cnt = len(report.per_core)
    slices = tr.arrays()
    layers = slice_layers(slices, meta, core_cnt)
    breakdown: list = [None] * len(slices)
    capped = len(slices) > MAX_SLICES
    if capped:
        slices, layers, breakdown = _merge(slices, layers, COMPUTE_KINDS, COMPUTE, breakdown)
    if len(slices) > MAX_SLICES:
        slices, layers, breakdown = _merge(slices, layers, tuple(range(14)), MERGED, breakdown)
    names = (meta.get("layer_spans") or {}).get("layers", [])
    layer_json = [json.dumps(n) for n in names]
    ev: list[str] = []
    chip = json.dumps(title or f"chip ({report.mode}, pipeline {report.pipeline})")
    ev.append(f'{{"ph":"M","pid":1,"tid":1,"name":"process_name","args":{{"name":{chip}}}}}')
    ev.append(f'{{"ph":"M","pid":2,"tid":{TID0},"name":"process_name","args":{{"name":"cores"}}}}')
    ev.append('{"ph":"M","pid":1,"tid":1,"name":"process_sort_index","args":{"sort_index":0}}')
    ev.append(
        f'{{"ph":"M","pid":2,"tid":{TID0},"name":"process_sort_index","args":{{"sort_index":1}}}}'
    )
    tracks = sorted(
        {int(t) for t in np.unique(slices["track"])}
        | {c.core for c in report.per_core if c.instructions}
    )
    for t in tracks:
        core, sub = t % TRACK_STRIDE, t // TRACK_STRIDE
        if t == core:
            name = f"core {core}"
        elif sub == SUB_VECTOR:
            name = f"core {core} vector"
        elif sub == SUB_TRANSFER:
            name = f"core {core} transfer"
        else:
            name = f"core {core} AG {sub - SUB_AG0}"
        ev.append(
            f'{{"ph":"M","pid":2,"tid":{t + TID0},"name":"thread_name","args":{{"name":"{name}"}}}}'
        )
        ev.append(
            f'{{"ph":"M","pid":2,"tid":{t + TID0},"name":"thread_sort_index","args":{{"sort_index":{core * 64 + min(sub, 63)}}}}}'
        )
    kind_names = KIND_NAMES + ("compute", "merged")
    kind_cat = KIND_CATEGORY + ("compute", "merged")
    # whole ns on a shared grid, so adjacent slices never overlap after rounding
    t0 = np.round(slices["start"]).astype(np.int64).tolist()
    t1 = np.round(slices["end"]).astype(np.int64).tolist()
    for i, (track, kind, _, _, count, busy, pc) in enumerate(slices.tolist()):
        name = kind_names[kind] if count == 1 else f"{kind_names[kind]} x{count}"
        bd = breakdown[i]
        if bd is None:
            args = f'"{KIND_COUNTER[kind]}":{busy!r}'
        else:
            args = ",".join(f'"{k}":{v!r}' for k, v in bd.items())
        ly = int(layers[i])
        if 0 <= ly < len(layer_json):
            args += f',"layer":{layer_json[ly]}'
        ev.append(
            f'{{"ph":"X","pid":2,"tid":{track + TID0},"name":"{name}","cat":"{kind_cat[kind]}",'
            f'"ts":{t0[i] / 1e3:.3f},"dur":{(t1[i] - t0[i]) / 1e3:.3f},"args":{{"count":{count},"pc":{pc},{args}}}}}'
        )
    for i, (kind, src, src_ns, dst, dst_ns) in enumerate(tr.flows):
        name = "send->recv" if kind == FLOW_SEND else "sync->wait"
        ev.append(
            f'{{"ph":"s","pid":2,"tid":{src + TID0},"id":{i + 1},"name":"{name}","cat":"flow","ts":{_us(src_ns)}}}'
        )
        ev.append(
            f'{{"ph":"f","bp":"e","pid":2,"tid":{dst + TID0},"id":{i + 1},"name":"{name}","cat":"flow","ts":{_us(dst_ns)}}}'
        )
    counters = 0
    if tr.gmem:
        g = np.asarray(tr.gmem, dtype=np.float64)
        t, v = _step_counter(
            np.concatenate([g[:, 0], g[:, 1]]),
            np.concatenate([np.ones(len(g)), -np.ones(len(g))]),
        )
        for ti, vi in zip(t.tolist(), v.tolist()):
            ev.append(
                f'{{"ph":"C","pid":1,"tid":1,"name":"global memory queue","ts":{_us(ti)},"args":{{"requests":{int(vi)}}}}}'
            )
        counters += len(t)
    if tr.noc:
        m = np.asarray(tr.noc, dtype=np.float64)
        t, v = _step_counter(
            np.concatenate([m[:, 0], m[:, 1]]), np.concatenate([m[:, 2], -m[:, 2]])
        )
        for ti, vi in zip(t.tolist(), v.tolist()):
            ev.append(
                f'{{"ph":"C","pid":1,"tid":1,"name":"NoC bytes in flight","ts":{_us(ti)},"args":{{"bytes":{int(vi)}}}}}'
            )
        counters += len(t)
    if report.mode == "throughput":
        for r, d in enumerate(report.deadlines_ns):
            ev.append(
                f'{{"ph":"i","s":"g","pid":1,"tid":1,"name":"input {r} done","cat":"round","ts":{_us(d)}}}'
            )
        for c in report.per_core:
            for r, f in enumerate(c.finish_ns[:-1]):
                ev.append(
                    f'{{"ph":"i","s":"t","pid":2,"tid":{c.core + TID0},"name":"round {r + 1} starts","cat":"round","ts":{_us(f)}}}'
                )
    summary = {
        "slices": int(len(slices)),
        "flows": len(tr.flows),
        "counter_points": counters,
        "capped": capped,
        "events": len(ev),
    }
    return ev, summary


def write_chrome_trace(report, meta: dict, path: str | Path, title: str = "") -> dict:
    """Write the trace of a traced SimReport as Chrome trace-event JSON (opens in ui.perfetto.dev
    and chrome://tracing), atomically. Returns the summary of chrome_trace_events plus bytes."""
    path = Path(path)
    events, summary = chrome_trace_events(report, meta, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write('{"displayTimeUnit":"ns","otherData":')
            f.write(json.dumps({"generator": "raptor simulate --trace", **_other(report, meta)}))
            f.write(',"traceEvents":[\n')
            f.write(",\n".join(events))
            f.write("\n]}\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    summary["bytes"] = path.stat().st_size
    return summary


def _other(report, meta: dict) -> dict[str, Any]:
    return {
        "compiler": meta.get("compiler", ""),
        "arch": meta.get("arch", ""),
        "mode": report.mode,
        "pipeline": report.pipeline,
        "latency_ns": report.latency_ns,
        "deadlines_ns": list(report.deadlines_ns),
    }
