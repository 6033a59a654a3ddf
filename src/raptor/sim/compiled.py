"""The compiled engine's driver: lays a PimProgram out in flat arrays (one column per record field,
all cores concatenated), precomputes every cost with the Python engine's own cost functions (one
row per distinct (unit, operands) key), runs the compiled loop (raptor.sim.kernel), applies the
vector ops numpy computes (vvdmul, vavg, vtanh, vsigm, vsoftmax) when the loop hands them over,
and turns errors, deadlocks and counters into what the Python engine (raptor.sim.engine) gives.

Covers rob_size 1 and untraced runs; rob_size > 1 and traced runs use the Python engine."""

from __future__ import annotations

import threading

import numpy as np

from raptor.arch.loader import Arch
from raptor.arch.timing import link_costs
from raptor.errors import SimulationError
from raptor.isa.opcodes import Opcode
from raptor.isa.pimdir import PimProgram
from raptor.isa.table import joined as joined_streams
from raptor.sim import kernel_state as K
from raptor.sim import vector as vec
from raptor.sim.checks import FIELDS_MESSAGE, R1_MASK, RD_MASK, describe, opcode_mask
from raptor.sim.energy import (
    TIMELINE_BINS,
    TIMELINE_WIDTH0_NS,
    EnergyCounter,
    EnergyTimeline,
    static_power_mw,
    with_static,
)
from raptor.sim.kernel import run as kernel_run
from raptor.sim.kernel_layout import ROW_MVM, ROW_VECTOR, lay_out
from raptor.sim.kernel_values_pass import run_values
from raptor.sim.matrix import MatrixUnit
from raptor.sim.memory import HostMemory, MemoryTiming
from raptor.sim.report import CoreStats

_LINKED = (int(Opcode.LD), int(Opcode.ST), int(Opcode.SEND), int(Opcode.RECV), int(Opcode.SYNC))
_SIZED = (int(Opcode.LLDI), int(Opcode.LMV), *_LINKED[:4])
_SIZED_MASK = opcode_mask(_SIZED)
_VEC_OK = ~opcode_mask(vec.UNSUPPORTED)  # vector ops with a cost (the others: an error)


class _Core:
    __slots__ = ("id", "n", "stats", "stream")


class _Counters:
    """The Noc / MemoryTiming counters `simulate` reads after a run."""

    def __init__(self, **kw) -> None:
        self.__dict__.update(kw)


def _shared_buffer(mats: list[np.ndarray]) -> np.ndarray | None:
    """The 1-D float32 array every matrix of mats is a C-contiguous 2-D view of, if there is
    one (weight matrices read from weights.bin are), else None."""
    if not mats:
        return None
    buf = mats[0].base
    if not isinstance(buf, np.ndarray) or buf.ndim != 1 or buf.dtype != np.float32:
        return None
    if not buf.flags.c_contiguous:
        return None
    lo, hi = buf.ctypes.data, buf.ctypes.data + 4 * buf.size
    for w in mats:
        if w.base is not buf or w.dtype != np.float32 or w.ndim != 2 or not w.flags.c_contiguous:
            return None
        p = w.ctypes.data
        if (p - lo) % 4 or p < lo or p + 4 * w.size > hi:
            return None
    return buf


def _zeros_small_pages(shape: tuple[int, int]) -> np.ndarray:
    """Zeroed float32 memory the OS maps page by page as it is touched: numpy asks for huge pages
    on large arrays, and zeroing a 2 MB page for each core's first store costs more than the
    whole run of a small program."""
    setter = getattr(np._core.multiarray, "_set_madvise_hugepage", None)
    old = setter(False) if setter else None
    try:
        return np.zeros(shape, np.float32)
    finally:
        if setter:
            setter(old)


class _LocalPool:
    """Local memories kept zeroed between runs in one process. A fresh zeroed array costs a page
    fault at the first touch of each page (the OS maps zero pages lazily). After a run, the part
    of every core's memory its instructions were checked for (K.CI_LLO, K.CI_LHI: values are only
    written inside checked ranges) is zeroed, which leaves the whole array zero, and the array is
    kept for the next run with memories of that size: a run with as many cores or fewer gets a
    view of its first rows. Arrays whose marked parts exceed `max_bytes` are not kept (they would
    hold that much resident memory between runs)."""

    max_bytes = 256 << 20

    def __init__(self) -> None:
        # elements per core -> a zero (cores, elements) array
        self._free: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, int]) -> np.ndarray:
        with self._lock:
            arr = self._free.pop(shape[1], None)
        if arr is None or arr.shape[0] < shape[0]:
            return _zeros_small_pages(shape)
        return arr[: shape[0]]

    def give(self, arr: np.ndarray, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        """Zero arr[r, :lo] and arr[r, hi:] for every row r of rows (lo, hi: theirs) and keep the
        array arr is (a view of)."""
        n = arr.shape[1]
        if int(lo.sum() + (n - hi).sum()) * arr.itemsize > self.max_bytes:
            return
        for r, a, b in zip(rows.tolist(), lo.tolist(), hi.tolist()):
            arr[r, :a] = 0.0
            arr[r, b:] = 0.0
        whole = arr if arr.base is None else arr.base
        with self._lock:
            kept = self._free.get(n)
            if kept is None or kept.shape[0] < whole.shape[0]:
                self._free[n] = whole


LOCAL_POOL = _LocalPool()


class CompiledEngine:
    """One simulation of a PimProgram on an Arch (rob_size 1) for `rounds` rounds, with the
    interface `simulate` uses of `Engine`: run(), cores[i].n / .stats, energy_total(), noc,
    gmem, noc_bytes."""

    # values in a second pass, core by core (raptor.sim.kernel_values_pass), after a timing pass
    # of the event loop; False (set before run): the event loop computes them as it goes. Both
    # give the same results bit for bit.
    value_pass = True
    arena_start = 1 << 22  # elements of the value pass's first arena for send payloads

    def __init__(self, prog: PimProgram, arch: Arch, rounds: int, host: HostMemory) -> None:
        if arch.core.rob_size > 1:
            raise ValueError("the compiled engine covers rob_size 1 only")
        self.prog, self.arch, self.rounds, self.host = prog, arch, rounds, host
        self.eb = prog.element_bytes
        self.local_mem = MemoryTiming(arch.core.local_memory)
        self.gmem_cfg = MemoryTiming(arch.global_memory)
        self.cores: list[_Core] = []
        for i, s in enumerate(prog.cores):
            c = _Core()
            c.id, c.n, c.stream, c.stats = i, len(s), s, CoreStats(core=i)
            self.cores.append(c)
        self._build()

    # ---------------------------------------------------------------- layout
    def _build(self) -> None:  # noqa: C901 - one pass over the program's parts
        prog, arch, eb = self.prog, self.arch, self.eb
        nc = len(prog.cores)
        ns = np.array([len(s) for s in prog.cores], np.int64)
        base = np.zeros(nc, np.int64)
        if nc:
            base[1:] = np.cumsum(ns)[:-1]
        total = int(ns.sum())
        # every core's records back to back, 5 little-endian int32 words each
        words = joined_streams(prog.cores).view("<i4").reshape(total, 5)
        if not words.dtype.isnative:
            words = words.astype(np.int32)

        # array groups: weight matrix and crossbar count per (core, group)
        weights = prog.weight_matrices
        gbase = np.zeros(nc, np.int64)
        gn = np.zeros(nc, np.int64)
        gw: list[int] = []
        gx: list[int] = []
        for i in range(nc):
            agw = list(prog.array_group_weights[i]) if i < len(prog.array_group_weights) else []
            xbars = list(prog.array_group_map[i])
            n = max(len(agw), len(xbars))
            gbase[i], gn[i] = len(gw), n
            gw += [
                int(m) if g < len(agw) and 0 <= m < len(weights) else -1
                for g, m in enumerate(agw + [-1] * (n - len(agw)))
            ]
            gx += [int(xbars[g]) if g < len(xbars) else -1 for g in range(n)]
        gw_a = np.array(gw + [-1], np.int64)
        gx_a = np.array(gx + [-1], np.int64)
        used = sorted({m for m in gw if m >= 0})
        wofs = np.zeros(max(len(weights), 1), np.int64)
        wrows = np.zeros_like(wofs)
        wcols = np.zeros_like(wofs)
        wflat = _shared_buffer([weights[m] for m in used])
        if wflat is not None:  # views of one buffer (as read from weights.bin): no copy
            p0 = wflat.ctypes.data
            for m in used:
                wofs[m] = (weights[m].ctypes.data - p0) // 4
                wrows[m], wcols[m] = weights[m].shape
        else:
            parts, off = [], 0
            for m in used:
                w = np.ascontiguousarray(weights[m], dtype=np.float32)
                wofs[m], (wrows[m], wcols[m]) = off, w.shape
                parts.append(w.ravel())
                off += w.size
            wflat = np.concatenate(parts) if parts else np.zeros(1, np.float32)

        # the instruction table (opcode, rd, r1, imm, g1, g2, g3, cost key, link) with each core's
        # count of each opcode and, when its register fields are in range, the cost key of each
        # instruction (setbw state in force in round 0; for a prefix before the first setbw, in
        # later rounds: the last setbw of the previous round) with the cost rows, and the NoC
        # link of each sync, ld, st, send and recv (raptor.sim.kernel_layout.lay_out)
        ins, per_op, i0, akey, first_setbw, alt_base, crows, pairs = lay_out(
            words, ns, base, RD_MASK, R1_MASK, gbase, gn, gw_a, gx_a, _VEC_OK, _SIZED_MASK,
            self.rounds > 1, arch.noc.global_memory_switch_id,
        )  # fmt: skip
        if i0 >= 0:
            c = int(np.searchsorted(base, i0, "right") - 1)
            while ns[c] == 0:
                c -= 1
            pc = i0 - int(base[c])
            msg = f"core {c} pc {pc} ({describe(prog.cores[c], pc)}): {FIELDS_MESSAGE}"
            raise SimulationError(msg)
        ctab = self._cost_table(crows)
        net = np.zeros((1 + len(pairs), 4), np.float64)  # row 0: no link
        net[1:] = np.stack(link_costs(arch, pairs[:, 0], pairs[:, 1]), 1)

        # state
        ci = np.zeros((nc, K.N_CI), np.int64)
        ci[:, K.CI_N], ci[:, K.CI_BASE] = ns, base
        ci[:, K.CI_DONE] = ns == 0
        prog_rows = np.cumsum(ns > 0) - 1
        ci[:, K.CI_LROW] = np.maximum(prog_rows, 0)
        ci[:, K.CI_GBASE], ci[:, K.CI_GN] = gbase, gn
        ci[:, K.CI_FIRST_SETBW], ci[:, K.CI_ALT_BASE] = first_setbw, alt_base
        ci[:, K.CI_FRESH] = 1
        n_send = per_op[:, Opcode.SEND] * self.rounds
        n_recv = per_op[:, Opcode.RECV] * self.rounds
        ci[1:, K.CI_SBASE], ci[1:, K.CI_RBASE] = np.cumsum(n_send)[:-1], np.cumsum(n_recv)[:-1]
        n_ldst = int(per_op[:, Opcode.LD].sum() + per_op[:, Opcode.ST].sum()) * self.rounds
        sizes = ins[:, 6][ins[:, 0] == Opcode.SEND].astype(np.int64)
        self.arena_elems = int((sizes // eb).sum()) * self.rounds
        n_rdv = int(n_send.sum())
        log = (
            np.zeros(n_ldst, np.int64),
            np.zeros(n_rdv, np.int64),
            np.zeros(int(n_recv.sum()), np.int64),
            np.zeros(n_rdv, np.int64),
        )
        cf = np.zeros((nc, K.N_CF), np.float64)
        lm = arch.core.local_memory
        self.LN = lm.memory_size // eb
        ci[:, K.CI_LHI] = self.LN  # nothing marked (kernel_core._mark)
        n_prog = int((ns > 0).sum())
        self.local = LOCAL_POOL.take((max(n_prog, 1), self.LN))
        n_sync = int(per_op[:, Opcode.SYNC].sum())
        cap = nc + n_sync * self.rounds + 16
        q = np.zeros(nc + 1, np.int64)
        runnable = np.flatnonzero(ns > 0)
        q[: len(runnable)] = runnable
        gi = np.zeros(K.N_GI, np.int64)
        gi[K.I_QT] = len(runnable)
        host = self.host
        self.inreg, inbuf = self._regions(host.inputs)
        self.outreg, self.outbuf = self._regions(host.outputs)
        hw = host.written.view(np.uint8) if host.written is not None else np.zeros(0, np.uint8)
        scratch = np.zeros(int(wcols.max()) + 1, np.float32)
        wmeta = np.stack([wofs, wrows, wcols], 1)
        gf = np.zeros(K.N_GF, np.float64)
        gf[K.G_EW] = TIMELINE_WIDTH0_NS
        heap_t = np.zeros(cap)
        heap_i = np.zeros((cap, 4), np.int64)
        self.st = (
            ins, akey, ci, cf, np.zeros((nc, 32), np.int64), np.zeros((nc, 32), np.int64),
            np.zeros((nc, self.rounds), np.float64), self.local, gw_a, wflat, wmeta, ctab, net,
            np.zeros(max(nc, 1), np.float64), gf, gi, heap_t, heap_i,
            q, np.full(nc, -1, np.int64), np.full(nc, -1, np.int64),
            (host.data, hw, self.inreg, inbuf, self.outreg, self.outbuf), scratch,
            np.zeros(TIMELINE_BINS, np.float64), log,
        )  # fmt: skip
        self.prm = (
            float(arch.core.period),
            int(eb),
            int(self.LN),
            int(self.rounds),
            int(arch.noc.bus_width),
            int(nc),
            1,
        )

    def _cost_table(self, crows: np.ndarray) -> np.ndarray:
        """The loop's cost table: one row per distinct cost row of raptor.sim.kernel_layout, by
        the Python engine's cost functions: an MVM (latency ns, matrix energy pJ, local-memory
        energy pJ, 0), a vector op (latency, vector energy, local-memory energy, 0), a sized
        instruction `_sized_cost`'s figures."""
        arch, local = self.arch, self.local_mem
        vu = vec.VectorUnit(arch)
        out = np.zeros((max(len(crows), 1), 4), np.float64)
        for j, (kind, a, b, c, d) in enumerate(crows.tolist()):
            if kind == ROW_MVM:
                rd, lat, wr, em, el = MatrixUnit(arch, [a], [None]).cost(0, b, c, d, local)
                out[j] = (rd + lat + wr, em, el, 0.0)
            elif kind == ROW_VECTOR:
                out[j] = (*vu.cost(a, b, c, d, local), 0.0)
            else:
                out[j] = self._sized_cost(a, b)
        return out

    def _sized_cost(self, op: int, n: int) -> tuple[float, float, float, float]:
        """Cost row of a sized instruction: lldi, lmv (latency, energy: write then read), st (local
        read, global write), ld (local write, global read), send/recv (local read, write)."""
        lc, gc = self.local_mem.cost, self.gmem_cfg.cost
        if op == Opcode.LLDI:
            return (*lc(n, True), 0.0, 0.0)
        if op == Opcode.LMV:
            (wl, we), (rl, re) = lc(n, True), lc(n, False)
            return (wl + rl, we + re, 0.0, 0.0)
        if op == Opcode.ST:
            return (*lc(n, False), *gc(n, True))
        if op == Opcode.LD:
            return (*lc(n, True), *gc(n, False))
        return (*lc(n, False), *lc(n, True))

    @staticmethod
    def _regions(regions: list) -> tuple[np.ndarray, np.ndarray]:
        rows, bufs, off = [], [], 0
        for s, e, _name, arrs in regions:
            rows.append((s, e, len(arrs), off))
            for a in arrs:
                bufs.append(np.asarray(a, dtype=np.float32).ravel())
                off += e - s
        reg = np.array(rows, np.int64).reshape(-1, 4)
        return reg, (np.concatenate(bufs) if bufs else np.zeros(1, np.float32))

    # ---------------------------------------------------------------- run
    def run(self) -> None:
        if self.local is None:
            raise RuntimeError("a CompiledEngine runs once")
        try:
            self._run()
        finally:
            ci = self.st[K.S_CI]
            has = ci[:, K.CI_N] > 0
            LOCAL_POOL.give(self.local, ci[has, K.CI_LROW], ci[has, K.CI_LLO], ci[has, K.CI_LHI])
            self.local = None

    def _run(self) -> None:
        self.prm = self.prm[: K.P_VALUES] + (0 if self.value_pass else 1,)
        st, prm = self.st, self.prm
        gi = st[K.S_GI]
        while True:
            rc = kernel_run(st, prm)
            if rc != K.RC_HOSTOP:
                break
            c, o, d, a, b, n = (int(x) for x in gi[K.I_CORE : K.I_X5 + 1])
            vec.apply(o, self.local[int(st[K.S_CI][c, K.CI_LROW])], d, a, b, n)
        if rc == K.RC_ERROR:
            raise self._error()
        if rc == K.RC_DEADLOCK:
            raise self._deadlock()
        if self.value_pass:
            self._values()
        for (s, e, _name, arrs), row in zip(self.host.outputs, self.outreg):  # outputs back
            for r, arr in enumerate(arrs):
                o = int(row[3]) + r * (e - s)
                arr[...] = self.outbuf[o : o + e - s].reshape(arr.shape)
        cf, fin = st[K.S_CF], st[K.S_FIN]
        for c in self.cores:
            s = c.stats
            s.matrix_busy_ns, s.vector_busy_ns, s.transfer_busy_ns = (
                float(cf[c.id, k]) for k in (K.CF_MB, K.CF_VB, K.CF_TB)
            )
            s.stall_sync_ns, s.stall_recv_ns, s.stall_memory_ns = (
                float(cf[c.id, k]) for k in (K.CF_SS, K.CF_SR, K.CF_SM)
            )
            s.finish_ns = fin[c.id].tolist() if c.n else []
        gf = st[K.S_GF]
        self.energy = EnergyCounter(
            matrix_pj=float(gf[K.G_EM]),
            vector_pj=float(gf[K.G_EV]),
            local_memory_pj=float(gf[K.G_EL]),
        )
        self.noc = _Counters(
            inter_chip_bytes=int(gi[K.I_ICB]),
            inter_chip_energy_pj=float(gf[K.G_ICE]),
            energy_pj=float(gf[K.G_NE]),
            flits=int(gi[K.I_FLITS]),
        )
        self.gmem = _Counters(
            bytes=int(gi[K.I_GBYTES]),
            energy_pj=float(gf[K.G_GE]),
            busy_ns=float(gf[K.G_GNS]),
            requests=int(gi[K.I_GREQ]),
        )
        self.noc_bytes = int(gi[K.I_NOCB])
        self.timeline = EnergyTimeline(static_power_mw(self.arch, self.prog.core_cnt))
        self.timeline.bins = st[K.S_EH].tolist()
        self.timeline.width_ns = float(gf[K.G_EW])

    def _values(self) -> None:
        """The value pass over the timing pass's record (raptor.sim.kernel_values_pass)."""
        st, prm = self.st, self.prm
        ci = st[K.S_CI]
        nc = ci.shape[0]
        vi = np.zeros((nc, K.N_V), np.int64)
        vg = np.zeros(K.N_VG, np.int64)
        vg[K.VG_CUR] = -1
        runnable = np.flatnonzero(ci[:, K.CI_N] > 0)[::-1]  # a stack: core 0 runs first
        ready = np.zeros(max(nc, 1), np.int64)
        ready[: len(runnable)] = runnable
        vg[K.VG_NREADY] = len(runnable)
        n_rdv = len(st[K.S_LOG][3])
        pay = (
            np.zeros(n_rdv, np.int64), np.zeros(n_rdv, np.int64), np.zeros(n_rdv, np.uint8),
            np.zeros(n_rdv, np.int64),
        )  # fmt: skip
        arena = np.empty(max(min(self.arena_elems, self.arena_start), 1), np.float32)
        regs = np.zeros((nc, 32), np.int64)
        while True:
            rc = run_values((vi, vg, regs, ready, arena, pay), st, prm)
            if rc == K.RC_GROW:  # payloads not yet received fill the arena: double it
                grown = np.empty(2 * arena.size + self.arena_elems // 16, np.float32)
                grown[: arena.size] = arena
                arena = grown
                continue
            if rc != K.RC_HOSTOP:
                break
            c = int(vg[K.VG_CUR])
            o, d, a, b, n = (int(x) for x in vg[K.VG_OP : K.VG_N + 1])
            vec.apply(o, self.local[int(ci[c, K.CI_LROW])], d, a, b, n)
        if rc != K.RC_DONE:
            raise SimulationError("the value pass does not fit the timing pass (internal error)")

    def energy_total(self, run_time_ns: float) -> EnergyCounter:
        return with_static(
            self.energy, self.arch, self.prog.core_cnt, self.gmem.energy_pj, self.noc.energy_pj,
            run_time_ns,
        )  # fmt: skip

    # ---------------------------------------------------------------- errors
    def _at(self, c: int, msg: str) -> SimulationError:
        core = self.cores[c]
        pc = min(int(self.st[K.S_CI][c, K.CI_PC]), core.n - 1)
        return SimulationError(f"core {c} pc {pc} ({describe(core.stream, pc)}): {msg}")

    def _error(self) -> SimulationError:
        gi = self.st[K.S_GI]
        c, code, x1, x2, x3, x4, x5 = (int(v) for v in gi[K.I_CORE : K.I_X6 + 1])
        msg = {
            K.E_MVM_WIDTH: "mvmul before setbw (input width 0)",
            K.E_MVM_WEIGHT: f"no weight matrix for array group {x1}",
            K.E_MVM_MBIW: "mvmul with mbiw 0",
            K.E_MVM_RANGE: f"local address out of range (input {x1}+{x2}, output {x3}+{x4}, size {x5})",
            K.E_VEC_LEN: "vector length 0",
            K.E_VEC_UNSUPPORTED: "vector op not supported by the float simulator",
            K.E_LOCAL_RANGE: "local address out of range",
            K.E_SYNC_TARGET: "sync to a core or event register that does not exist",
            K.E_CHECK_LOCAL: f"local range [{x1}, {x1 + x2}) out of range (size {x3} elements)",
            K.E_CHECK_HOST: f"host range [{x1}, {x1 + x2}) out of range (size {x3} elements)",
            K.E_SEND_TARGET: f"send to invalid core {x1}",
            K.E_RECV_TARGET: f"recv from invalid core {x1}",
            K.E_RECV_NO_PROGRAM: f"recv from core {x1}, which has no program",
            K.E_SIZE_MISMATCH: f"recv of {x1} bytes matches a send of {x2} bytes from core {x3}",
        }.get(code)
        if msg is None:
            return SimulationError(f"core {c}: internal error {code} of the compiled engine")
        return self._at(c, msg)

    def _deadlock(self) -> SimulationError:
        ci, evr = self.st[K.S_CI], self.st[K.S_EVR]
        parts = []
        for core in self.cores:
            c = core.id
            if ci[c, K.CI_DONE]:
                continue
            pc = int(ci[c, K.CI_PC])
            extra = ""
            b = ci[c, K.CI_BLOCKED]
            if b == K.B_WAIT:
                ev, val = int(ci[c, K.CI_PA]), int(ci[c, K.CI_PB])
                extra = f" [event register {ev} = {int(evr[c, ev])} < {val}]"
            elif b in (K.B_RECV, K.B_SEND):
                extra = f" [{'recv' if b == K.B_RECV else 'send'} not matched]"
            parts.append(
                f"core {c} pc {pc} round {int(ci[c, K.CI_RND])} waits on "
                f"{describe(core.stream, pc)}{extra}"
            )
        now = float(self.st[K.S_GF][K.G_NOW])
        return SimulationError(f"deadlock at {now:.0f} ns: " + "; ".join(parts))
