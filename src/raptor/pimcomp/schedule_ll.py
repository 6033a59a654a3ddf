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
Input buffers hold each core's whole needed pixel range (no pixel-level freeing).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from raptor.errors import UnsupportedOpError
from raptor.isa.opcodes import OFFSET_RD, OFFSET_RS1, Opcode
from raptor.isa.table import make
from raptor.pim.lowering import (
    R_CONST,
    R_OUT,
    R_ZERO,
    TEMPS,
    Block,
    Regs,
    emit_activation,
    emit_vv,
    window_segments,
    zero_runs,
)
from raptor.pim.memalloc import LocalAllocator
from raptor.pimcomp.program import KeyedStream, Plan
from raptor.spatial.geometry import pool_counts, window_classes
from raptor.spatial.ir import BufferRole, Layer, LayerKind, TensorView

SUB = 1 << 26


def _key(step, stage: int, layer: int, phase: int, sub, n_layers: int) -> np.ndarray:
    step = np.asarray(step, dtype=np.int64)
    return (((step * 2 + stage) * n_layers + layer) * 4 + phase) * SUB + np.asarray(sub, np.int64)


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


class _LL:
    def __init__(self, plan: Plan):
        self.plan, self.arch, self.sg = plan, plan.arch, plan.sg
        self.eb = plan.arch.element_bytes
        self.nl = len(self.sg.layers)
        n = self.arch.core_count
        self.alloc = [
            LocalAllocator(self.arch.core.local_memory.memory_size, c, "pimcomp LL program")
            for c in range(n)
        ]
        self.pro: list[list[np.ndarray]] = [[] for _ in range(n)]
        self.regs = [Regs(self.pro[c]) for c in range(n)]
        self.ks = [KeyedStream() for _ in range(n)]
        self.used = [False] * n
        self.steps: dict[int, np.ndarray] = {}
        # (layer, view index) -> {core: (local byte address, first view pixel, pixels)}
        self.sites: dict[tuple[int, int], dict[int, tuple[int, int, int]]] = {}
        # layer -> list of (core, pixel array, source local address per pixel, c0, c1)
        self.produced: dict[int, list] = {}

    # ------------------------------------------------------------------ placement of inputs
    def post_core(self, ly: Layer) -> int:
        return ly.index % self.arch.core_count

    def needed(self, ly: Layer, vi: int) -> dict[int, tuple[int, int]]:
        """Cores that read view vi of layer ly and the view pixel range each needs."""
        v = ly.inputs[vi]
        if ly.kind != LayerKind.GEMM:
            return {self.post_core(ly): (0, v.pixels)}
        out: dict[int, tuple[int, int]] = {}
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
            for a in ags:
                a_lo, a_hi = out.get(a.core, (lo, hi))
                out[a.core] = (min(lo, a_lo), max(hi, a_hi))
        return out

    def view_steps(self, v: TensorView) -> np.ndarray:
        """IG in which each view pixel is complete (-1: network input, loaded at the start)."""
        st = np.full(v.pixels, -1, np.int64)
        for ly in self.sg.layers:
            o = ly.output
            if o.buffer != v.buffer or ly.index not in self.steps:
                continue
            q = np.arange(o.pixels)
            p = (o.channel_offset + q * o.pixel_stride - v.channel_offset) // max(1, v.pixel_stride)
            np.maximum.at(st, np.clip(p, 0, v.pixels - 1), self.steps[ly.index])
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
    def local_view(self, ly: Layer, vi: int, core: int) -> tuple[Layer, int]:
        """Layer whose input 0 addresses the core's local buffer of view vi (elements from the
        buffer start), and the buffer's byte address."""
        v = ly.inputs[vi]
        addr, base, _ = self.sites[ly.index, vi][core]
        lv = TensorView(v.buffer, v.channels, v.height, v.width, -base * v.channels, v.channels)
        return replace(ly, inputs=(lv,)), addr

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
        eb = self.eb
        for vi, v in enumerate(ly.inputs):
            sites = {}
            for core, (lo, hi) in self.needed(ly, vi).items():
                addr = self.alloc[core].alloc((hi - lo) * v.channels * eb, f"in {ly.name}")
                sites[core] = (addr, lo, hi - lo)
                self.used[core] = True
                if self.sg.buffers[v.buffer].role == BufferRole.INPUT:
                    if not v.contiguous:
                        raise UnsupportedOpError(f"pimcomp LL: strided network input {v.buffer}")
                    self.pro[core].append(
                        make(Opcode.SLDI, rd=R_CONST, r2_or_imm=self.plan.address[v.buffer])
                    )
                    self.prologue_ld(
                        core,
                        addr,
                        R_CONST,
                        (v.channel_offset + lo * v.channels) * eb,
                        (hi - lo) * v.channels * eb,
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
            for a in ags:
                c = a.core
                regs = self.regs[c]
                win[a] = self.alloc[c].alloc((a.r1 - a.r0) * eb, "window")
                psum[a] = self.alloc[c].alloc((a.c1 - a.c0) * eb, "psum")
                lly, _ = self.local_view(ly, 0, c)
                k = order[c] = order.get(c, -1) + 1
                for cls in window_classes(ly, p0, p1):
                    b = Block(len(cls.pixels))
                    segs = window_segments(lly, cls, a.r0, a.r1)
                    covered = np.zeros(a.r1 - a.r0, bool)
                    for s, n, _ in segs:
                        covered[s - a.r0 : s - a.r0 + n] = True
                    for s, n in zero_runs(covered):
                        b.add(
                            Opcode.LLDI,
                            rd=R_ZERO,
                            generic1=OFFSET_RD,
                            generic2=win[a] + s * eb,
                            generic3=n * eb,
                        )
                    addr = self.sites[i, 0][c][0]
                    for s, n, off in segs:
                        b.add(
                            Opcode.LMV,
                            rd=regs.loc(win[a] + (s - a.r0) * eb, b),
                            r1=R_ZERO,
                            generic1=OFFSET_RS1,
                            generic2=addr + off * eb,
                            generic3=n * eb,
                        )
                    b.add(
                        Opcode.MVMUL,
                        rd=regs.loc(psum[a], b),
                        r1=regs.loc(win[a], b),
                        r2_or_imm=self.arch.weight_bits,
                        generic2=plan.group_id[a],
                    )
                    self.ks[c].add(b, _key(steps[cls.pixels], 0, i, 0, k, self.nl))
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
                    self.ks[c].add(b, _key(st, 0, i, 1, gi, self.nl))
            senders = [c for c in sorted(heads) if c != acc]
            tmp = self.alloc[acc].alloc(cols * eb, "tmp")
            for s_i, s in enumerate(senders):
                b = Block(len(p))
                b.add(
                    Opcode.SEND, rd=self.regs[s].loc(heads[s], b), r2_or_imm=acc, generic3=cols * eb
                )
                self.ks[s].add(b, _key(st, 0, i, 2, transfer + s_i, self.nl))
                b = Block(len(p))
                b.add(Opcode.RECV, rd=self.regs[acc].loc(tmp, b), r2_or_imm=s, generic3=cols * eb)
                emit_vv(b, self.regs[acc], Opcode.VVADD, heads[acc], heads[acc], tmp, cols)
                self.ks[acc].add(b, _key(st, 0, i, 2, transfer + s_i, self.nl))
            transfer += len(senders)
            bias = self.alloc[acc].alloc(cols * eb, "bias")
            self.pro[acc].append(
                make(Opcode.SLDI, rd=R_CONST, r2_or_imm=plan.address[ly.bias_buffer])
            )
            self.prologue_ld(acc, bias, R_CONST, c0 * eb, cols * eb)
            b = Block(len(p))
            r = self.regs[acc]
            emit_vv(b, r, Opcode.VVADD, heads[acc], heads[acc], bias, cols)
            emit_activation(b, r, ly.activation, heads[acc], tmp, cols)
            self.store_output(b, acc, ly, p, heads[acc], c0, c1)
            self.ks[acc].add(b, _key(st, 0, i, 3, gi, self.nl))
            self.produced[i].append((acc, p, np.full(len(p), heads[acc]), c0, c1))

    def vector(self, ly: Layer) -> None:
        eb, i = self.eb, ly.index
        c = self.post_core(ly)
        self.used[c] = True
        steps = self.ready(ly)
        self.steps[i] = steps
        self.place_inputs(ly)
        ch = ly.output.channels
        # staging slot of each output pixel: its rank among the pixels of its IG
        order = np.lexsort((np.arange(len(steps)), steps))
        slot = np.empty(len(steps), np.int64)
        first = np.searchsorted(steps[order], steps[order], side="left")
        slot[order] = np.arange(len(steps)) - first
        stage = self.alloc[c].alloc((int(slot.max()) + 1) * ch * eb, "stage")
        out = stage + slot * ch * eb
        T = TEMPS[0]
        if ly.kind in (LayerKind.MAXPOOL, LayerKind.AVGPOOL):
            lly, addr = self.local_view(ly, 0, c)
            v = lly.inputs[0]
            op = Opcode.VVMAX if ly.kind == LayerKind.MAXPOOL else Opcode.VVADD
            recip = None
            if ly.kind == LayerKind.AVGPOOL:
                counts = pool_counts(ly)
                recip = self.alloc[c].alloc(len(counts) * ch * eb, "recip")
                self.pro[c].append(
                    make(Opcode.SLDI, rd=R_CONST, r2_or_imm=self.plan.address[f"{ly.name}.recip"])
                )
                self.prologue_ld(c, recip, R_CONST, 0, len(counts) * ch * eb)
            for cls in window_classes(ly, 0, ly.out_pixels):
                b = Block(len(cls.pixels))
                o = out[cls.pixels]
                b.add(Opcode.SLDI, rd=TEMPS[1], r2_or_imm=o)
                first_pos = True
                for ii in range(cls.ilo, cls.ihi):
                    for j in range(cls.jlo, cls.jhi):
                        q = (cls.iy0 + ii) * v.width + cls.ix0 + j
                        src = addr + (v.channel_offset + q * ch) * eb
                        if first_pos:
                            b.add(
                                Opcode.LMV,
                                rd=TEMPS[1],
                                r1=R_ZERO,
                                generic1=OFFSET_RS1,
                                generic2=src,
                                generic3=ch * eb,
                            )
                            first_pos = False
                        else:
                            b.add(Opcode.SLDI, rd=T, r2_or_imm=src)
                            b.add(op, rd=TEMPS[1], r1=TEMPS[1], r2_or_imm=T, generic3=ch)
                if recip is not None:
                    kk = pool_counts(ly).index(
                        ly.kernel_shape[0] * ly.kernel_shape[1]
                        if ly.count_include_pad
                        else cls.count
                    )
                    b.add(Opcode.SLDI, rd=TEMPS[2], r2_or_imm=recip + kk * ch * eb)
                    b.add(Opcode.VVMUL, rd=TEMPS[1], r1=TEMPS[1], r2_or_imm=TEMPS[2], generic3=ch)
                self._finish_vector(b, c, ly, cls.pixels, steps, o)
        else:
            p = np.arange(ly.out_pixels)
            b = Block(len(p))
            b.add(Opcode.SLDI, rd=TEMPS[1], r2_or_imm=out)
            srcs = []
            for vi in range(len(ly.inputs)):
                lly, addr = self.local_view(ly, vi, c)
                srcs.append(addr + (lly.inputs[0].channel_offset + p * ch) * eb)
            b.add(
                Opcode.LMV,
                rd=TEMPS[1],
                r1=R_ZERO,
                generic1=OFFSET_RS1,
                generic2=srcs[0],
                generic3=ch * eb,
            )
            for s in srcs[1:]:
                b.add(Opcode.SLDI, rd=T, r2_or_imm=s)
                b.add(Opcode.VVADD, rd=TEMPS[1], r1=TEMPS[1], r2_or_imm=T, generic3=ch)
            self._finish_vector(b, c, ly, p, steps, out)
        self.produced[i] = [(c, np.arange(ly.out_pixels), out, 0, ch)]

    def _finish_vector(self, b: Block, c: int, ly: Layer, p, steps, out) -> None:
        ch = ly.output.channels
        if ly.activation == "silu":
            raise UnsupportedOpError(f"pimcomp LL: silu on vector layer {ly.name}")
        if ly.activation == "relu":
            b.add(Opcode.VRELU, rd=TEMPS[1], r1=TEMPS[1], generic3=ch)
        elif ly.activation == "sigmoid":
            b.add(Opcode.VSIGM, rd=TEMPS[1], r1=TEMPS[1], generic3=ch)
        o = ly.output
        if self.sg.buffers[o.buffer].role == BufferRole.OUTPUT:
            b.add(Opcode.SLDI, rd=R_OUT, r2_or_imm=self.plan.address[o.buffer])
            b.add(
                Opcode.ST,
                rd=R_OUT,
                r1=TEMPS[1],
                generic1=OFFSET_RD,
                generic2=(o.channel_offset + p * o.pixel_stride) * self.eb,
                generic3=ch * self.eb,
            )
        self.ks[c].add(b, _key(steps[p], 0, ly.index, 3, 0, self.nl))

    # ------------------------------------------------------------------ forwarding
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
                for dst, (addr, base, n) in sorted(self.sites[c_ly.index, vi].items()):
                    m = ok & (vp >= base) & (vp < base + n)
                    if not m.any():
                        continue
                    rows.append(
                        (
                            self.steps[ly.index][p[m]],
                            np.full(m.sum(), src_core),
                            np.full(m.sum(), dst),
                            src_addr[m],
                            addr + ((vp[m] - base) * v.channels + cc[m]) * eb,
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
        key = _key(st, 1, ly.index, 0, sub, self.nl)
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
    from raptor.pimcomp import finish_core

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
        "local_memory_peak_bytes": [a.top for a in ll.alloc],
        "nodes_per_core": [int(u) for u in ll.used],
        "instruction_groups": ig,
    }
