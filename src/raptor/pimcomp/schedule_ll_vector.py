"""Pool, Add and activation layers of the LL schedule (schedule_ll.py): the row ranges a vector
layer is split into when its live inputs would fill more than VECTOR_SHARE of one core, and
their instructions."""

from __future__ import annotations

import numpy as np

from raptor.errors import UnsupportedOpError
from raptor.isa.opcodes import OFFSET_RD, OFFSET_RS1, Opcode
from raptor.isa.table import make
from raptor.pim.emit import R_CONST, R_OUT, R_ZERO, TEMPS, Block
from raptor.pimcomp.memory import PROLOGUE
from raptor.spatial.geometry import pool_counts, window_classes
from raptor.spatial.ir import BufferRole, Layer, LayerKind

SUB = 1 << 26
VECTOR_SHARE = 1 / 8  # of local memory a pool/Add/activation core may fill with live inputs


def ll_key(step, stage: int, layer: int, phase: int, sub, n_layers: int) -> np.ndarray:
    """Sort key of an LL record: IG step, stage, layer, phase and sub-order."""
    step = np.asarray(step, dtype=np.int64)
    return (((step * 2 + stage) * n_layers + layer) * 4 + phase) * SUB + np.asarray(sub, np.int64)


class VectorLayers:
    """The vector-layer part of the LL schedule's state machine (mixed into it: uses its plan,
    local memories, key streams and pixel steps)."""

    def vector_parts(self, ly: Layer, steps: np.ndarray) -> list[tuple[int, int, int]]:
        """(core, first, end output pixel) of each part of a pool/Add/activation layer: one part
        on core `index mod #cores` (released code) unless the input pixels live at once on that
        core would exceed VECTOR_SHARE of local memory; then k parts of whole output rows on
        cores spread over the chip (as DAC'23 splits such ops by the predecessor's replicas)."""
        n = self.arch.core_count
        oh, ow = ly.output.height, ly.output.width
        live = 0
        for vi, v in enumerate(ly.inputs):
            if self.sg.buffers[v.buffer].role == BufferRole.INPUT:
                arr = np.full(v.pixels, PROLOGUE, np.int64)
            else:
                arr = 2 * self.view_steps(v, first=True) + 1
            last = np.maximum(2 * self.last_use(ly, vi, steps), arr)
            t = np.concatenate([arr, last + 1])
            d = np.concatenate([np.ones(v.pixels, np.int64), -np.ones(v.pixels, np.int64)])
            live += int(np.cumsum(d[np.lexsort((d, t))]).max()) * v.channels * self.eb
        budget = self.arch.core.local_memory.memory_size * VECTOR_SHARE
        k = max(1, min(int(-(-live // budget)), oh, n))
        edges = np.linspace(0, oh, k + 1).round().astype(int)
        return [
            ((ly.index + j * (n // k)) % n, int(edges[j]) * ow, int(edges[j + 1]) * ow)
            for j in range(k)
        ]

    def vector(self, ly: Layer) -> None:
        eb, i = self.eb, ly.index
        steps = self.ready(ly)
        self.steps[i] = steps
        self.vparts[i] = self.vector_parts(ly, steps)
        self.place_inputs(ly)
        ch = ly.output.channels
        T = TEMPS[0]
        self.produced[i] = []
        for part, (c, q0, q1) in enumerate(self.vparts[i]):
            self.used[c] = True
            st = steps[q0:q1]
            # staging slot of each output pixel: its rank among the part's pixels of its IG
            order = np.lexsort((np.arange(len(st)), st))
            slot = np.empty(len(st), np.int64)
            first = np.searchsorted(st[order], st[order], side="left")
            slot[order] = np.arange(len(st)) - first
            t0, t1 = self.span(st)
            size = (int(slot.max()) + 1) * ch * eb
            stage = self.mem[c].alloc(size, t0, t1, f"stage {ly.name}")
            out = np.zeros(ly.out_pixels, np.int64)
            out[q0:q1] = stage + slot * ch * eb
            if ly.kind in (LayerKind.MAXPOOL, LayerKind.AVGPOOL):
                site = self.sites[i, 0][c, part]
                v = ly.inputs[0]
                op = Opcode.VVMAX if ly.kind == LayerKind.MAXPOOL else Opcode.VVADD
                recip = None
                if ly.kind == LayerKind.AVGPOOL:
                    counts = pool_counts(ly)
                    size = len(counts) * ch * eb
                    recip = self.mem[c].alloc(size, PROLOGUE, t1, f"recip {ly.name}")
                    self.pro[c].append(
                        make(
                            Opcode.SLDI,
                            rd=R_CONST,
                            r2_or_imm=self.plan.address[f"{ly.name}.recip"],
                        )
                    )
                    self.prologue_ld(c, recip, R_CONST, 0, size)
                for cls in window_classes(ly, q0, q1):
                    b = Block(len(cls.pixels))
                    o = out[cls.pixels]
                    b.add(Opcode.SLDI, rd=TEMPS[1], r2_or_imm=o)
                    first_pos = True
                    for ii in range(cls.ilo, cls.ihi):
                        for j in range(cls.jlo, cls.jhi):
                            q = (cls.iy0 + ii) * v.width + cls.ix0 + j
                            src = site.byte((q - site.base) * ch, eb)
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
                        b.add(
                            Opcode.VVMUL, rd=TEMPS[1], r1=TEMPS[1], r2_or_imm=TEMPS[2], generic3=ch
                        )
                    self._finish_vector(b, c, ly, cls.pixels, steps, o)
            else:
                p = np.arange(q0, q1)
                b = Block(len(p))
                b.add(Opcode.SLDI, rd=TEMPS[1], r2_or_imm=out[p])
                srcs = []
                for vi in range(len(ly.inputs)):
                    site = self.sites[i, vi][c, part]
                    srcs.append(site.byte((p - site.base) * ch, eb))
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
                self._finish_vector(b, c, ly, p, steps, out[p])
            self.produced[i].append((c, np.arange(q0, q1), out[q0:q1], 0, ch))

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
        self.ks[c].add(b, ll_key(steps[p], 0, ly.index, 3, 0, self.nl))

    # ------------------------------------------------------------------ forwarding
