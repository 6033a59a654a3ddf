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
            if e >= NUM_EVENT_REGISTERS:
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
        out = replace(
            sg, tokens_before=before, tokens_after=after, tokens_start=start, tokens_end=end
        )
        out.notes = {**sg.notes, "event_registers": max(events.values(), default=0)}
        return out
