"""Generic vector-unit tensor ops over strided views (yolo11n's non-convolution work).

A `SView` says where an N-D tensor lives in a host buffer: element idx is at
`offset + sum(idx[d] * strides[d])` (elements). Reshape (when strides allow), Transpose, Split
and Slice are views; everything else is a `TENSOR` layer whose `TensorSpec` carries a lane plan
computed here with numpy once per layer:

* ``copy``: ``runs`` (ld a contiguous run, st it once or, for stride-0 source dims as in Resize,
  several times) or ``transpose`` (ld a tile, vmv-gather its columns, st them as rows).
* ``binary`` / ``unary``: contiguous runs of every operand; a constant operand is materialised
  in the output's layout in a host CONST buffer (or loaded once when it is the same for every lane).
* ``softmax``: rows along the axis (stride 1), several adjacent rows per lane (vsoftmax each).
* ``matmul``: activation x activation on the vector unit: C[i, j] = vvdmul(A[i, :], Bt[j, :]),
  a tile of Bt rows resident in local memory, lanes = output rows.

A lane is one unit of work of the plan; compute nodes split a layer by lane ranges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CHUNK_ELEMS = 8192  # longest run one lane moves (elements)
TILE_ELEMS = 16384  # largest transpose tile (elements)


@dataclass(frozen=True)
class SView:
    buffer: str
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def dense_strides(shape: tuple[int, ...], order: list[int]) -> tuple[int, ...]:
    """Strides of a dense layout whose axes run `order` slowest to fastest."""
    st = [0] * len(shape)
    s = 1
    for ax in reversed(order):
        st[ax] = s
        s *= shape[ax]
    return tuple(st)


def nhwc_order(ndim: int) -> list[int]:
    return [0, 2, 3, 1] if ndim == 4 else list(range(ndim))


def stride_order(v: SView) -> list[int]:
    """Axes of v from slowest to fastest (ties keep axis order)."""
    return sorted(range(len(v.shape)), key=lambda a: (-v.strides[a] if v.shape[a] > 1 else 1, a))


def reshape_view(v: SView, shape: tuple[int, ...]) -> SView | None:
    """The view of v reshaped (row-major element order) without a copy, or None."""
    old = [(n, s) for n, s in zip(v.shape, v.strides) if n != 1]
    new_shape = tuple(int(x) for x in shape)
    new = [i for i, n in enumerate(new_shape) if n != 1]
    strides = [0] * len(new_shape)
    i = j = 0
    while i < len(old) and j < len(new):
        # grow groups of old dims [i, i2) and new dims [j, j2) until their products match
        i2, j2 = i + 1, j + 1
        po, pn = old[i][0], new_shape[new[j]]
        while po != pn:
            if po < pn:
                po *= old[i2][0]
                i2 += 1
            else:
                pn *= new_shape[new[j2]]
                j2 += 1
        for k in range(i, i2 - 1):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        s = old[i2 - 1][1]
        for k in range(j2 - 1, j - 1, -1):
            strides[new[k]] = s
            s *= new_shape[new[k]]
        i, j = i2, j2
    if i != len(old) or j != len(new):
        return None
    return SView(v.buffer, v.offset, new_shape, tuple(strides))


def transpose_view(v: SView, perm: tuple[int, ...]) -> SView:
    return SView(
        v.buffer, v.offset, tuple(v.shape[p] for p in perm), tuple(v.strides[p] for p in perm)
    )


def slice_view(v: SView, axis: int, start: int, stop: int) -> SView:
    shape = list(v.shape)
    shape[axis] = stop - start
    return SView(v.buffer, v.offset + start * v.strides[axis], tuple(shape), v.strides)


def _offsets(shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """Element offsets of every index of `shape` (row-major order), as a flat int64 array."""
    off = np.zeros(1, np.int64)
    for n, s in zip(shape, strides):
        off = (off[:, None] + np.arange(n, dtype=np.int64)[None, :] * s).ravel()
    return off


def _merge(shape, stride_sets):
    """Drop size-1 dims and merge adjacent dims contiguous in every stride set."""
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    sh = [shape[d] for d in keep]
    ss = [[st[d] for d in keep] for st in stride_sets]
    k = 0
    while k + 1 < len(sh):
        if all(st[k] == st[k + 1] * sh[k + 1] for st in ss):
            sh[k] *= sh[k + 1]
            for st in ss:
                st[k] = st[k + 1]
                del st[k + 1]
            del sh[k + 1]
        else:
            k += 1
    return sh, ss


@dataclass
class TensorSpec:
    """What a TENSOR layer computes and its lane plan (see the module docstring)."""

    op: str  # copy | binary | unary | softmax | matmul
    ins: tuple[SView, ...]
    out: SView
    func: str = ""  # binary: vvadd/vvsub/vvmul; unary: vsigm/vrelu
    const_index: int = -1  # binary: which operand is a CONST buffer (-1 none)
    const_uniform: bool = False  # the constant run is the same for every lane (loaded once)
    mode: str = "runs"  # copy: runs | transpose
    # runs plans: per-lane element offsets of every operand (in order ins..., out) and run length
    offs: list[np.ndarray] = field(default_factory=list)
    lens: np.ndarray | None = None
    dup: np.ndarray | None = None  # copy runs: (k,) extra output offsets added per duplicate
    # softmax: row length; transpose: (la, a_src_stride... ) see plan builders
    row: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def lanes(self) -> int:
        return int(len(self.lens)) if self.lens is not None else 0


def _run_plan(shape, views: list[SView], chunk: int = CHUNK_ELEMS):
    """Lanes of contiguous runs common to all views (first view decides the dim order)."""
    order = stride_order(views[0]) if len(views[0].shape) else []
    shp = [shape[a] for a in order]
    sets = [[v.strides[a] for a in order] for v in views]
    sh, ss = _merge(shp, sets)
    if not sh:
        sh, ss = [1], [[1] for _ in views]
    if all(st[-1] == 1 for st in ss):
        inner = sh[-1]
        outer_sh, outer_ss = sh[:-1], [st[:-1] for st in ss]
    else:
        inner = 1
        outer_sh, outer_ss = sh, ss
    n_chunks = -(-inner // chunk)
    step = -(-inner // n_chunks)
    starts = np.arange(0, inner, step, dtype=np.int64)
    clen = np.minimum(step, inner - starts)
    offs = []
    for v, st in zip(views, outer_ss):
        o = _offsets(tuple(outer_sh), tuple(st)) + v.offset
        offs.append((o[:, None] + starts[None, :]).ravel())
    lens = np.tile(clen, len(offs[0]) // len(clen) if len(clen) else 0)
    return offs, lens


def copy_spec(src: SView, dst: SView) -> TensorSpec:
    """dst[...] = src[...] (same shape); stride-0 dims of src become duplicate stores."""
    assert src.shape == dst.shape, (src.shape, dst.shape)
    nd = len(src.shape)
    zero = [d for d in range(nd) if src.strides[d] == 0 and src.shape[d] > 1]
    if zero:
        # duplicated stores: iterate the broadcast dims inside the lane
        dup = _offsets(tuple(src.shape[d] for d in zero), tuple(dst.strides[d] for d in zero))
        keep = [d for d in range(nd) if d not in zero]
        s2 = SView(
            src.buffer,
            src.offset,
            tuple(src.shape[d] for d in keep),
            tuple(src.strides[d] for d in keep),
        )
        d2 = SView(dst.buffer, dst.offset, s2.shape, tuple(dst.strides[d] for d in keep))
        spec = copy_spec(s2, d2)
        if spec.mode != "runs":
            raise NotImplementedError("broadcast copy with a transposed source")
        spec.ins, spec.out, spec.dup = (src,), dst, dup
        return spec
    order = stride_order(dst)
    shp = [src.shape[a] for a in order]
    sh, (ssrc, sdst) = _merge(
        shp, [[src.strides[a] for a in order], [dst.strides[a] for a in order]]
    )
    if not sh or (ssrc[-1] == 1 and sdst[-1] == 1):
        offs, lens = _run_plan(src.shape, [dst, src])
        return TensorSpec("copy", (src,), dst, offs=[offs[1], offs[0]], lens=lens)
    # transposed: b = dst-contiguous dim (last), a = the src-contiguous dim
    if sdst[-1] != 1 or 1 not in ssrc:
        offs, lens = _run_plan(src.shape, [dst, src], chunk=1)
        return TensorSpec("copy", (src,), dst, offs=[offs[1], offs[0]], lens=lens)
    b = len(sh) - 1
    a = ssrc.index(1)
    la, lb = sh[a], sh[b]
    sb_src, sa_dst = ssrc[b], sdst[a]
    tb = max(1, min(lb, TILE_ELEMS // la))
    nt = -(-lb // tb)
    tb = -(-lb // nt)
    outer = [d for d in range(len(sh)) if d not in (a, b)]
    o_src = _offsets(tuple(sh[d] for d in outer), tuple(ssrc[d] for d in outer)) + src.offset
    o_dst = _offsets(tuple(sh[d] for d in outer), tuple(sdst[d] for d in outer)) + dst.offset
    b0 = np.arange(0, lb, tb, dtype=np.int64)
    src_l = (o_src[:, None] + b0[None, :] * sb_src).ravel()
    dst_l = (o_dst[:, None] + b0[None, :]).ravel()
    lens = np.tile(np.minimum(tb, lb - b0), len(o_src))
    return TensorSpec(
        "copy",
        (src,),
        dst,
        mode="transpose",
        offs=[src_l, dst_l],
        lens=lens,
        extra={"la": la, "sb_src": sb_src, "sa_dst": sa_dst, "tb": tb},
    )


def elementwise_spec(func: str, ins: list[SView], out: SView, const_index: int = -1) -> TensorSpec:
    op = "binary" if len(ins) == 2 else "unary"
    offs, lens = _run_plan(out.shape, [out, *ins])
    spec = TensorSpec(op, tuple(ins), out, func=func, const_index=const_index)
    spec.offs = [*offs[1:], offs[0]]
    spec.lens = lens
    return spec


def softmax_spec(src: SView, out: SView, axis: int) -> TensorSpec:
    """Softmax along `axis` (stride 1 in src and out): several adjacent rows per lane."""
    n = src.shape[axis]
    assert src.strides[axis] == 1 and out.strides[axis] == 1
    other = [d for d in stride_order(src) if d != axis]
    # rows adjacent in both views (next dim of stride n) ride in one lane
    rows_dim = None
    for d in other:
        if src.shape[d] > 1 and src.strides[d] == n and out.strides[d] == n:
            rows_dim = d
    r = src.shape[rows_dim] if rows_dim is not None else 1
    r = max(1, min(r, CHUNK_ELEMS // n))
    outer = [d for d in range(len(src.shape)) if d != axis]
    shape = [src.shape[d] for d in outer]
    if rows_dim is not None:
        k = outer.index(rows_dim)
        nb = -(-src.shape[rows_dim] // r)
        r = -(-src.shape[rows_dim] // nb)
        starts = np.arange(0, src.shape[rows_dim], r, dtype=np.int64)
        rows = np.minimum(r, src.shape[rows_dim] - starts)
        shape[k] = 1
        o_in = _offsets(tuple(shape), tuple(src.strides[d] for d in outer)) + src.offset
        o_out = _offsets(tuple(shape), tuple(out.strides[d] for d in outer)) + out.offset
        offs = [
            (o_in[:, None] + starts[None, :] * n).ravel(),
            (o_out[:, None] + starts[None, :] * n).ravel(),
        ]
        lens = np.tile(rows, len(o_in))
    else:
        offs = [
            _offsets(tuple(shape), tuple(src.strides[d] for d in outer)) + src.offset,
            _offsets(tuple(shape), tuple(out.strides[d] for d in outer)) + out.offset,
        ]
        lens = np.ones(len(offs[0]), np.int64)
    return TensorSpec("softmax", (src,), out, offs=offs, lens=lens, row=n)


def matmul_spec(a: SView, bt: SView, out: SView) -> TensorSpec:
    """out[..., i, j] = sum_k a[..., i, k] * bt[..., j, k]; k has stride 1 in a and bt, j stride
    1 in out. Lanes = (batch, i) in row-major order."""
    *batch, m, k = a.shape
    n = bt.shape[-2]
    assert a.strides[-1] == 1 and bt.strides[-1] == 1 and out.strides[-1] == 1
    bshape = tuple(batch)
    ob_a = _offsets(bshape, a.strides[:-2]) + a.offset
    ob_b = _offsets(bshape, bt.strides[:-2]) + bt.offset
    ob_o = _offsets(bshape, out.strides[:-2]) + out.offset
    i = np.arange(m, dtype=np.int64)
    offs = [
        (ob_a[:, None] + i[None, :] * a.strides[-2]).ravel(),
        (ob_o[:, None] + i[None, :] * out.strides[-2]).ravel(),
    ]
    tn = max(1, min(n, (TILE_ELEMS * 2) // k))
    nt = -(-n // tn)
    tn = -(-n // nt)
    return TensorSpec(
        "matmul",
        (a, bt),
        out,
        offs=offs,
        lens=np.full(len(offs[0]), n, np.int64),
        extra={"m": m, "k": k, "n": n, "tn": tn, "bt_base": ob_b, "bt_row": bt.strides[-2]},
    )


def lane_profile(spec: TensorSpec) -> tuple[int, int, int, int]:
    """(lds, vector ops, sts, elements per op) of an average lane, for the cost model."""
    mean = int(max(1, round(float(np.mean(spec.lens))))) if spec.lanes else 1
    if spec.op == "copy":
        if spec.mode == "transpose":
            la = spec.extra["la"]
            return max(1, mean), la, la, mean
        k = 1 if spec.dup is None else len(spec.dup)
        return 1, 0, k, mean
    if spec.op == "softmax":
        return 1, mean, 1, spec.row
    if spec.op == "matmul":
        ex = spec.extra
        return 1 + ex["n"] // ex["tn"], ex["n"] + 1, 1, ex["k"]
    nin = len(spec.ins) - (1 if spec.const_uniform else 0)
    return nin, 1, 1, mean
