"""Shared-state events of the Python engine (Engine methods): global-memory requests, sync
arrivals and the send/recv rendezvous (timing: raptor.sim.transfer, raptor.sim.memory)."""

from __future__ import annotations

from raptor.isa.opcodes import Opcode
from raptor.sim.trace import (
    FLOW_SEND,
    FLOW_SYNC,
    LD,
    RECV,
    SEND,
    ST,
    STALL_OF,
    SUB_TRANSFER,
    WAIT,
    inside,
    track_id,
)

# event kinds
EV_MEM, EV_WAIT, EV_SYNC, EV_READY, EV_RECV, EV_RDV = range(6)
DISPATCH_CYCLES = 2  # fetch -> dispatch
RETIRE_CYCLES = 3  # matrix (and st/send/recv/sync/wait) end -> next dispatch / core finish
FAST_RETIRE_CYCLES = 2  # the same after vector, lldi, lmv and ld (pimsim-nn measured)


class SharedEventsMixin:
    """Handlers of the events that touch state shared between cores."""

    _BLOCKING_KIND = {
        int(Opcode.LD): LD,
        int(Opcode.ST): ST,
        int(Opcode.SEND): SEND,
        int(Opcode.RECV): RECV,
        int(Opcode.WAIT): WAIT,
    }

    def _trace_blocking(self, c, start: float, end: float, stall: float, stall_kind: str) -> None:
        """A blocking instruction on its core's main track: its stall first, then its busy part."""
        tr = self.trace
        pc = c.pc
        if stall > 0:
            tr.stall(c.id, STALL_OF[stall_kind], start, start + stall, pc)
        busy = end - start - stall
        if busy > 0:
            tr.add(c.id, self._BLOCKING_KIND[c.cols[0][pc]], start + stall, end, busy, pc)

    def _mem_arrive(self, c, t: float) -> None:
        is_st, s, haddr, laddr, n, size = c.pend
        mstart, mend = self.gmem.reserve(t, size, is_st)
        self.timeline.add(mstart, self.gmem.cost(size, is_st)[1])
        if self.trace is not None:
            self.trace.gmem.append((t, mend))
        self.noc.switch_free[c.id] = mend  # transport mode: switch held until the response
        if is_st:
            self.host.write(haddr, c.local[laddr : laddr + n], c.rnd)
            end = mend
        else:
            c.local[laddr : laddr + n] = self.host.read(haddr, n, c.rnd)
            wr, e = self.local.cost(size, True)
            self.energy.local_memory_pj += e
            end = mend + wr
            self.timeline.add(end, e)
        self._resume(
            c, s, end, mstart - t, "memory", RETIRE_CYCLES if is_st else FAST_RETIRE_CYCLES
        )

    def _sync_arrive(self, d, ev) -> None:
        if self.trace is not None:  # traced: (event register, source core, sync time)
            ev, src, t_sync = ev
        d.ev[ev] += 1
        if d.blocked == "wait" and d.pend[0] == ev and d.ev[ev] >= d.pend[1]:
            d.ev[ev] -= d.pend[1]
            if self.trace is not None:
                tk = src if self.cores[src].rob is None else track_id(src, SUB_TRANSFER)
                self.trace.flow(FLOW_SYNC, tk, t_sync, d.id, inside(d.tf, self.now))
            self._resume(d, d.tf, self.now, self.now - d.tf, "sync")

    def _sender_ready(self, rcv: int, snd: int, t: float) -> None:
        if self.recv_waiting[rcv] == snd:
            self.recv_waiting[rcv] = -1
            a2 = self.noc.message(t, rcv, snd, 1)
            self._push(a2, EV_RDV, snd, rcv)
        else:
            self.pending_senders[rcv][snd] = t

    def _recv_dispatch(self, d, t: float) -> None:
        src = d.pend[0]
        if not 0 <= src < len(self.cores) or self.cores[src].n == 0:
            raise self._err(d, f"recv from core {src}, which has no program")
        if src in self.pending_senders[d.id]:
            del self.pending_senders[d.id][src]
            a2 = self.noc.message(t, d.id, src, 1)
            self._push(a2, EV_RDV, src, d.id)
        else:
            self.recv_waiting[d.id] = src
            d.blocked = "recv"

    def _rendezvous(self, snd, rcv, t: float) -> None:
        _, s_addr, n, size, s_start = snd.pend
        _, r_addr, rn, rsize, r_start = rcv.pend
        if rsize != size:
            raise self._err(
                rcv, f"recv of {rsize} bytes matches a send of {size} bytes from core {snd.id}"
            )
        rcv.local[r_addr : r_addr + n] = snd.local[s_addr : s_addr + n]
        self.noc_bytes += size
        rd, e1 = self.local.cost(size, False)
        wr, e2 = self.local.cost(size, True)
        self.energy.local_memory_pj += e1 + e2
        self.timeline.add(t, e1 + e2)
        r_end = t + rd
        a3 = self.noc.message(r_end, snd.id, rcv.id, size)
        lat = self.noc.link(snd.id, rcv.id)[0]
        data_ns = self.noc.nflits(size) * lat
        recv_end = a3 + wr
        s_stall = max(0.0, t - s_start - 2 * lat)
        r_stall = max(0.0, recv_end - r_start - rd - wr - data_ns - 2 * lat)
        if self.trace is not None:  # from inside the send's busy part to inside the recv's
            self.trace.flow(
                FLOW_SEND,
                snd.id,
                inside(s_start + s_stall, r_end),
                rcv.id,
                inside(r_start + r_stall, recv_end),
            )
        self._resume(snd, s_start, r_end, s_stall, "recv")
        self._resume(rcv, r_start, recv_end, r_stall, "recv")
