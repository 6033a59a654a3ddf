"""Strided views and TENSOR layers of build_spatial (raptor.spatial.build): Concat along
non-channel axes, Reshape, Transpose, Slice, Split, Resize, MatMul, Softmax and elementwise ops
that are not Conv epilogues (see raptor.spatial.tensor)."""

from __future__ import annotations

import numpy as np

from raptor.errors import UnsupportedOpError
from raptor.frontend.graph import Node
from raptor.spatial import tensor as T
from raptor.spatial.ir import BufferRole, Layer, LayerKind, TensorView


class TensorOps:
    """Strided views and TENSOR layers of build_spatial (see raptor.spatial.tensor)."""

    def __init__(self, graph, buffers, views, layers, consts, new_buffer, out_view, root, eb):
        self.g = graph
        self.shapes = graph.shapes
        self.buffers = buffers
        self.views = views
        self.sviews: dict[str, T.SView] = {}
        self.layers = layers
        self.consts = consts
        self.new_buffer = new_buffer
        self.out_view = out_view
        self.root = root
        self.eb = eb
        self.outputs = set(graph.outputs)
        self.consumers = graph.consumers()
        self._n = 0

    # -- views -------------------------------------------------------------------------------
    def sv(self, t: str) -> T.SView:
        v = self.sviews.get(t)
        if v is not None:
            return v
        tv = self.views[t]
        shape = tuple(self.shapes[t])
        if len(shape) == 4:
            v = T.SView(
                tv.buffer,
                tv.channel_offset,
                shape,
                (0, 1, tv.width * tv.pixel_stride, tv.pixel_stride),
            )
        elif tv.pixels == 1 and len(shape) == 2:
            v = T.SView(tv.buffer, tv.channel_offset, shape, (0, 1))
        else:
            raise UnsupportedOpError(f"tensor {t!r}: no strided view of shape {shape}")
        self.sviews[t] = v
        return v

    def tensor_views(self) -> dict[str, tuple[str, int, tuple[int, ...], tuple[int, ...]]]:
        """Every graph tensor that has a host view: (buffer, element offset, ONNX shape, element
        strides), so that intermediates can be read back from host memory after a run."""
        out = {}
        for t in [*self.views, *self.sviews]:
            if t in out or t in self.g.constants or t not in self.shapes:
                continue
            tv = self.views.get(t)
            if t not in self.sviews and tv is not None and tv.chw and tv.chw[1] * tv.chw[2] > 1:
                continue  # a flat (CHW-order) view of NHWC data: not a strided view
            try:
                v = self.sv(t)
            except UnsupportedOpError:
                continue
            if tuple(v.shape) == tuple(self.shapes[t]):
                out[t] = (
                    v.buffer,
                    int(v.offset),
                    tuple(map(int, v.shape)),
                    tuple(map(int, v.strides)),
                )
        return out

    def tv(self, t: str) -> TensorView:
        """The NHWC TensorView of a 4-D tensor (copying it into an NHWC buffer if needed)."""
        v = self.views.get(t)
        if v is not None:
            return v
        s = self.sviews[t]
        if len(s.shape) != 4:
            raise UnsupportedOpError(f"tensor {t!r} of shape {s.shape} is not 4-D")
        _, c, h, w = s.shape
        ok = c == 1 or s.strides[1] == 1
        ps = s.strides[3] if w > 1 else (s.strides[2] if h > 1 else c)
        ok = ok and (h == 1 or s.strides[2] == w * ps) and ps >= c
        if not ok:
            dst = self.dense(f"{t}.nhwc", s.shape, T.nhwc_order(4))
            self.emit(f"{t}.to_nhwc", T.copy_spec(s, dst))
            s = dst
            ps = c
        v = TensorView(s.buffer, c, h, w, s.offset, ps)
        self.views[t] = v
        return v

    def dense(self, name: str, shape, order, role=BufferRole.ACT) -> T.SView:
        size = int(np.prod(shape, dtype=np.int64))
        while name in self.buffers:
            self._n += 1
            name = f"{name}.{self._n}"
        self.new_buffer(name, size, role)
        return T.SView(name, 0, tuple(shape), T.dense_strides(tuple(shape), order))

    def new_out(self, t: str, order) -> T.SView:
        """Output view of tensor t written by a TENSOR layer."""
        shape = tuple(self.shapes[t])
        if len(shape) == 4 and self.root(t)[0] != t:
            tv = self.out_view(t)  # the TENSOR layer stores straight into the concat slot
            return T.SView(
                tv.buffer,
                tv.channel_offset,
                shape,
                (0, 1, tv.width * tv.pixel_stride, tv.pixel_stride),
            )
        if t in self.outputs:
            o = T.nhwc_order(len(shape))
            return self.dense(t, shape, o, BufferRole.OUTPUT)
        if len(shape) == 4 and any(
            c.op in ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Add", "Concat")
            for c in self.consumers.get(t, [])
        ):
            order = T.nhwc_order(4)
        return self.dense(t, shape, order)

    def views_slot(self, t: str) -> TensorView:
        r, off = self.root(t)
        rc, rh, rw = self.shapes[r][1:]
        c, h, w = self.shapes[t][1:]
        return TensorView(r, c, h, w, off, rc)

    def emit(self, name: str, spec: T.TensorSpec) -> None:
        bufs = list(dict.fromkeys(v.buffer for v in spec.ins))
        ins = tuple(TensorView(b, 1, 1, 1, 0, 1) for b in bufs)
        out = TensorView(spec.out.buffer, 1, 1, spec.lanes, 0, 1)
        self.layers.append(Layer(len(self.layers), name, LayerKind.TENSOR, ins, out, spec=spec))

    def contiguous(self, t: str, v: T.SView, order) -> T.SView:
        dst = self.dense(f"{t}.dense", v.shape, order)
        self.emit(f"{t}.to_dense", T.copy_spec(v, dst))
        return dst

    # -- ops -----------------------------------------------------------------------------------
    def concat_channels(self, n: Node) -> None:
        ro, oo = self.root(n.outputs[0])
        rc = self.shapes[ro][1]
        off = oo
        for k, t in enumerate(n.inputs):
            c, h, w = self.shapes[t][1:]
            want = TensorView(ro, c, h, w, off, rc)
            if self.views.get(t) != want:
                dst = T.SView(ro, off, tuple(self.shapes[t]), (0, 1, w * rc, rc))
                self.emit(f"{n.name}.copy{k}", T.copy_spec(self.sv(t), dst))
            off += c

    def concat_generic(self, n: Node) -> None:
        t = n.outputs[0]
        nd = len(self.shapes[t])
        axis = n.attrs.get("axis", 1) % nd
        first = self.sv(n.inputs[0])
        out = self.new_out(t, T.stride_order(first))
        off = 0
        for k, x in enumerate(n.inputs):
            s = self.sv(x)
            self.emit(
                f"{n.name}.copy{k}",
                T.copy_spec(s, T.slice_view(out, axis, off, off + s.shape[axis])),
            )
            off += s.shape[axis]
        self.sviews[t] = out

    def reshape(self, n: Node) -> None:
        src = self.sv(n.inputs[0])
        shape = tuple(self.shapes[n.outputs[0]])
        v = T.reshape_view(src, shape)
        if v is None:
            src = self.contiguous(n.inputs[0], src, list(range(len(src.shape))))
            v = T.reshape_view(src, shape)
        self.sviews[n.outputs[0]] = v

    def view_op(self, n: Node) -> None:
        src = self.sv(n.inputs[0])
        nd = len(src.shape)
        if n.op == "Transpose":
            self.sviews[n.outputs[0]] = T.transpose_view(src, tuple(n.attrs["perm"]))
            return
        if n.op == "Split":
            axis = n.attrs.get("axis", 0) % nd
            off = 0
            for t, size in zip(n.outputs, n.attrs["split"]):
                self.sviews[t] = T.slice_view(src, axis, off, off + size)
                off += size
            return
        v = src
        for st, en, ax, sp in zip(
            n.attrs["starts"], n.attrs["ends"], n.attrs["axes"], n.attrs.get("steps") or [1] * 8
        ):
            ax %= nd
            dim = v.shape[ax]
            st = max(0, min(dim, st + dim if st < 0 else st))
            en = max(0, min(dim, en + dim if en < 0 else en))
            if sp != 1:
                raise UnsupportedOpError(f"node {n.name}: Slice with step {sp}")
            v = T.slice_view(v, ax, st, en)
        self.sviews[n.outputs[0]] = v

    def resize(self, n: Node) -> None:
        a = n.attrs
        sc = a.get("scales")
        if a.get("mode", "nearest") != "nearest" or sc is None or len(sc) != 4:
            raise UnsupportedOpError(
                f"node {n.name}: only nearest Resize of a 4-D tensor is supported"
            )
        fy, fx = sc[2], sc[3]
        if sc[:2] != (1.0, 1.0) or fy != int(fy) or fx != int(fx) or fy < 1 or fx < 1:
            raise UnsupportedOpError(
                f"node {n.name}: Resize scales {sc} are not integer upsampling"
            )
        fy, fx = int(fy), int(fx)
        src = self.sv(n.inputs[0])
        t = n.outputs[0]
        out = self.new_out(t, T.nhwc_order(4))
        _, c, h, w = src.shape
        s6 = T.SView(
            src.buffer,
            src.offset,
            (1, c, h, fy, w, fx),
            (0, src.strides[1], src.strides[2], 0, src.strides[3], 0),
        )
        d = out.strides
        d6 = T.SView(out.buffer, out.offset, s6.shape, (0, d[1], d[2] * fy, d[2], d[3] * fx, d[3]))
        self.emit(n.name, T.copy_spec(s6, d6))
        self.sviews[t] = out

    def matmul(self, n: Node) -> None:
        a, b = (self.sv(x) for x in n.inputs)
        if a.shape[:-2] != b.shape[:-2]:
            raise UnsupportedOpError(f"node {n.name}: broadcasting MatMul {a.shape} x {b.shape}")
        nd = len(a.shape)
        if a.strides[-1] != 1:
            a = self.contiguous(n.inputs[0], a, list(range(nd)))
        bt = T.transpose_view(b, (*range(nd - 2), nd - 1, nd - 2))
        if bt.strides[-1] != 1:
            order = [*range(nd - 2), nd - 1, nd - 2]  # K fastest
            bt = T.transpose_view(
                self.contiguous(n.inputs[1], b, order), (*range(nd - 2), nd - 1, nd - 2)
            )
        t = n.outputs[0]
        out = self.new_out(t, list(range(nd)))
        final = out
        if out.strides[-1] != 1:
            out = self.dense(f"{t}.rows", out.shape, list(range(nd)))
        self.emit(n.name, T.matmul_spec(a, bt, out))
        if final is not out:
            self.emit(f"{n.name}.store", T.copy_spec(out, final))
        self.sviews[t] = final

    def softmax(self, n: Node) -> None:
        src = self.sv(n.inputs[0])
        nd = len(src.shape)
        axis = n.attrs.get("axis", -1) % nd
        if src.strides[axis] != 1:
            order = [d for d in range(nd) if d != axis] + [axis]
            src = self.contiguous(n.inputs[0], src, order)
        t = n.outputs[0]
        out = self.new_out(t, T.stride_order(src))
        final = out
        if out.strides[axis] != 1:
            out = self.dense(f"{t}.rows", out.shape, T.stride_order(src))
        self.emit(n.name, T.softmax_spec(src, out, axis))
        if final is not out:
            self.emit(f"{n.name}.store", T.copy_spec(out, final))
        self.sviews[t] = final

    def plain_add(self, n: Node) -> bool:
        x, y = n.inputs
        if x in self.g.constants or y in self.g.constants:
            return False
        if len(self.shapes[x]) != 4 or self.shapes[x] != self.shapes[y]:
            return False
        self.tv(x)
        self.tv(y)
        return True

    def _elementwise(self, n: Node, func: str, operands: list) -> None:
        t = n.outputs[0]
        shape = tuple(self.shapes[t])
        acts = [self.sv(x) for x in operands if isinstance(x, str)]
        if not acts:
            raise UnsupportedOpError(f"node {n.name}: {n.op} of constants only")
        for v in acts:
            if v.shape != shape:
                raise UnsupportedOpError(f"node {n.name}: broadcasting {n.op} of activations")
        out = self.new_out(t, T.stride_order(acts[0]))
        ins, ci = [], -1
        for k, x in enumerate(operands):
            if isinstance(x, str):
                ins.append(self.sv(x))
                continue
            full = np.broadcast_to(np.asarray(x, np.float32), shape)
            cs = T.dense_strides(shape, T.stride_order(out))
            name = self.dense(
                f"{n.name}.const{k}", shape, T.stride_order(out), BufferRole.CONST
            ).buffer
            vals = np.zeros(full.size, np.float32)
            vals[T._offsets(shape, cs)] = full.ravel()
            self.consts[name] = vals
            ins.append(T.SView(name, 0, shape, cs))
            ci = k
        spec = T.elementwise_spec(func, ins, out, ci)
        if ci >= 0 and spec.lanes and len(np.unique(spec.lens)) == 1:
            L = int(spec.lens[0])
            vals = self.consts[ins[ci].buffer]
            runs = vals[spec.offs[ci][:, None] + np.arange(L)[None, :]]
            if (runs == runs[:1]).all():
                spec.const_uniform = True
        self.emit(n.name, spec)
        self.sviews[t] = out

    def binary(self, n: Node) -> None:
        ops: list = []
        for x in n.inputs:
            ops.append(self.g.constants[x] if x in self.g.constants else x)
        func = {"Add": "vvadd", "Sub": "vvsub", "Mul": "vvmul", "Div": "vvmul"}[n.op]
        if n.op == "Div":
            if isinstance(ops[1], str):
                raise UnsupportedOpError(f"node {n.name}: Div by an activation (no vector divide)")
            ops[1] = (1.0 / np.asarray(ops[1], np.float64)).astype(np.float32)
        self._elementwise(n, func, ops)

    def unary(self, n: Node, act: str) -> None:
        self._elementwise(n, {"sigmoid": "vsigm", "relu": "vrelu"}[act], [n.inputs[0]])

    def finish_output(self, t: str) -> None:
        if t in self.views or t not in self.sviews:
            return
        v = self.sviews[t]
        shape = v.shape
        want = T.dense_strides(shape, T.nhwc_order(len(shape)))
        b = self.buffers[v.buffer]
        if not (
            v.offset == 0
            and v.strides == want
            and b.role == BufferRole.OUTPUT
            and b.size_bytes == v.size * self.eb
        ):
            dst = self.dense(f"{t}.out", shape, T.nhwc_order(len(shape)), BufferRole.OUTPUT)
            self.emit(f"{t}.store", T.copy_spec(v, dst))
            v = dst
        c = int(np.prod(shape[1:]))
        self.views[t] = TensorView(v.buffer, c, 1, 1, 0, c)
