"""Synchronization: sync/wait tokens that order producers and consumers of host buffers.

Only host-memory data needs tokens. An edge the NoC dataflow carries (spatial/noc.py) is ordered
by its send/recv rendezvous and needs none, also across pipeline rounds (a consumer receives round
r+1's rows only after its own program restarted), so tokens guard what stays in host memory:
buffers with a host reader (residuals, flattened views, other edges the NoC cannot carry), their
lifetime across rounds (credits) and the restart of their writers.

Data tokens: for each host buffer B and each core C that reads B, every other core P that writes B
executes `sync ev, C` after its last node writing B, and C executes `wait ev, |P|` before its first
node reading B (one event register of C per buffer). With `bands=True` (Raptor) these buffer tokens
are replaced by row-band tokens (`_band_tokens`): nodes run in bands of output rows, producers sync
after each band and consumers wait, per band, only for the producer bands their windows read, so
layers overlap within one inference; the buffer tokens remain the fallback past 32 registers.

Credit tokens (throughput mode, pipeline > 1) keep B alive until its last reader is done and gate
the restart of its writers. Two placements:

* `credits=Credits.END` (Raptor): each reader C of B sends `sync ev', P` right after its LAST node
  reading B in round r, and each writer P waits `wait ev', |readers|` at the END of its round r,
  just before it restarts. No initial credit is needed, and P's round r+1 overlaps the rest of
  C's round r (C's later nodes) instead of waiting for C's whole round.
* `credits=Credits.START` (the pimcomp baseline's schedules): C sends its credit at the start of its
  program (round r+1 starts only after C finished reading B in round r) and P waits before its
  first node writing B, so round 0 runs on the initial credit.

Network inputs/outputs need no tokens (the simulator streams them per round); a buffer written and
read on one core needs none (in-order issue). Row-group reduction trees (NoC send/recv) order
themselves by rendezvous. Deadlock freedom: every core runs its nodes in topological layer order, data waits
only point to earlier layers of the same round, and an end-of-round credit wait only needs reads
of the same round (induction on round, then layer); with NoC edges, the message order
(spatial/message_order.py) simulates these tokens too, so tokens and messages share one global
order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import ClassVar

from raptor.arch import Arch
from raptor.errors import PassFailedError
from raptor.isa.opcodes import NUM_EVENT_REGISTERS
from raptor.spatial.ir import (
    BufferRole,
    ComputeNode,
    Layer,
    LayerKind,
    NodeKind,
    SpatialGraph,
    SyncToken,
    TokenKind,
)
from raptor.spatial.noc import token_views


def node_writes(sg: SpatialGraph, n: ComputeNode) -> str | None:
    """The host buffer a node stores into (None: a row group that sends its partial sum on, or a
    producer whose rows only travel over the NoC, spatial/noc.py)."""
    ly = sg.layers[n.layer]
    if n.kind == NodeKind.MVM and n.row_group > 0:
        return None
    if sg.noc is not None and ly.output.buffer not in sg.noc.host_buffers:
        return None
    return ly.output.buffer


def node_reads(sg: SpatialGraph, n: ComputeNode) -> list[str]:
    """Host buffers a node loads (only the root row group reads a fused residual; a fed unit's
    window input arrives over the NoC)."""
    return list(dict.fromkeys(v.buffer for _, v in token_views(sg, n, sg.noc)))


class Credits(StrEnum):
    """When a reader returns its credit for a buffer (module docstring)."""

    START = "start"
    END = "end"


@dataclass(frozen=True)
class SynchronizationPass:
    """Insert data and credit tokens (see module docstring); `pipeline` > 1 adds credits."""

    pipeline: int = 1
    credits: Credits = Credits.START  # module docstring
    bands: bool = False  # row-band data tokens (module docstring); falls back to buffer tokens
    name: ClassVar[str] = "synchronization"

    def apply(self, arch: Arch, sg: SpatialGraph) -> SpatialGraph:
        if self.bands:
            banded = _band_tokens(sg, self._apply(arch, sg, data=False))
            if banded is not None:
                return banded
        out = self._apply(arch, sg)
        out.notes = replace(out.notes, band_tokens=False)
        return out

    def _apply(self, arch: Arch, sg: SpatialGraph, data: bool = True) -> SpatialGraph:
        by_core = sg.nodes_by_core()
        first_read: dict[tuple[int, str], int] = {}
        last_read: dict[tuple[int, str], int] = {}
        first_write: dict[tuple[int, str], int] = {}
        last_write: dict[tuple[int, str], int] = {}
        readers: dict[str, list[int]] = {}
        writers: dict[str, list[int]] = {}
        for core, nodes in by_core.items():
            for n in nodes:
                for b in node_reads(sg, n):
                    if (core, b) not in first_read:
                        first_read[core, b] = n.id
                        readers.setdefault(b, []).append(core)
                    last_read[core, b] = n.id
                b = node_writes(sg, n)
                if b is None:
                    continue
                if (core, b) not in first_write:
                    first_write[core, b] = n.id
                    writers.setdefault(b, []).append(core)
                last_write[core, b] = n.id
        events = {c: 0 for c in by_core}

        def new_event(core: int, buf: str) -> int:
            e = events[core]
            if e >= 4 * NUM_EVENT_REGISTERS:  # virtual ids, mapped onto registers below
                raise PassFailedError(
                    f"synchronization: core {core} needs more than {NUM_EVENT_REGISTERS} event registers (at buffer {buf})"
                )
            events[core] = e + 1
            return e

        before: dict[int, list[SyncToken]] = {}
        after: dict[int, list[SyncToken]] = {}
        start: dict[int, list[SyncToken]] = {}
        end: dict[int, list[SyncToken]] = {}
        for buf in sorted(set(readers) | set(writers), key=lambda b: (b not in writers, b)):
            if sg.buffers[buf].role in (BufferRole.INPUT, BufferRole.CONST):
                continue
            ws, rs = writers.get(buf, []), readers.get(buf, [])
            for c in rs if data else ():
                others = [p for p in ws if p != c]
                if not others:
                    continue
                ev = new_event(c, buf)
                before.setdefault(first_read[c, buf], []).append(
                    SyncToken(c, TokenKind.WAIT, ev, len(others), buf)
                )
                for p in others:
                    after.setdefault(last_write[p, buf], []).append(
                        SyncToken(p, TokenKind.SYNC, ev, c, buf)
                    )
            if self.pipeline > 1 and sg.buffers[buf].role != BufferRole.OUTPUT:
                for p in ws:
                    others = [c for c in rs if c != p]
                    if not others:
                        continue
                    ev = new_event(p, buf)
                    if self.credits == Credits.END:
                        end.setdefault(p, []).append(
                            SyncToken(p, TokenKind.WAIT, ev, len(others), buf)
                        )
                        for c in others:
                            after.setdefault(last_read[c, buf], []).append(
                                SyncToken(c, TokenKind.SYNC, ev, p, buf)
                            )
                        continue
                    # the credit wait goes before the data waits of the same node
                    before.setdefault(first_write[p, buf], []).insert(
                        0, SyncToken(p, TokenKind.WAIT, ev, len(others), buf)
                    )
                    for c in others:
                        start.setdefault(c, []).append(SyncToken(c, TokenKind.SYNC, ev, p, buf))
        used = events
        if max(events.values(), default=0) > NUM_EVENT_REGISTERS:
            before, after, start, end, used = _reuse_events(sg, by_core, before, after, start, end)
        out = replace(
            sg, tokens_before=before, tokens_after=after, tokens_start=start, tokens_end=end
        )
        out.notes = replace(sg.notes, event_registers=max(used.values(), default=0))
        return out


def _reuse_events(sg: SpatialGraph, by_core, before, after, start, end):
    """Map virtual data events onto fewer registers: a register whose last wait was at a node of
    layer L can serve a later wait whose producers all sit in strict descendants of L (their syncs
    cannot arrive before that node ran, so they cannot satisfy the earlier wait). Credit events
    (synced at program start or waited at the end of the round) keep registers of their own."""
    from dataclasses import replace as _r

    nl = len(sg.layers)
    writes: dict[str, set[int]] = {}
    for ly in sg.layers:
        writes.setdefault(ly.output.buffer, set()).add(ly.index)
    children: list[set[int]] = [set() for _ in range(nl)]
    for ly in sg.layers:
        for v in ly.inputs:
            for w in writes.get(v.buffer, ()):
                if w != ly.index:
                    children[w].add(ly.index)
    desc = [0] * nl
    for i in range(nl - 1, -1, -1):
        d = 0
        for c in children[i]:
            d |= (1 << c) | desc[c]
        desc[i] = d
    layer_of = {n.id: n.layer for n in sg.nodes}
    producers: dict[tuple[int, int], int] = {}  # (reader core, virtual event) -> layer bitset
    for nid, toks in after.items():
        for t in toks:
            if t.kind == TokenKind.SYNC:
                producers[t.value, t.event] = producers.get((t.value, t.event), 0) | (
                    1 << layer_of[nid]
                )
    credit = {(t.value, t.event) for toks in start.values() for t in toks}
    credit |= {(t.core, t.event) for toks in end.values() for t in toks}
    # with credits, a producer may restart and sync a reused register again as soon as this core
    # sent its credit (after its last read of the buffer): reuse only while that read is pending
    piped = any(start.values()) or any(end.values())
    buf_of = {
        (t.core, t.event): t.buffer
        for ts in before.values()
        for t in ts
        if t.kind == TokenKind.WAIT
    }
    phys: dict[tuple[int, int], int] = {}
    used: dict[int, int] = {}
    for core, nodes in by_core.items():
        at = {n.id: k for k, n in enumerate(nodes)}
        last_read: dict[str, int] = {}
        for n in nodes:
            for b in node_reads(sg, n):
                last_read[b] = at[n.id]
        held: dict[int, list[str]] = {}
        n_reg = 0
        for c, e in sorted(k for k in credit if k[0] == core):
            phys[c, e] = n_reg
            n_reg += 1
        last: list[tuple[int, int]] = []  # (register, layer of its last wait)
        for n in nodes:
            for t in before.get(n.id, []):
                if t.kind != TokenKind.WAIT or (core, t.event) in credit:
                    continue
                need = producers.get((core, t.event), 0)
                here = at[n.id]
                for k, (r, ly) in enumerate(last):
                    if need & ~desc[ly] == 0 and (
                        not piped or all(last_read.get(b, -1) >= here for b in held[r])
                    ):
                        phys[core, t.event] = r
                        last[k] = (r, n.layer)
                        held[r].append(buf_of[core, t.event])
                        break
                else:
                    if n_reg >= NUM_EVENT_REGISTERS:
                        raise PassFailedError(
                            f"synchronization: core {core} needs more than {NUM_EVENT_REGISTERS} event registers"
                        )
                    phys[core, t.event] = n_reg
                    last.append((n_reg, n.layer))
                    held[n_reg] = [buf_of[core, t.event]]
                    n_reg += 1
        used[core] = n_reg

    def remap(toks: dict[int, list[SyncToken]]) -> dict[int, list[SyncToken]]:
        out = {}
        for k, ts in toks.items():
            out[k] = [
                _r(t, event=phys[(t.value if t.kind == TokenKind.SYNC else t.core), t.event])
                for t in ts
            ]
        return out

    return remap(before), remap(after), remap(start), remap(end), used


BAND_MAX = 32  # at most this many row bands per node (each band is >= one output row)


def node_bands(sg: SpatialGraph, n: ComputeNode) -> list[tuple[int, int]]:
    """Output pixel bands of a node in program order: whole output rows, at most BAND_MAX."""
    ly = sg.layers[n.layer]
    if ly.kind == LayerKind.TENSOR:
        return [(n.p0, n.p1)]
    w = max(1, ly.output.width)
    cuts = list(range((n.p0 // w + 1) * w, n.p1, w))
    step = -(-(len(cuts) + 1) // BAND_MAX)
    cuts = cuts[step - 1 :: step] if step > 1 else cuts
    edges = [n.p0, *cuts, n.p1]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def input_need(ly: Layer, k: int, a: int, b: int) -> tuple[int, int] | None:
    """Input pixels [lo, hi) of view `ly.inputs[k]` that output pixels [a, b) of layer `ly` read
    (None: all of them / unknown geometry)."""
    v, o = ly.inputs[k], ly.output
    if ly.kind == LayerKind.TENSOR or v.chw is not None:
        return None
    if k == 1 or ly.kind in (LayerKind.ADD, LayerKind.ACT):
        return (a, b) if v.pixels == o.pixels else None
    kh, kw = ly.kernel_shape
    sh = ly.strides[0]
    pt = ly.pads[0]
    ow = max(1, o.width)
    y0 = max(0, (a // ow) * sh - pt)
    y1 = min(v.height - 1, ((b - 1) // ow) * sh - pt + kh - 1)
    if y1 < y0:
        return (0, 0)
    return (y0 * v.width, (y1 + 1) * v.width)


def _band_tokens(sg: SpatialGraph, base: SpatialGraph) -> SpatialGraph | None:
    """Replace the buffer-granular data tokens of `base` (credits kept) by row-band tokens.

    Every writer core P of a buffer that core C reads syncs register e(C, P) after each of its
    bands (in P's program order) that write a buffer C reads, up to the last band C needs; C waits,
    before each of its own bands, for the count of P's bands up to the last one that overlaps the
    input rows the band's windows read (consume semantics: wait for the increment over what C
    already consumed). One register per (C, P) pair: P's syncs arrive in its program order, so a
    single counter orders every buffer P writes for C; per round C's waits consume exactly P's
    syncs (balanced), and P restarts only after C's end-of-round credits. Returns None when a
    core would need more than NUM_EVENT_REGISTERS registers (caller keeps buffer tokens)."""
    by_core = sg.nodes_by_core()
    bands = {n.id: node_bands(sg, n) for n in sg.nodes}
    skip = {b for b, buf in sg.buffers.items() if buf.role in (BufferRole.INPUT, BufferRole.CONST)}
    # producer bands per (core, buffer): (sequence index on the core, q0, q1) in program order
    seq: dict[int, list[tuple[int, int, str]]] = {}  # core -> [(node id, band, buffer)]
    wr: dict[tuple[int, str], list[tuple[int, int, int]]] = {}
    writers: dict[str, set[int]] = {}
    for core, nodes in by_core.items():
        lst = seq.setdefault(core, [])
        for n in nodes:
            buf = node_writes(sg, n)
            if buf is None or buf in skip:
                continue
            writers.setdefault(buf, set()).add(core)
            for i, (q0, q1) in enumerate(bands[n.id]):
                wr.setdefault((core, buf), []).append((len(lst), q0, q1))
                lst.append((n.id, i, buf))
    # buffers whose writers all map output pixel q to element offset + q * stride (else: a
    # reader needs all of every writer's bands)
    wviews: dict[str, list] = {}
    for ly in sg.layers:
        wviews.setdefault(ly.output.buffer, []).append(ly)
    geo = {
        b: (lys[0].output.pixels, lys[0].output.pixel_stride)
        for b, lys in wviews.items()
        if all(
            ly.kind != LayerKind.TENSOR
            and ly.output.chw is None
            and (ly.output.pixels, ly.output.pixel_stride)
            == (lys[0].output.pixels, lys[0].output.pixel_stride)
            for ly in lys
        )
    }
    credit_regs: dict[int, int] = {}
    for toks in (*base.tokens_start.values(), *base.tokens_end.values()):
        for t in toks:
            c = t.value if t.kind == TokenKind.SYNC else t.core
            credit_regs[c] = max(credit_regs.get(c, 0), t.event + 1)
    before: dict[tuple[int, int], list[SyncToken]] = {}
    after: dict[tuple[int, int], list[SyncToken]] = {}
    used: dict[int, int] = {}
    for c, nodes in by_core.items():
        reads: set[str] = set()
        for n in nodes:
            reads.update(b for b in node_reads(sg, n) if b not in skip)
        # P's bands writing a buffer C reads, renumbered 0.. in P's program order
        pos: dict[int, dict[int, int]] = {}
        for p in sorted({p for b in reads for p in writers.get(b, ()) if p != c}):
            idx = [k for k, (_, _, b) in enumerate(seq[p]) if b in reads]
            pos[p] = {k: j for j, k in enumerate(idx)}
        # what each band of C needs from each producer core (count of its bands, cumulative)
        needs: list[tuple[int, int, dict[int, int]]] = []  # (node id, band, {P: target})
        nodes_of: dict[int, set[int]] = {}  # P -> C's nodes that need it
        for n in nodes:
            ly = sg.layers[n.layer]
            views = token_views(sg, n, sg.noc)
            for i, (a, b) in enumerate(bands[n.id]):
                target: dict[int, int] = {}
                for k, v in views:
                    if v.buffer in skip:
                        continue
                    need = input_need(ly, k, a, b)
                    if geo.get(v.buffer) != (v.pixels, v.pixel_stride):
                        need = None
                    for p in writers.get(v.buffer, ()):
                        if p == c:
                            continue
                        for s, q0, q1 in wr[p, v.buffer]:
                            if need is None or (q0 < need[1] and q1 > need[0]):
                                target[p] = max(target.get(p, 0), pos[p][s] + 1)
                for p in target:
                    nodes_of.setdefault(p, set()).add(n.id)
                needs.append((n.id, i, target))
        # over budget: producers needed by one node of C only share one register per node, and
        # C waits once, before that node, for each of them to finish what C needs (safe: they
        # sit in earlier layers, and C's earlier nodes are done by then)
        budget = NUM_EVENT_REGISTERS - credit_regs.get(c, 0)
        solo = set(nodes_of)
        groups: dict[int, set[int]] = {}
        while len(solo) + len(groups) > budget:
            cand: dict[int, set[int]] = {}
            for p in solo:
                if len(nodes_of[p]) == 1:
                    cand.setdefault(next(iter(nodes_of[p])), set()).add(p)
            best = max(
                cand.items(), key=lambda kv: len(kv[1]) - (kv[0] not in groups), default=None
            )
            if best is None or len(best[1]) - (best[0] not in groups) <= 0:
                return None
            groups.setdefault(best[0], set()).update(best[1])
            solo -= best[1]
        reg = {p: credit_regs.get(c, 0) + i for i, p in enumerate(sorted(solo))}
        greg = {nid: credit_regs.get(c, 0) + len(reg) + i for i, nid in enumerate(sorted(groups))}
        used[c] = credit_regs.get(c, 0) + len(reg) + len(greg)
        done = dict.fromkeys(pos, 0)
        first_band: dict[int, int] = {}
        for nid, i, target in needs:
            toks = []
            for p, t in sorted(target.items()):
                if p in solo and t > done[p]:
                    toks.append(SyncToken(c, TokenKind.WAIT, reg[p], t - done[p], "band"))
                done[p] = max(done[p], t)
            if nid in groups and nid not in first_band:
                first_band[nid] = i
                toks.insert(
                    0, SyncToken(c, TokenKind.WAIT, greg[nid], len(groups[nid]), "band-group")
                )
            if toks:
                before[nid, i] = toks
        for p, total in done.items():
            if total == 0:
                continue
            ordered = sorted(pos[p].items(), key=lambda kv: kv[1])
            if p not in solo:  # one sync after the last band C needs
                (nid,) = nodes_of[p]
                k = ordered[total - 1][0]
                g_nid, bi, buf = seq[p][k]
                after.setdefault((g_nid, bi), []).append(
                    SyncToken(p, TokenKind.SYNC, greg[nid], c, buf)
                )
                continue
            for k, j in ordered:
                if j >= total:
                    break
                nid, bi, buf = seq[p][k]
                after.setdefault((nid, bi), []).append(SyncToken(p, TokenKind.SYNC, reg[p], c, buf))
    res = replace(  # `base` holds the credit tokens only
        base,
        bands=bands,
        band_before=before,
        band_after=after,
    )
    res.notes = replace(base.notes, event_registers=max(used.values(), default=0), band_tokens=True)
    return res
