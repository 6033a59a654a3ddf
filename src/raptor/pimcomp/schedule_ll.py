"""LL ("element") dataflow schedule (PIMCOMP DAC'23 §IV-D2, released
`ElementPipelineSchedule.cpp`), emitting our ISA.

Instruction groups (IGs) are steps of a compile-time simulation, computed with numpy: a replica
produces its next output pixel in the first IG after the previous one in which all its input
pixels have arrived (step_k = max(step_{k-1} + 1, ready_k)); a pool/Add/activation node runs on
core `layer index mod #cores` and produces every ready pixel in that IG. In each IG, layer by
layer: every AG of a replica assembles its window from the core's local input buffer (lmv, lldi 0
for padding) and runs mvmul; partial sums are merged with vvadd (send/recv to the core of AG 0
when AGs sit on other cores); bias and activation follow. Each produced pixel is forwarded to
every core that will read it (send/recv, lmv on the same core), all transfers of an IG issued
together at its end in one global order on both sides (so blocking send/recv cannot deadlock).
Consumers place received pixels by channel offset (concat by placement). Network inputs are
loaded from host memory at the start, network outputs stored to host memory when produced.

Local memory (memory.py, PIMCOMP's pixel-level runtime management): each (receiving core,
replica) keeps its input pixels in a pool of slots (rows for conv windows, single pixels for
pool/Add) reused as soon as the last window that reads a pixel has run (a line buffer for sliding
windows); windows, partial sums, staging buffers (AG-/ADD-reuse), biases and the slot pools are
blocks with IG lifetimes placed first fit in address x time, so buffers of finished layers are
reused. A pool/Add/activation whose live inputs would fill more than VECTOR_SHARE of one core is
split into row ranges on several cores. A core whose live set does not fit fails with a
PassFailedError naming the core and the bytes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from raptor.errors import UnsupportedOpError
from raptor.isa.opcodes import OFFSET_RD, OFFSET_RS1, Opcode
from raptor.isa.table import make
from raptor.pim.emit import (
    R_CONST,
    R_OUT,
    R_ZERO,
    TEMPS,
    Block,
    Regs,
    emit_activation,
    emit_vv,
    emit_zero,
)
from raptor.pim.window import window_padding
from raptor.pimcomp.memory import PROLOGUE, Site, TimedAllocator, row_slots
from raptor.pimcomp.program import KeyedStream, Plan, finish_core
from raptor.pimcomp.schedule_ll_vector import VectorLayers, ll_key
from raptor.spatial.geometry import window_classes
from raptor.spatial.ir import BufferRole, Layer, LayerKind, TensorView


def _window_max(layer: Layer, grid: np.ndarray) -> np.ndarray:
    """Per output pixel, the max of `grid` (input H x W) over its in-bounds window."""
    kh, kw = layer.kernel_shape
    sh, sw = layer.strides
    pt, pl, pb, pr = layer.pads
    oh, ow = layer.output.height, layer.output.width
    g = np.pad(grid, ((pt, pb + kh), (pl, pr + kw)), constant_values=-1)
    out = np.full((oh, ow), -1, np.int64)
    for i in range(kh):
        for j in range(kw):
            out = np.maximum(out, g[i : i + sh * oh : sh, j : j + sw * ow : sw][:oh, :ow])
    return out.reshape(-1)


def _window_scatter_max(layer: Layer, out_steps: np.ndarray, h: int, w: int) -> np.ndarray:
    """Per input pixel (h x w), the max of `out_steps` over the output pixels whose window
    contains it (-1 if none): the inverse of _window_max."""
    kh, kw = layer.kernel_shape
    sh, sw = layer.strides
    pt, pl, pb, pr = layer.pads
    oh, ow = layer.output.height, layer.output.width
    g = np.full((pt + h + pb + kh, pl + w + pr + kw), -1, np.int64)
    s = out_steps.reshape(oh, ow)
    for i in range(kh):
        for j in range(kw):
            view = g[i : i + sh * oh : sh, j : j + sw * ow : sw][:oh, :ow]
            np.maximum(view, s, out=view)
    return g[pt : pt + h, pl : pl + w].reshape(-1)


def _first(kv):
    return kv[0]


class _LL(VectorLayers):
    def __init__(self, plan: Plan):
        self.plan, self.arch, self.sg = plan, plan.arch, plan.sg
        self.eb = plan.arch.element_bytes
        self.nl = len(self.sg.layers)
        n = self.arch.core_count
        self.mem = [
            TimedAllocator(self.arch.core.local_memory.memory_size, c, "pimcomp LL program")
            for c in range(n)
        ]
        self.biases: dict[tuple[int, int, int], int] = {}  # (core, layer, c0) -> local address
        self.pro: list[list[np.ndarray]] = [[] for _ in range(n)]
        self.regs = [Regs(self.pro[c]) for c in range(n)]
        self.ks = [KeyedStream() for _ in range(n)]
        self.used = [False] * n
        self.steps: dict[int, np.ndarray] = {}
        self.vparts: dict[int, list[tuple[int, int, int]]] = {}  # vector layer -> parts
        # (layer, view index) -> {(core, part): its buffer of input pixels}
        self.sites: dict[tuple[int, int], dict[tuple[int, int], Site]] = {}
        # layer -> list of (core, pixel array, source local address per pixel, c0, c1)
        self.produced: dict[int, list] = {}

    # ------------------------------------------------------------------ placement of inputs
    def needed(self, ly: Layer, vi: int) -> dict[tuple[int, int], tuple[int, int, np.ndarray]]:
        """(core, part) -> (first view pixel, pixels, output steps computed there, -1 for the
        other outputs): whole rows of view vi covering what the core reads (GEMM: one site per
        core for all its replicas, part 0; pool/Add/activation: one per part)."""
        v = ly.inputs[vi]
        steps = self.steps[ly.index]
        out = {}
        if ly.kind != LayerKind.GEMM:
            for part, (c, q0, q1) in enumerate(self.vparts[ly.index]):
                mine = np.full(ly.out_pixels, -1, np.int64)
                mine[q0:q1] = steps[q0:q1]
                if ly.kind in (LayerKind.ADD, LayerKind.ACT) or q1 - q0 == ly.out_pixels:
                    lo, hi = (
                        (q0, q1) if ly.kind in (LayerKind.ADD, LayerKind.ACT) else (0, v.pixels)
                    )
                else:
                    ow = ly.output.width
                    kh, sh, pt = ly.kernel_shape[0], ly.strides[0], ly.pads[0]
                    y0 = max(0, (q0 // ow) * sh - pt)
                    y1 = min(v.height - 1, ((q1 - 1) // ow) * sh - pt + kh - 1)
                    lo, hi = y0 * v.width, (y1 + 1) * v.width
                out[c, part] = (lo, hi - lo, mine)
            return out
        for (rep, _), ags in self.plan.groups(ly.index).items():
            p0, p1 = self.plan.pixel_range(ly, rep)
            if v.pixels == 1:
                lo, hi = 0, 1
            else:
                ow = ly.output.width
                kh, sh, pt = ly.kernel_shape[0], ly.strides[0], ly.pads[0]
                y0 = max(0, (p0 // ow) * sh - pt)
                y1 = min(v.height - 1, ((p1 - 1) // ow) * sh - pt + kh - 1)
                lo, hi = y0 * v.width, (y1 + 1) * v.width
            for a in ags:  # one site per core: the union of its replicas' rows
                lo0, n0, mine = out.get((a.core, 0), (lo, hi - lo, None))
                if mine is None:
                    mine = np.full(ly.out_pixels, -1, np.int64)
                mine[p0:p1] = steps[p0:p1]
                lo1, hi1 = min(lo, lo0), max(hi, lo0 + n0)
                out[a.core, 0] = (lo1, hi1 - lo1, mine)
        return out

    def last_use(self, ly: Layer, vi: int, out_steps: np.ndarray) -> np.ndarray:
        """Per pixel of view vi: the last IG in which an output pixel (out_steps, -1: not
        computed here) reads it, -1 if none."""
        v = ly.inputs[vi]
        if ly.kind in (LayerKind.ADD, LayerKind.ACT) or vi > 0:
            return out_steps.copy()
        if v.pixels == 1:
            return np.full(1, out_steps.max())
        return _window_scatter_max(ly, out_steps, v.height, v.width)

    def view_steps(self, v: TensorView, first: bool = False) -> np.ndarray:
        """IG in which each view pixel is complete (first: first written; -1: network input,
        loaded at the start)."""
        big = np.iinfo(np.int64).max
        st = np.full(v.pixels, big if first else -1, np.int64)
        for ly in self.sg.layers:
            o = ly.output
            if o.buffer != v.buffer or ly.index not in self.steps:
                continue
            q = np.arange(o.pixels)
            p = (o.channel_offset + q * o.pixel_stride - v.channel_offset) // max(1, v.pixel_stride)
            fn = np.minimum if first else np.maximum
            fn.at(st, np.clip(p, 0, v.pixels - 1), self.steps[ly.index])
        if first:
            st[st == big] = -1
        return st

    def ready(self, ly: Layer) -> np.ndarray:
        vs = [self.view_steps(v) for v in ly.inputs]
        if ly.kind in (LayerKind.ADD, LayerKind.ACT):
            return np.max(vs, axis=0) + 1
        v = ly.inputs[0]
        if v.pixels == 1 or ly.out_pixels == 1 and ly.kernel_shape == (v.height, v.width):
            return np.full(ly.out_pixels, vs[0].max() + 1)
        return _window_max(ly, vs[0].reshape(v.height, v.width)) + 1

    # ------------------------------------------------------------------ helpers
    def span(self, steps: np.ndarray) -> tuple[int, int]:
        """Lifetime in half-steps of a buffer used by compute and transfers of IGs `steps`."""
        return 2 * int(steps.min()), 2 * int(steps.max()) + 1

    def local_layer(self, ly: Layer, vi: int, site: Site) -> Layer:
        """ly with input 0 addressing the site's dense pixel range (elements from its base)."""
        v = ly.inputs[vi]
        lv = TensorView(
            v.buffer, v.channels, v.height, v.width, -site.base * v.channels, v.channels
        )
        return replace(ly, inputs=(lv,))

    def prologue_ld(self, core: int, local: int, host_reg: int, host_off: int, size: int):
        self.pro[core] += [
            make(Opcode.SLDI, rd=TEMPS[0], r2_or_imm=local),
            make(
                Opcode.LD,
                rd=TEMPS[0],
                r1=host_reg,
                generic1=OFFSET_RS1,
                generic2=host_off,
                generic3=size,
            ),
        ]

    # ------------------------------------------------------------------ layers
    def place_inputs(self, ly: Layer) -> None:
        """A site per (core, part) and view: slots reused once no window needs their pixels."""
        eb = self.eb
        for vi, v in enumerate(ly.inputs):
            is_input = self.sg.buffers[v.buffer].role == BufferRole.INPUT
            if is_input:
                arrive_px = np.full(v.pixels, PROLOGUE, np.int64)
            else:
                arrive_px = 2 * self.view_steps(v, first=True) + 1
            sites = {}
            for (core, part), (lo, n, out_steps) in sorted(
                self.needed(ly, vi).items(), key=lambda kv: kv[0]
            ):
                # GEMM windows read runs of pixels of a row: row slots; vector layers read
                # single pixels: pixel slots. Only pixels read here are received.
                w = v.width if ly.kind == LayerKind.GEMM and n > 1 else 1
                rows = n // w
                last = self.last_use(ly, vi, out_steps)[lo : lo + n]
                read = last >= 0
                arr = arrive_px[lo : lo + n]
                big = np.iinfo(np.int64).max
                ra = np.where(read, arr, big).reshape(rows, w).min(axis=1)
                rl = np.where(read, np.maximum(2 * last, arr), -big).reshape(rows, w).max(axis=1)
                live = read.reshape(rows, w).any(axis=1)
                slot = np.zeros(rows, np.int64)
                slot[live], slots = row_slots(ra[live], rl[live])
                t0, t1 = int(ra[live].min()), int(rl[live].max())
                size = slots * w * v.channels * eb
                addr = self.mem[core].alloc(size, t0, t1, f"in {ly.name}")
                site = Site(addr, lo, rows, w, v.channels, slot, slots, read)
                sites[core, part] = site
                self.used[core] = True
                if is_input:
                    if not v.contiguous:
                        raise UnsupportedOpError(f"pimcomp LL: strided network input {v.buffer}")
                    self.pro[core].append(
                        make(Opcode.SLDI, rd=R_CONST, r2_or_imm=self.plan.address[v.buffer])
                    )
                    # every read row arrives in the prologue: slots are those rows in order;
                    # one ld per run of consecutive read rows
                    idx = np.flatnonzero(live)
                    assert np.array_equal(slot[idx], np.arange(len(idx)))
                    for run in np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1):
                        self.prologue_ld(
                            core,
                            addr + int(slot[run[0]]) * w * v.channels * eb,
                            R_CONST,
                            (v.channel_offset + (lo + int(run[0]) * w) * v.channels) * eb,
                            len(run) * w * v.channels * eb,
                        )
            self.sites[ly.index, vi] = sites

    def store_output(self, b: Block, core: int, ly: Layer, p, src: int, c0: int, c1: int):
        o = ly.output
        if self.sg.buffers[o.buffer].role != BufferRole.OUTPUT:
            return
        eb = self.eb
        b.add(Opcode.SLDI, rd=R_OUT, r2_or_imm=self.plan.address[o.buffer])
        b.add(
            Opcode.ST,
            rd=R_OUT,
            r1=self.regs[core].loc(src, b),
            generic1=OFFSET_RD,
            generic2=(o.channel_offset + np.asarray(p) * o.pixel_stride + c0) * eb,
            generic3=(c1 - c0) * eb,
        )

    def gemm(self, ly: Layer) -> None:
        plan, eb, i = self.plan, self.eb, ly.index
        ready = self.ready(ly)
        steps = np.zeros(ly.out_pixels, np.int64)
        groups = sorted(plan.groups(i).items())
        for (rep, _), _ags in groups:
            p0, p1 = plan.pixel_range(ly, rep)
            k = np.arange(p1 - p0)
            steps[p0:p1] = np.maximum.accumulate(ready[p0:p1] - k) + k
        self.steps[i] = steps
        self.place_inputs(ly)
        win, psum = {}, {}
        order: dict[int, int] = {}
        for (rep, _), ags in groups:
            p0, p1 = plan.pixel_range(ly, rep)
            t0, t1 = self.span(steps[p0:p1])
            for a in ags:
                c = a.core
                regs = self.regs[c]
                win[a] = self.mem[c].alloc((a.r1 - a.r0) * eb, t0, t1, f"window {ly.name}")
                psum[a] = self.mem[c].alloc((a.c1 - a.c0) * eb, t0, t1, f"psum {ly.name}")
                site = self.sites[i, 0][c, 0]
                lly = self.local_layer(ly, 0, site)
                k = order[c] = order.get(c, -1) + 1
                for cls in window_classes(ly, p0, p1):
                    b = Block(len(cls.pixels))
                    segs, zeros = window_padding(lly, cls, a.r0, a.r1)
                    for s, n in zeros:
                        emit_zero(b, win[a] + s * eb, n * eb)
                    for s, n, off in segs:
                        b.add(
                            Opcode.LMV,
                            rd=regs.loc(win[a] + (s - a.r0) * eb, b),
                            r1=R_ZERO,
                            generic1=OFFSET_RS1,
                            generic2=site.byte(off, eb),
                            generic3=n * eb,
                        )
                    b.add(
                        Opcode.MVMUL,
                        rd=regs.loc(psum[a], b),
                        r1=regs.loc(win[a], b),
                        r2_or_imm=self.arch.weight_bits,
                        generic2=plan.group_id[a],
                    )
                    self.ks[c].add(b, ll_key(steps[cls.pixels], 0, i, 0, k, self.nl))
        transfer = 0
        self.produced[i] = []
        for gi, ((rep, _), ags) in enumerate(groups):
            p0, p1 = plan.pixel_range(ly, rep)
            p = np.arange(p0, p1)
            st = steps[p0:p1]
            acc = ags[0].core
            cols, c0, c1 = ags[0].c1 - ags[0].c0, ags[0].c0, ags[0].c1
            heads = {}
            for c in sorted({a.core for a in ags}):
                local = [a for a in ags if a.core == c]
                heads[c] = psum[local[0]]
                if len(local) > 1:
                    b = Block(len(p))
                    for a in local[1:]:
                        emit_vv(b, self.regs[c], Opcode.VVADD, heads[c], heads[c], psum[a], cols)
                    self.ks[c].add(b, ll_key(st, 0, i, 1, gi, self.nl))
            senders = [c for c in sorted(heads) if c != acc]
            t0, t1 = self.span(st)
            tmp = self.mem[acc].alloc(cols * eb, t0, t1, f"tmp {ly.name}")
            for s_i, s in enumerate(senders):
                b = Block(len(p))
                b.add(
                    Opcode.SEND, rd=self.regs[s].loc(heads[s], b), r2_or_imm=acc, generic3=cols * eb
                )
                self.ks[s].add(b, ll_key(st, 0, i, 2, transfer + s_i, self.nl))
                b = Block(len(p))
                b.add(Opcode.RECV, rd=self.regs[acc].loc(tmp, b), r2_or_imm=s, generic3=cols * eb)
                emit_vv(b, self.regs[acc], Opcode.VVADD, heads[acc], heads[acc], tmp, cols)
                self.ks[acc].add(b, ll_key(st, 0, i, 2, transfer + s_i, self.nl))
            transfer += len(senders)
            bias = self.biases.get((acc, i, c0))
            if bias is None:  # one copy per core (loaded at the start, freed after the layer)
                _, t1 = self.span(steps)
                bias = self.mem[acc].alloc(cols * eb, PROLOGUE, t1, f"bias {ly.name}")
                self.biases[acc, i, c0] = bias
                self.pro[acc].append(
                    make(Opcode.SLDI, rd=R_CONST, r2_or_imm=plan.address[ly.bias_buffer])
                )
                self.prologue_ld(acc, bias, R_CONST, c0 * eb, cols * eb)
            b = Block(len(p))
            r = self.regs[acc]
            emit_vv(b, r, Opcode.VVADD, heads[acc], heads[acc], bias, cols)
            emit_activation(b, r, ly.activation, heads[acc], tmp, cols)
            self.store_output(b, acc, ly, p, heads[acc], c0, c1)
            self.ks[acc].add(b, ll_key(st, 0, i, 3, gi, self.nl))
            self.produced[i].append((acc, p, np.full(len(p), heads[acc]), c0, c1))

    def forward(self, ly: Layer) -> None:
        """Transfers of every produced pixel of ly to the cores that read it (IG end)."""
        eb, o = self.eb, ly.output
        consumers = [
            (c_ly, vi)
            for c_ly in self.sg.layers
            for vi, v in enumerate(c_ly.inputs)
            if v.buffer == o.buffer
        ]
        rows = []  # (step, src core, dst core, src addr, dst addr, size)
        for src_core, p, src_addr, c0, c1 in self.produced[ly.index]:
            e = o.channel_offset + p * o.pixel_stride + c0
            for c_ly, vi in consumers:
                v = c_ly.inputs[vi]
                rel = e - v.channel_offset
                vp = rel // max(1, v.pixel_stride) if v.pixels > 1 else np.zeros_like(rel)
                cc = rel - vp * v.pixel_stride if v.pixels > 1 else rel
                ok = (cc >= 0) & (cc + (c1 - c0) <= v.channels)
                for (dst, _), site in sorted(self.sites[c_ly.index, vi].items(), key=_first):
                    m = ok & (vp >= site.base) & (vp < site.base + site.pixels)
                    m[m] = site.read[vp[m] - site.base]
                    if not m.any():
                        continue
                    rows.append(
                        (
                            self.steps[ly.index][p[m]],
                            np.full(m.sum(), src_core),
                            np.full(m.sum(), dst),
                            src_addr[m],
                            site.byte((vp[m] - site.base) * v.channels + cc[m], eb),
                            (c1 - c0) * eb,
                        )
                    )
        if not rows:
            return
        st = np.concatenate([r[0] for r in rows])
        src = np.concatenate([r[1] for r in rows])
        dst = np.concatenate([r[2] for r in rows])
        sa = np.concatenate([r[3] for r in rows])
        da = np.concatenate([r[4] for r in rows])
        size = np.concatenate([np.full(len(r[0]), r[5]) for r in rows])
        sub = np.empty(len(st), np.int64)
        sub[np.lexsort((da, dst, src, st))] = np.arange(len(st))
        key = ll_key(st, 1, ly.index, 0, sub, self.nl)
        T = TEMPS[0]
        for s_core in np.unique(src):
            for d_core in np.unique(dst[src == s_core]):
                m = (src == s_core) & (dst == d_core)
                for sz in np.unique(size[m]):
                    mm = m & (size == sz)
                    n = int(mm.sum())
                    if s_core == d_core:
                        b = Block(n)
                        b.add(Opcode.SLDI, rd=T, r2_or_imm=sa[mm])
                        b.add(
                            Opcode.LMV,
                            rd=R_ZERO,
                            r1=T,
                            generic1=OFFSET_RD,
                            generic2=da[mm],
                            generic3=int(sz),
                        )
                        self.ks[s_core].add(b, key[mm])
                        continue
                    b = Block(n)
                    b.add(Opcode.SLDI, rd=T, r2_or_imm=sa[mm])
                    b.add(Opcode.SEND, rd=T, r2_or_imm=int(d_core), generic3=int(sz))
                    self.ks[s_core].add(b, key[mm])
                    b = Block(n)
                    b.add(
                        Opcode.RECV,
                        rd=R_ZERO,
                        r2_or_imm=int(s_core),
                        generic1=OFFSET_RD,
                        generic2=da[mm],
                        generic3=int(sz),
                    )
                    self.ks[d_core].add(b, key[mm])


def schedule_ll(plan: Plan, opts) -> tuple[list[np.ndarray], dict]:
    """Per-core streams of the LL schedule and their statistics."""

    ll = _LL(plan)
    for ly in plan.sg.layers:
        if ly.kind == LayerKind.GEMM:
            ll.gemm(ly)
        else:
            ll.vector(ly)
    for ly in plan.sg.layers:
        ll.forward(ly)
    cores = []
    for c in range(plan.arch.core_count):
        body = ll.ks[c].build()
        segs = ll.regs[c].flush() + [body] if len(body) else []
        cores.append(finish_core(plan.arch, segs, []))
    ig = int(max((s.max() for s in ll.steps.values()), default=-1)) + 1
    return cores, {
        "local_memory_peak_bytes": [m.top for m in ll.mem],
        "local_memory_live_peak_bytes": [m.live_peak() for m in ll.mem],
        "nodes_per_core": [int(u) for u in ll.used],
        "instruction_groups": ig,
    }
