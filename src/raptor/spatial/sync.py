"""Synchronization: sync/wait tokens that order producers and consumers of host buffers.

Data tokens: for each host buffer B and each core C that reads B, every other core P that writes B
executes `sync ev, C` after its last node writing B, and C executes `wait ev, |P|` before its first
node reading B (one event register of C per buffer).

Credit tokens (throughput mode, pipeline > 1) keep B alive until its last reader is done and gate
the restart of its writers. Two placements:

* `credits="end"` (Raptor): each reader C of B sends `sync ev', P` right after its LAST node
  reading B in round r, and each writer P waits `wait ev', |readers|` at the END of its round r,
  just before it restarts. No initial credit is needed, and P's round r+1 overlaps the rest of
  C's round r (C's later nodes) instead of waiting for C's whole round.
* `credits="start"` (the pimcomp baseline's schedules): C sends its credit at the start of its
  program (round r+1 starts only after C finished reading B in round r) and P waits before its
  first node writing B, so round 0 runs on the initial credit.

Network inputs/outputs need no tokens (the simulator streams them per round); a buffer written and
read on one core needs none (in-order issue). Row-group reduction trees (NoC send/recv) order
themselves by rendezvous. Deadlock freedom: every core runs its nodes in topological layer order, data waits
only point to earlier layers of the same round, and an end-of-round credit wait only needs reads
of the same round (induction on round, then layer).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from raptor.arch import Arch
from raptor.errors import PassFailedError
from raptor.isa.opcodes import NUM_EVENT_REGISTERS
from raptor.spatial.ir import BufferRole, ComputeNode, NodeKind, SpatialGraph, SyncToken


def node_writes(sg: SpatialGraph, n: ComputeNode) -> str | None:
    """The host buffer a node stores into (None: a row group that sends its partial sum on)."""
    ly = sg.layers[n.layer]
    if n.kind == NodeKind.MVM and n.row_group > 0:
        return None
    return ly.output.buffer


def node_reads(sg: SpatialGraph, n: ComputeNode) -> list[str]:
    ly = sg.layers[n.layer]
    if n.kind == NodeKind.MVM and n.row_group > 0:
        return [ly.inputs[0].buffer]  # only the root row group reads a fused residual
    return list(dict.fromkeys(v.buffer for v in ly.inputs))


@dataclass(frozen=True)
class SynchronizationPass:
    """Insert data and credit tokens (see module docstring); `pipeline` > 1 adds credits."""

    pipeline: int = 1
    credits: str = "start"  # "start" | "end" (module docstring)
    name: ClassVar[str] = "synchronization"

    def apply(self, arch: Arch, sg: SpatialGraph) -> SpatialGraph:
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
            for c in rs:
                others = [p for p in ws if p != c]
                if not others:
                    continue
                ev = new_event(c, buf)
                before.setdefault(first_read[c, buf], []).append(
                    SyncToken(c, "wait", ev, len(others), buf)
                )
                for p in others:
                    after.setdefault(last_write[p, buf], []).append(
                        SyncToken(p, "sync", ev, c, buf)
                    )
            if self.pipeline > 1 and sg.buffers[buf].role != BufferRole.OUTPUT:
                for p in ws:
                    others = [c for c in rs if c != p]
                    if not others:
                        continue
                    ev = new_event(p, buf)
                    if self.credits == "end":
                        end.setdefault(p, []).append(SyncToken(p, "wait", ev, len(others), buf))
                        for c in others:
                            after.setdefault(last_read[c, buf], []).append(
                                SyncToken(c, "sync", ev, p, buf)
                            )
                        continue
                    # the credit wait goes before the data waits of the same node
                    before.setdefault(first_write[p, buf], []).insert(
                        0, SyncToken(p, "wait", ev, len(others), buf)
                    )
                    for c in others:
                        start.setdefault(c, []).append(SyncToken(c, "sync", ev, p, buf))
        used = events
        if max(events.values(), default=0) > NUM_EVENT_REGISTERS:
            before, after, start, end, used = _reuse_events(sg, by_core, before, after, start, end)
        out = replace(
            sg, tokens_before=before, tokens_after=after, tokens_start=start, tokens_end=end
        )
        out.notes = {**sg.notes, "event_registers": max(used.values(), default=0)}
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
            if t.kind == "sync":
                producers[t.value, t.event] = producers.get((t.value, t.event), 0) | (
                    1 << layer_of[nid]
                )
    credit = {(t.value, t.event) for toks in start.values() for t in toks}
    credit |= {(t.core, t.event) for toks in end.values() for t in toks}
    # with credits, a producer may restart and sync a reused register again as soon as this core
    # sent its credit (after its last read of the buffer): reuse only while that read is pending
    piped = any(start.values()) or any(end.values())
    buf_of = {(t.core, t.event): t.buffer for ts in before.values() for t in ts if t.kind == "wait"}
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
                if t.kind != "wait" or (core, t.event) in credit:
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
                _r(t, event=phys[(t.value if t.kind == "sync" else t.core), t.event]) for t in ts
            ]
        return out

    return remap(before), remap(after), remap(start), remap(end), used
