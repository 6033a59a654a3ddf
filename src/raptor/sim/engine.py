"""The event-driven engine in Python: runs every core's instruction stream on an Arch, values and
timing in one pass (semantics: docs/pim-format.md; timing: pimsim-nn, reference/pimsim-nn.md).
It is the reference the compiled engine (raptor.sim.compiled) is tested against bit for bit, and
the engine of traced runs and of archs with rob_size > 1. Shared-state events: raptor.sim.events;
the reorder buffer: raptor.sim.rob.

Design for speed. Each stream is decoded once into Python lists (one per record field). A core
runs ahead through core-private instructions (scalar, setbw, mvmul, vector, lldi, lmv, sync, and
a wait that is already satisfied) in a tight loop, computing their times and values at once; it
returns to the global event heap only at instructions that touch shared state (ld, st, send,
recv, an unsatisfied wait), which are then processed in global time order. Heap entries are
plain tuples `(time_ns, seq, kind, a, b)`.

Core timing (rob_size 1, calibrated on pimsim-nn.md §5 and §9.8): one instruction is fetched per
cycle; scalar ops and setbw execute in decode; a unit instruction dispatches at
max(fetch + 2 cycles, previous unit instruction's end + 3 cycles) and the core finishes 3 cycles
after its last unit instruction ends (one 8-bit MVM: 3 + 1655 + 3 = 1661 ns; two: 3319 ns); after
vector, lldi, lmv and ld it is 2 cycles, not 3 (pimsim-nn: first such instruction finished 4
cycles after fetch, 2 cycles between back-to-back ones).
rob_size > 1 (pimcomp.md §3.2, pimsim-nn `ReorderBuffer`): up to rob_size unit instructions in
flight per core, dispatched in order; an instruction dispatches once no in-flight instruction
uses its unit (each array group is a unit, the vector unit one, the transfer unit one) or has a
RAW/WAR/WAW conflict with its local-memory ranges, and a ROB entry is free; an entry is held
until its end + the retire cycles. The local-memory port serves one transaction at a time: the
read and write phases of overlapping instructions queue on it (two 8-bit MVMs on two array
groups: the second's read waits 320 ns for the first's, 1985 ns in all, as in pimsim-nn).
Values are computed at dispatch in program order, which equals completion-time order because
conflicting instructions never overlap. ld, st, send, recv and wait still block the core until
they complete (later instructions do not overtake them). With rob_size 1 none of this runs.

Values change when the instruction takes effect: host memory is read when an ld's request is
served by the global memory queue and written when a st's request is served (the queue is FIFO,
so this orders host accesses exactly as their completion times do); send/recv copy at the
rendezvous. A program that does not order a reader after a writer reads stale data.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from raptor.arch.loader import Arch
from raptor.errors import SimulationError
from raptor.isa.opcodes import Opcode
from raptor.isa.pimdir import PimProgram
from raptor.sim import vector as vec
from raptor.sim.checks import FIELDS_MESSAGE, bad_register_field, describe
from raptor.sim.energy import EnergyCounter, EnergyTimeline, static_power_mw, with_static
from raptor.sim.events import (
    DISPATCH_CYCLES,
    EV_MEM,
    EV_RDV,
    EV_READY,
    EV_RECV,
    EV_SYNC,
    EV_WAIT,
    FAST_RETIRE_CYCLES,
    RETIRE_CYCLES,
    SharedEventsMixin,
)
from raptor.sim.matrix import MatrixUnit
from raptor.sim.memory import HostMemory, MemoryTiming
from raptor.sim.report import CoreStats
from raptor.sim.rob import UNIT_T, UNIT_V, Rob, RobMixin
from raptor.sim.trace import (
    LOCAL,
    MVMUL,
    SUB_AG0,
    SUB_TRANSFER,
    SUB_VECTOR,
    SYNC,
    VECTOR,
    TraceRecorder,
    track_id,
)
from raptor.sim.transfer import Noc

_LD, _ST, _LLDI, _LMV = int(Opcode.LD), int(Opcode.ST), int(Opcode.LLDI), int(Opcode.LMV)
_SEND, _RECV, _WAIT, _SYNC = int(Opcode.SEND), int(Opcode.RECV), int(Opcode.WAIT), int(Opcode.SYNC)
_SETBW, _MVMUL, _VEC_HI = int(Opcode.SETBW), int(Opcode.MVMUL), int(Opcode.VRSL)
_SLDI, _SADD, _SSUB, _SMUL = int(Opcode.SLDI), int(Opcode.SADD), int(Opcode.SSUB), int(Opcode.SMUL)
_SADDI, _SMULI = int(Opcode.SADDI), int(Opcode.SMULI)


class _Core:
    __slots__ = (
        "id", "stream", "cols", "n", "pc", "rnd", "tf", "te", "regs", "ev", "local", "ibiw", "obiw",
        "blocked", "pend", "done", "matrix", "stats", "rob",
    )  # fmt: skip


class Engine(RobMixin, SharedEventsMixin):
    """One simulation of a PimProgram on an Arch for `rounds` rounds."""

    def __init__(
        self,
        prog: PimProgram,
        arch: Arch,
        rounds: int,
        host: HostMemory,
        trace: TraceRecorder | None = None,
    ) -> None:
        self.prog = prog
        self.trace = trace  # None: untraced (the hot loop checks this once per instruction)
        self.arch = arch
        self.rounds = rounds
        self.host = host
        self.eb = prog.element_bytes
        self.period = arch.core.period
        lm = arch.core.local_memory
        self.local_elems = lm.memory_size // self.eb
        self.local = MemoryTiming(lm)  # cost cache shared by all cores (one port per core)
        self.gmem = MemoryTiming(arch.global_memory)
        self.noc = Noc(arch, prog.core_cnt)
        if trace is not None:
            self.noc.log = trace.noc
        self.vector = vec.VectorUnit(arch)
        self.heap: list[tuple] = []
        self.seq = 0
        self.now = 0.0
        self.energy = EnergyCounter()
        self.timeline = EnergyTimeline(static_power_mw(arch, prog.core_cnt))
        self.noc.timeline = self.timeline
        self.pending_senders: list[dict[int, float]] = [dict() for _ in range(prog.core_cnt)]
        self.recv_waiting = [-1] * prog.core_cnt
        self.noc_bytes = 0  # bytes moved core to core by send/recv
        self.cores: list[_Core] = []
        weights = prog.weight_matrices
        for i, stream in enumerate(prog.cores):
            c = _Core()
            c.id = i
            c.stream = stream
            c.n = len(stream)
            c.cols = tuple(
                stream[f].tolist()
                for f in ("opcode", "rd", "r1", "r2_or_imm", "generic1", "generic2", "generic3")
            )
            c.pc = 0
            c.rnd = 0
            c.tf = 0.0
            c.te = 0.0
            c.regs = [0] * 32
            c.ev = [0] * 32
            self._check_fields(c)
            c.local = np.zeros(self.local_elems if c.n else 0, dtype=np.float32)
            c.ibiw = 0
            c.obiw = 0
            c.blocked = None
            c.pend = None
            c.done = c.n == 0
            agw = prog.array_group_weights[i] if i < len(prog.array_group_weights) else []
            ws = [
                np.ascontiguousarray(weights[m], dtype=np.float32)
                if 0 <= m < len(weights)
                else None
                for m in agw
            ]
            xbars = list(prog.array_group_map[i])
            ws += [None] * (len(xbars) - len(ws))
            c.matrix = MatrixUnit(arch, xbars, ws)
            c.stats = CoreStats(core=i)
            c.rob = Rob(arch.core.rob_size) if arch.core.rob_size > 1 else None
            self.cores.append(c)

    # ---------------------------------------------------------------- helpers
    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def _err(self, c: _Core, msg: str) -> SimulationError:
        pc = min(c.pc, c.n - 1)
        return SimulationError(f"core {c.id} pc {pc} ({describe(c.stream, pc)}): {msg}")

    def _check_fields(self, c: _Core) -> None:
        """Register numbers checked before the stream runs (raptor.sim.checks)."""
        bad = bad_register_field(c.stream)
        if bad >= 0:
            c.pc = bad
            raise self._err(c, FIELDS_MESSAGE)

    def _check(self, c: _Core, start: int, n: int, size: int, what: str) -> None:
        if start < 0 or start + n > size:
            raise self._err(c, f"{what} [{start}, {start + n}) out of range (size {size} elements)")

    # ---------------------------------------------------------------- main loop
    def run(self) -> None:
        for c in self.cores:
            if not c.done:
                self._run(c)
        heap = self.heap
        pop = heapq.heappop
        while heap:
            t, _, kind, a, b = pop(heap)
            self.now = t
            if kind == EV_MEM:
                self._mem_arrive(self.cores[a], t)
            elif kind == EV_SYNC:
                self._sync_arrive(self.cores[a], b)
            elif kind == EV_WAIT:
                c = self.cores[a]
                ev, val = c.pend
                if c.ev[ev] >= val:
                    c.ev[ev] -= val
                    self._resume(c, t, t, 0.0)
                else:
                    c.blocked = "wait"
            elif kind == EV_READY:
                self._sender_ready(a, b, t)
            elif kind == EV_RECV:
                self._recv_dispatch(self.cores[a], t)
            elif kind == EV_RDV:
                self._rendezvous(self.cores[a], self.cores[b], t)
        if not all(c.done for c in self.cores):
            self._deadlock()
        if self.trace is not None:
            self.trace.finish()

    def _deadlock(self) -> None:
        parts = []
        for c in self.cores:
            if c.done:
                continue
            what = describe(c.stream, c.pc)
            extra = ""
            if c.blocked == "wait":
                ev, val = c.pend
                extra = f" [event register {ev} = {c.ev[ev]} < {val}]"
            elif c.blocked in ("recv", "send"):
                extra = f" [{c.blocked} not matched]"
            parts.append(f"core {c.id} pc {c.pc} round {c.rnd} waits on {what}{extra}")
        raise SimulationError(f"deadlock at {self.now:.0f} ns: " + "; ".join(parts))

    def _resume(
        self,
        c: _Core,
        start: float,
        end: float,
        stall: float,
        stall_kind: str = "sync",
        retire: int = RETIRE_CYCLES,
    ) -> None:
        """A blocked shared-state instruction of core c completed at `end`: continue the core."""
        st = c.stats
        st.transfer_busy_ns += end - start - stall
        if self.trace is not None:
            self._trace_blocking(c, start, end, stall, stall_kind)
        if stall_kind == "sync":
            st.stall_sync_ns += stall
        elif stall_kind == "recv":
            st.stall_recv_ns += stall
        else:
            st.stall_memory_ns += stall
        rel = end + retire * self.period
        if c.rob is None:
            c.te = rel
        else:
            c.rob.floor = rel
            if rel > c.te:
                c.te = rel
        c.blocked = None
        c.pend = None
        c.pc += 1
        self._run(c)

    # ---------------------------------------------------------------- shared-state events

    # ---------------------------------------------------------------- the core loop
    def _run(self, c: _Core) -> None:
        # fields were checked by _check_fields and addresses are checked per instruction: any
        # other exception is a simulator bug and reaches the caller as it is
        self._run_inner(c)

    def _run_inner(self, c: _Core) -> None:  # noqa: C901 - one flat dispatch loop, kept for speed
        ops, rds, r1s, imms, g1s, g2s, g3s = c.cols
        n = c.n
        pc = c.pc
        tf = c.tf
        te = c.te
        R = c.regs
        L = c.local
        LN = L.size
        eb = self.eb
        P = self.period
        P2 = DISPATCH_CYCLES * P
        P3 = RETIRE_CYCLES * P
        PF = FAST_RETIRE_CYCLES * P
        ibiw, obiw = c.ibiw, c.obiw
        ib = max(1, math.ceil(ibiw / 8)) if ibiw else 1
        ob = max(1, math.ceil(obiw / 8)) if obiw else 1
        mcost = c.matrix.cost
        weights = c.matrix.weights
        local = self.local
        lcost = local.cost
        vcost = self.vector.cost
        vapply = vec.apply
        stats = c.stats
        charge = self.timeline.add
        busy_m = busy_v = busy_t = 0.0
        e_m = e_v = e_l = 0.0
        rounds = self.rounds
        rob = c.rob
        tr = self.trace
        cid = c.id
        try:
            while True:
                if pc >= n:
                    stats.finish_ns.append(te if te > tf else tf)
                    c.rnd += 1
                    if c.rnd >= rounds:
                        c.done = True
                        return
                    pc = 0
                    continue
                op = ops[pc]
                if op < _SETBW:  # scalar (and nop), executed in decode
                    if op == _SLDI:
                        R[rds[pc]] = imms[pc]
                    elif op == _SADDI:
                        R[rds[pc]] = R[r1s[pc]] + imms[pc]
                    elif op == _SMULI:
                        R[rds[pc]] = R[r1s[pc]] * imms[pc]
                    elif op == _SADD:
                        R[rds[pc]] = R[r1s[pc]] + R[0]  # the binary has no rs2: register 0
                    elif op == _SSUB:
                        R[rds[pc]] = R[r1s[pc]] - R[0]
                    elif op == _SMUL:
                        R[rds[pc]] = R[r1s[pc]] * R[0]
                    tf += P
                    pc += 1
                    continue
                if op == _SETBW:
                    ibiw, obiw = g1s[pc], g2s[pc]
                    ib = max(1, math.ceil(ibiw / 8))
                    ob = max(1, math.ceil(obiw / 8))
                    tf += P
                    pc += 1
                    continue
                # a unit instruction: dispatch
                s = tf + P2
                if rob is None:
                    if te > s:
                        s = te
                    tf = s
                if op == _MVMUL:
                    if ibiw <= 0:
                        c.pc = pc
                        raise self._err(c, "mvmul before setbw (input width 0)")
                    g = g2s[pc]
                    w = weights[g] if 0 <= g < len(weights) else None
                    if w is None:
                        c.pc = pc
                        raise self._err(c, f"no weight matrix for array group {g}")
                    mbiw = imms[pc]
                    if mbiw <= 0:
                        c.pc = pc
                        raise self._err(c, "mvmul with mbiw 0")
                    a = R[r1s[pc]] // eb
                    d = R[rds[pc]] // eb
                    rows, cols = w.shape
                    if a < 0 or a + rows > LN or d < 0 or d + cols > LN:
                        c.pc = pc
                        raise self._err(
                            c,
                            f"local address out of range (input {a}+{rows}, output {d}+{cols}, size {LN})",
                        )
                    y = L[a : a + rows] @ w
                    if g1s[pc]:
                        np.maximum(y, 0, out=y)
                    L[d : d + cols] = y
                    rdn, lat, wrn, em, el = mcost(g, ibiw, obiw, mbiw, local)
                    dur = rdn + lat + wrn
                    busy_m += dur
                    e_m += em
                    e_l += el
                    if rob is None:
                        te = s + dur + P3
                        if tr is not None:
                            tr.add(cid, MVMUL, s, s + dur, dur, pc)
                    else:
                        rr = ((a, a + rows),)
                        ww = ((d, d + cols),)
                        s = tf = self._rob_slot(c, s, g, rr, ww)
                        end = self._rob_issue(
                            c, s, g, rr, ww, ((True, rdn), (False, lat), (True, wrn)), P3
                        )
                        if end + P3 > te:
                            te = end + P3
                        if tr is not None:
                            tr.add(track_id(cid, SUB_AG0 + g), MVMUL, end - dur, end, dur, pc)
                    charge(s, em + el)
                elif op <= _VEC_HI:
                    length = g3s[pc]
                    if length <= 0 or op in vec.UNSUPPORTED:
                        c.pc = pc
                        raise self._err(
                            c,
                            "vector length 0"
                            if length <= 0
                            else "vector op not supported by the float simulator",
                        )
                    sel = g1s[pc]
                    off = g2s[pc]
                    a = R[r1s[pc]] // eb + (off if sel & 2 else 0)
                    d = R[rds[pc]] // eb + (off if sel & 1 else 0)
                    if op in vec.STRIDED:
                        b = R[imms[pc]]
                        span = (length - 1) * b + 1 if b > 0 else 1
                        if a < 0 or a + span > LN or d < 0 or d + length > LN:
                            c.pc = pc
                            raise self._err(c, "local address out of range")
                    else:
                        b = R[imms[pc]] // eb + (off if sel & 4 else 0)
                        if (
                            a < 0
                            or a + length > LN
                            or d < 0
                            or d + length > LN
                            or b < 0
                            or b + length > LN
                        ):
                            c.pc = pc
                            raise self._err(c, "local address out of range")
                    vapply(op, L, d, a, b, length)
                    lat, ev_, el = vcost(op, length, ib, ob, local)
                    busy_v += lat
                    e_v += ev_
                    e_l += el
                    if rob is None:
                        te = s + lat + PF
                        if tr is not None:
                            tr.add(cid, VECTOR, s, s + lat, lat, pc)
                    else:
                        if op in vec.STRIDED:
                            rr = ((a, a + span),)
                        else:
                            rr = ((a, a + length),)
                            if op in vec.TWO_OPERANDS:
                                rr = ((a, a + length), (b, b + length))
                        ww = ((d, d + (1 if op in vec.SCALAR_RESULT else length)),)
                        s = tf = self._rob_slot(c, s, UNIT_V, rr, ww)
                        vr, vc, vw = self.vector.parts(op, length, ib, ob, local)
                        end = self._rob_issue(
                            c, s, UNIT_V, rr, ww, ((True, vr), (False, vc), (True, vw)), PF
                        )
                        if end + PF > te:
                            te = end + PF
                        if tr is not None:
                            tr.add(track_id(cid, SUB_VECTOR), VECTOR, end - lat, end, lat, pc)
                    charge(s, ev_ + el)
                elif op == _LLDI or op == _LMV:
                    sel = g1s[pc]
                    off = g2s[pc]
                    size = g3s[pc]
                    m = size // eb
                    d = (R[rds[pc]] + (off if sel & 1 else 0)) // eb
                    if d < 0 or d + m > LN:
                        c.pc = pc
                        raise self._err(c, "local address out of range")
                    lat, e = lcost(size, True)
                    wl = lat
                    rl = 0.0
                    rr = ()
                    if op == _LLDI:
                        L[d : d + m] = imms[pc]
                    else:
                        a = (R[r1s[pc]] + (off if sel & 2 else 0)) // eb
                        if a < 0 or a + m > LN:
                            c.pc = pc
                            raise self._err(c, "local address out of range")
                        L[d : d + m] = L[a : a + m].copy()
                        rl, er = lcost(size, False)
                        lat += rl
                        e += er
                        rr = ((a, a + m),)
                    busy_t += lat
                    e_l += e
                    if rob is None:
                        te = s + lat + PF
                        if tr is not None:
                            tr.add(cid, LOCAL, s, s + lat, lat, pc)
                    else:
                        ww = ((d, d + m),)
                        s = tf = self._rob_slot(c, s, UNIT_T, rr, ww)
                        end = self._rob_issue(c, s, UNIT_T, rr, ww, ((True, rl), (True, wl)), PF)
                        if end + PF > te:
                            te = end + PF
                        if tr is not None:
                            tr.add(track_id(cid, SUB_TRANSFER), LOCAL, end - lat, end, lat, pc)
                    charge(s, e)
                elif op == _SYNC:
                    dst = imms[pc]
                    evr = g1s[pc]
                    if not 0 <= dst < len(self.cores) or not 0 <= evr < 32:
                        c.pc = pc
                        raise self._err(c, "sync to a core or event register that does not exist")
                    if rob is not None:
                        s = tf = self._rob_slot(c, s, UNIT_T, (), ())
                        self._rob_issue(c, s, UNIT_T, (), (), ((False, P),), P3)
                    arr = self.noc.message(s, c.id, dst, 1)
                    if tr is None:
                        self._push(arr, EV_SYNC, dst, evr)
                    else:
                        self._push(arr, EV_SYNC, dst, (evr, cid, s))
                        tk = cid if rob is None else track_id(cid, SUB_TRANSFER)
                        tr.add(tk, SYNC, s, s + P, P, pc)
                    busy_t += P
                    if s + P + P3 > te or rob is None:
                        te = s + P + P3
                elif op == _WAIT:
                    evr = g1s[pc]
                    val = g2s[pc]
                    if rob is not None:  # waits for nothing in flight; blocks later dispatch
                        s = tf = self._rob_slot(c, s, -3, (), ())
                    if c.ev[evr] >= val:  # already satisfied: arrivals only add
                        c.ev[evr] -= val
                        if rob is None:
                            te = s + P3
                        else:
                            rob.floor = s + P3
                            if s + P3 > te:
                                te = s + P3
                    else:
                        c.pend = (evr, val)
                        c.pc, c.tf, c.te, c.ibiw, c.obiw = pc, tf, te, ibiw, obiw
                        c.blocked = "wait_dispatch"  # becomes "wait" once dispatched in time order
                        self._push(s, EV_WAIT, c.id)
                        return
                else:  # ld, st, send, recv: block and hand over to the event heap
                    sel = g1s[pc]
                    off = g2s[pc]
                    size = g3s[pc]
                    m = size // eb
                    c.pc, c.tf, c.te, c.ibiw, c.obiw = pc, tf, te, ibiw, obiw
                    if op == _LD or op == _ST:
                        if op == _LD:
                            la = (R[rds[pc]] + (off if sel & 1 else 0)) // eb
                            ha = (R[r1s[pc]] + (off if sel & 2 else 0)) // eb
                        else:
                            ha = (R[rds[pc]] + (off if sel & 1 else 0)) // eb
                            la = (R[r1s[pc]] + (off if sel & 2 else 0)) // eb
                        self._check(c, la, m, LN, "local range")
                        self._check(c, ha, m, self.host.size, "host range")
                        if rob is not None:
                            rw = ((la, la + m),)
                            s = c.tf = self._rob_slot(
                                c, s, UNIT_T, rw if op == _ST else (), () if op == _ST else rw
                            )
                        c.pend = (op == _ST, s, ha, la, m, size)
                        c.blocked = "memory"
                        if op == _ST:
                            rl, e = lcost(size, False)
                            e_l += e
                            charge(s, e)
                            arr = self.noc.message(s + rl, c.id, self.noc.gm, size)
                        else:
                            arr = self.noc.message(s, c.id, self.noc.gm, 1)
                        self._push(arr, EV_MEM, c.id)
                    else:
                        other = imms[pc]
                        la = (R[rds[pc]] + (off if sel & 1 else 0)) // eb
                        self._check(c, la, m, LN, "local range")
                        if not 0 <= other < len(self.cores) or other == c.id:
                            raise self._err(
                                c,
                                f"{'send to' if op == _SEND else 'recv from'} invalid core {other}",
                            )
                        if rob is not None:
                            rw = ((la, la + m),)
                            s = c.tf = self._rob_slot(
                                c, s, UNIT_T, rw if op == _SEND else (), () if op == _SEND else rw
                            )
                        c.pend = (other, la, m, size, s)
                        if op == _SEND:
                            c.blocked = "send"
                            a1 = self.noc.message(s, c.id, other, 1, hold_extra=P)
                            self._push(a1, EV_READY, other, c.id)
                        else:
                            c.blocked = "recv"
                            self._push(s, EV_RECV, c.id)
                    return
                pc += 1
        finally:
            if not c.blocked:
                c.pc, c.tf, c.te, c.ibiw, c.obiw = pc, tf, te, ibiw, obiw
            stats.matrix_busy_ns += busy_m
            stats.vector_busy_ns += busy_v
            stats.transfer_busy_ns += busy_t
            en = self.energy
            en.matrix_pj += e_m
            en.vector_pj += e_v
            en.local_memory_pj += e_l

    # ---------------------------------------------------------------- results
    def energy_total(self, run_time_ns: float) -> EnergyCounter:
        return with_static(
            self.energy, self.arch, self.prog.core_cnt, self.gmem.energy_pj, self.noc.energy_pj,
            run_time_ns,
        )  # fmt: skip
