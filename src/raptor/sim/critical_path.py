"""The critical path of a traced run: the chain of work that set its latency, walked back from
the last instruction to time 0.

From the slice that ends last, the walk steps back along its core. Time a core spent working is
put on the path (its layer, its category: CATEGORIES). A stall is time
the core waited for another, so the walk leaves the core there for the one it waited on and
keeps the time:

* a recv stall before a recv: for the sender (the flow into that recv),
* a recv stall before a send (pimsim-nn's rendezvous: the send waits for its receiver): for the
  receiver, unless the receiver was already waiting at its recv of this very message; the stall
  is then the rendezvous' own request and ready flits, queued behind what the two switches still
  ship (`send wait`). A receiver blocked at a recv from a third core (its program receives in an
  order the run did not follow) holds the sender up, so the walk follows it to that core,
* a sync stall: for the core whose sync released the wait, at the time of that sync (the
  sync flit's way to the waiting core is `local`).

A memory stall (the global-memory queue) stays on the core: it is waiting for the machine, not
for another core's program. Cycles between two slices of a core (dispatch, retire) are `other`.
Every nanosecond of the latency is thus put on exactly one layer and category, and the layer
table (raptor.sim.layers) shows how much of the latency each layer held: a layer that is long
on the path but busy on few of its cores for the rest of the run bounds the run.

The path also comes as its chain of cores (`segments`): time-ordered runs of the path on one
core and one layer, each with its interval and its time by category, which tile [0, length] and
sum to the totals; `format_segments` prints them as a table (`raptor inspect DIR --path`).

Needs one track per core (rob_size 1, the value of every shipped architecture): with more
instructions in flight per core the chain through a core is not one sequence of slices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raptor.sim.trace import (
    FLOW_SEND,
    FLOW_SYNC,
    LD,
    LOCAL,
    MVMUL,
    RECV,
    SEND,
    ST,
    STALL_MEMORY,
    STALL_RECV,
    STALL_SYNC,
    SYNC,
    TRACK_STRIDE,
    VECTOR,
    WAIT,
    slice_spans,
)

CATEGORIES = (
    "matrix",  # mvmul
    "vector",  # vector instructions
    "send",
    "recv",
    "send wait",  # a send stalled with its receiver already waiting: request and ready flits,
    # behind the messages its switch still ships
    "local",  # lldi/lmv, sync, wait
    "memory",  # ld/st through the global memory
    "memory stall",  # waiting for the global-memory queue
    "other",  # cycles between slices, and waits whose releaser the trace does not name
)
# category of every slice kind (raptor.sim.trace kinds; stalls are resolved by the walk)
_KIND_CAT = {
    kind: CATEGORIES.index(cat)
    for kind, cat in (
        (MVMUL, "matrix"),
        (VECTOR, "vector"),
        (SEND, "send"),
        (RECV, "recv"),
        (LOCAL, "local"),
        (SYNC, "local"),
        (WAIT, "local"),
        (LD, "memory"),
        (ST, "memory"),
        (STALL_MEMORY, "memory stall"),
    )
}
_OTHER, _LOCAL, _SEND_WAIT = (CATEGORIES.index(c) for c in ("other", "local", "send wait"))
_EPS = 1e-6


def _groups(keys: np.ndarray) -> list[tuple[int, int, int]]:
    """(key, first, end) of every run of equal values in sorted `keys`."""
    uniq, first = np.unique(keys, return_index=True)
    ends = list(first[1:]) + [len(keys)]
    return [(int(k), int(a), int(b)) for k, a, b in zip(uniq, first, ends)]


class _Track:
    """One track's slices (sorted by start) for `last_before` lookups."""

    def __init__(self, idx: np.ndarray, s: np.ndarray):
        self.idx = idx
        self.start = s["start"][idx]

    def last_before(self, t: float) -> int:
        """Index (into the whole slice array) of the last slice starting before t, or -1."""
        k = int(np.searchsorted(self.start, t - _EPS, side="left")) - 1
        return int(self.idx[k]) if k >= 0 else -1


def _rendezvous_partner(s: np.ndarray, i: int, into: _Flows, out_of: _Flows) -> tuple[int, bool]:
    """(core, sending) that the recv stall slice `i` waits on: the sender of the recv after it,
    or the receiver of the send after it (sending True); (-1, False) if the trace names none."""
    track = int(s["track"][i])
    nxt = i + 1 if i + 1 < len(s) and int(s["track"][i + 1]) == track else -1
    if nxt < 0:
        return -1, False
    lo, hi = float(s["end"][i]), float(s["end"][nxt])
    if int(s["kind"][nxt]) == RECV:
        return into.partner(track, lo, hi)[0], False
    if int(s["kind"][nxt]) == SEND:
        return out_of.partner(track, lo, hi)[0], True
    return -1, False


class _Flows:
    """Flow ends of one kind by the track they start or end on, sorted by time."""

    def __init__(
        self, flows: np.ndarray, track_col: str, time_col: str, other_col: str, other_time: str
    ):
        self.by: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if not len(flows):
            return
        f = flows[np.lexsort((flows[time_col], flows[track_col]))]
        for tr, a, b in _groups(f[track_col]):
            self.by[tr] = (f[time_col][a:b], f[other_col][a:b], f[other_time][a:b])

    def partner(self, track: int, lo: float, hi: float) -> tuple[int, float]:
        """(track, time) of the other end of a flow end on `track` inside [lo, hi], or (-1, 0)."""
        got = self.by.get(track)
        if got is None:
            return -1, 0.0
        times, other, when = got
        k = int(np.searchsorted(times, lo - _EPS, side="left"))
        if k < len(times) and times[k] <= hi + _EPS:
            return int(other[k]), float(when[k])
        return -1, 0.0


_FLOW_DTYPE = np.dtype(
    [("kind", "<i4"), ("src", "<i8"), ("src_ns", "<f8"), ("dst", "<i8"), ("dst_ns", "<f8")]
)


def critical_path(report: Any, meta: dict) -> dict[str, Any] | None:
    """The critical path of a traced run (module docstring): `length_ns` (the latency the walk
    covered, the run's end), `by_layer` (layer name -> category -> ns; "-" for instructions
    outside any layer), `by_category` (category -> ns), `core_changes` (how often the path
    moved to another core), `cores` (distinct cores on it) and `segments` (the chain itself,
    earliest first: runs of the path on one core and layer, `_segments`). None when the run was
    not traced or has more than one track per core."""
    tr = getattr(report, "trace", None)
    if tr is None:
        return None
    s = tr.arrays()
    if not len(s) or (s["track"] >= TRACK_STRIDE).any():
        return None
    layer, _ = slice_spans(s, meta)
    names = list((meta.get("layer_spans") or {}).get("layers", []))
    flows = np.array(tr.flows, dtype=_FLOW_DTYPE)
    sends = flows[flows["kind"] == FLOW_SEND]
    syncs = flows[flows["kind"] == FLOW_SYNC]
    into = _Flows(sends, "dst", "dst_ns", "src", "src_ns")  # a recv's sender
    out_of = _Flows(sends, "src", "src_ns", "dst", "dst_ns")  # a send's receiver
    released = _Flows(syncs, "dst", "dst_ns", "src", "src_ns")  # a wait's sync
    tracks = {t: _Track(np.arange(a, b), s) for t, a, b in _groups(s["track"])}  # s: by track

    acc = np.zeros((len(names) + 1, len(CATEGORIES)))  # last row: outside any layer
    pieces: list[tuple[int, int, float, float, int]] = []  # (track, layer, from, to, category)
    last = int(np.argmax(s["end"]))
    track, t = int(s["track"][last]), float(s["end"][last])
    end = t
    changes, hops, seen = 0, 0, {track}
    while t > _EPS:
        i = tracks[track].last_before(t)
        if i < 0:  # the core had not started yet: idle before its first instruction
            acc[-1, _OTHER] += t
            pieces.append((track, -1, 0.0, t, _OTHER))
            break
        a, b = float(s["start"][i]), float(s["end"][i])
        ly = int(layer[i]) if layer[i] >= 0 else -1
        if b < t - _EPS:  # dispatch and retire cycles between slices
            acc[ly, _OTHER] += t - b
            pieces.append((track, ly, b, t, _OTHER))
            t = b
            continue
        kind = int(s["kind"][i])
        partner, sending = -1, False
        if kind == STALL_SYNC:  # the flow ends inside the stall itself, from the sync's time
            partner, when = released.partner(track, a, b)
            if partner >= 0 and partner != track and partner in tracks and a < when < t:
                acc[ly, _LOCAL] += t - when  # the sync's flit on its way
                pieces.append((track, ly, when, t, _LOCAL))
                track, t = partner, when
                changes += 1
                seen.add(track)
                continue
        elif kind == STALL_RECV:
            partner, sending = _rendezvous_partner(s, i, into, out_of)
        if partner >= 0 and partner != track and partner in tracks and hops <= len(tracks):
            # a send's stall is its own (`send wait`) only if the receiver was waiting at its recv
            # of this very message; a receiver blocked at a recv from another core (a message
            # order that the run did not follow), or at anything else, holds the sender up
            j = tracks[partner].last_before(t)
            waited_on_us = (
                sending
                and j >= 0
                and int(s["kind"][j]) == STALL_RECV
                and _rendezvous_partner(s, j, into, out_of) == (track, False)
            )
            if not waited_on_us:
                track = partner  # the waited-on core, at the same time
                changes += 1
                hops += 1
                seen.add(track)
                continue
            arrived = float(s["start"][j])
            if arrived > a + _EPS:  # until the receiver reached that recv, the send waited for it
                acc[ly, _SEND_WAIT] += t - arrived
                pieces.append((track, ly, arrived, t, _SEND_WAIT))
                track, t = partner, arrived
                changes += 1
                hops = 0
                seen.add(track)
                continue
        hops = 0
        if sending and partner >= 0:
            cat = _SEND_WAIT  # its receiver was waiting for it before it came
        else:
            cat = _KIND_CAT.get(kind, _OTHER)
        acc[ly, cat] += t - a
        pieces.append((track, ly, a, t, cat))
        t = a
    by_layer: dict[str, dict[str, float]] = {}
    for k in range(len(acc)):
        if acc[k].any():
            name = names[k] if k < len(names) else "-"
            by_layer[name] = {c: float(v) for c, v in zip(CATEGORIES, acc[k]) if v}
    return {
        "length_ns": end,
        "by_layer": by_layer,
        "by_category": {c: float(v) for c, v in zip(CATEGORIES, acc.sum(axis=0))},
        "core_changes": changes,
        "cores": len(seen),
        "segments": _segments(pieces, names),
    }


def _segments(
    pieces: list[tuple[int, int, float, float, int]], names: list[str]
) -> list[dict[str, Any]]:
    """The walk's pieces (track, layer index or -1, from, to, category; latest first, each
    ending where the one before it in the list starts) as time-ordered runs on one core and one
    layer: {"core", "layer" ("-" outside any layer), "start_ns", "end_ns", "by_category"}."""
    if not pieces:
        return []
    track, layer, lo, hi, cat = (np.array(col) for col in zip(*reversed(pieces)))
    new = np.ones(len(track), dtype=bool)  # the pieces that start a run
    new[1:] = (track[1:] != track[:-1]) | (layer[1:] != layer[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(track)) - 1
    cats = np.zeros((len(first), len(CATEGORIES)))
    np.add.at(cats, (np.cumsum(new) - 1, cat), hi - lo)
    return [
        {
            "core": int(track[i]),
            "layer": names[layer[i]] if layer[i] >= 0 else "-",
            "start_ns": float(lo[i]),
            "end_ns": float(hi[j]),
            "by_category": {c: float(v) for c, v in zip(CATEGORIES, row) if v},
        }
        for i, j, row in zip(first.tolist(), last.tolist(), cats)
    ]


def format_path(path: dict[str, Any]) -> str:
    """One line: the critical path's length, its cores and its time by category (us)."""
    parts = ", ".join(f"{k} {v / 1e3:.1f}" for k, v in path["by_category"].items() if v)
    return (
        f"critical path {path['length_ns'] / 1e3:.1f} us over {path['cores']} cores "
        f"({path['core_changes']} changes of core), us: {parts}"
    )


def format_segments(path: dict[str, Any], min_ns: float = 0.0, limit: int | None = None) -> str:
    """The critical path's chain of cores as a table, one line per segment (`critical_path`'s
    `segments`, earliest first): core, layer, start, end and length in us, and its two largest
    categories. Segments shorter than `min_ns`, and with `limit` all but the `limit` longest,
    are folded: a last line says how many and how much time they held."""
    segs = path.get("segments") or []
    keep = [k for k, g in enumerate(segs) if g["end_ns"] - g["start_ns"] >= min_ns]
    cut = 0
    if limit is not None and len(keep) > limit:
        longest = sorted(keep, key=lambda k: segs[k]["start_ns"] - segs[k]["end_ns"])[:limit]
        cut, keep = len(keep) - limit, sorted(longest)
    shown = [segs[k] for k in keep]
    num = max([len(f"{g['end_ns'] / 1e3:.1f}") for g in shown] + [8])
    # core, three numbers, two categories ("memory stall " + us) and the separators
    rest = 4 + 3 * (num + 1) + 2 * (14 + num) + 3
    width = max(8, min(max([len(g["layer"]) for g in shown] + [5]), 99 - rest))
    lines = [
        f"{'core':>4} {'layer':<{width}} {'start us':>{num}} {'end us':>{num}} "
        f"{'us':>{num}}  largest categories, us"
    ]
    for g in shown:
        name = g["layer"] if len(g["layer"]) <= width else ".." + g["layer"][2 - width :]
        top = sorted(g["by_category"].items(), key=lambda kv: -kv[1])[:2]
        cats = [f"{c} {v / 1e3:.1f}" for c, v in top]
        lines.append(
            f"{g['core']:>4} {name:<{width}} {g['start_ns'] / 1e3:>{num}.1f} "
            f"{g['end_ns'] / 1e3:>{num}.1f} {(g['end_ns'] - g['start_ns']) / 1e3:>{num}.1f}  "
            + " ".join(f"{c:<{14 + num}}" for c in cats).rstrip()
        )
    kept = set(keep)
    folded = [g for k, g in enumerate(segs) if k not in kept]
    held = sum(g["end_ns"] - g["start_ns"] for g in folded)
    why = f"shorter than {min_ns / 1e3:g} us" + (f", or past the {limit} longest" if cut else "")
    lines.append(
        f"{len(folded)} of {len(segs)} segments folded ({why}): {held / 1e3:.1f} us of the "
        f"path's {path['length_ns'] / 1e3:.1f} us"
    )
    return "\n".join(lines)
