"""Graph IR -> Spatial layers and host buffers (no nodes yet).

Every activation tensor gets an NHWC host buffer, except that a Concat along channels gives its
inputs views into the concat buffer (producers store straight into their channel slice), and
Flatten/Reshape to (1, K) are views. A Gemm that reads a flattened NHWC tensor gets its weight
rows permuted from ONNX (c, h, w) order to (h, w, c). Assumes the graph is topologically ordered
with batch 1 (the frontend's contract).
"""

from __future__ import annotations

import numpy as np

from raptor.errors import UnsupportedOpError
from raptor.frontend.graph import Graph, Node
from raptor.spatial import tensor as T
from raptor.spatial.ir import Buffer, BufferRole, Layer, LayerKind, SpatialGraph, TensorView

ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid"}


def _act(node: Node) -> str | None:
    a = node.attrs.get("activation")
    if a is None or a in ("relu", "sigmoid", "silu"):
        return a
    raise UnsupportedOpError(f"node {node.name} ({node.op}): activation {a!r} is not supported")


def _nchw(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) == 4:
        return shape[1], shape[2], shape[3]
    if len(shape) == 2:
        return shape[1], 1, 1
    raise UnsupportedOpError(f"tensor shape {shape} is not (1, C, H, W) or (1, K)")


def build_spatial(graph: Graph, element_bytes: int = 2, xbar_rows: int = 128) -> SpatialGraph:
    """Create layers, buffers and tensor views for `graph` (depthwise convs packed for
    `xbar_rows`-row crossbars)."""
    _XBAR_ROWS[0] = xbar_rows
    shapes = graph.shapes
    buffers: dict[str, Buffer] = {}
    views: dict[str, TensorView] = {}
    layers: list[Layer] = []
    consts: dict[str, np.ndarray] = {}

    # Concat slots: tensor -> (concat output tensor, channel offset), resolved to the root concat.
    # Only channel concats of 4-D tensors get slots, and only for a tensor the concat alone reads:
    # synchronization orders whole buffers, so a slot read by another consumer (whose result may
    # feed a later slot of the same buffer) would make the buffer wait on itself. Other inputs
    # (shared tensors, views, graph inputs) are copied into their slot by a TENSOR layer.
    consumers = graph.consumers()
    slot: dict[str, tuple[str, int]] = {}
    for n in graph.nodes:
        if n.op == "Concat":
            axis = n.attrs.get("axis", 1)
            if len(shapes[n.outputs[0]]) != 4 or axis not in (1, -3):
                continue
            off = 0
            for t in n.inputs:
                only = [c.name for c in consumers.get(t, [])] == [n.name]
                if only and not (t in graph.inputs or t in graph.outputs or t in graph.constants):
                    slot[t] = (n.outputs[0], off)
                off += shapes[t][1]

    def root(t: str) -> tuple[str, int]:
        off = 0
        while t in slot:
            t, o = slot[t]
            off += o
        return t, off

    def new_buffer(name: str, elems: int, role: BufferRole) -> str:
        buffers[name] = Buffer(name, elems * element_bytes, role)
        return name

    outputs_set = set(graph.outputs)

    def out_view(t: str) -> TensorView:
        """View for a tensor a layer writes (allocating its buffer or its concat slice)."""
        c, h, w = _nchw(shapes[t])
        r, off = root(t)
        if r != t:
            rc, rh, rw = _nchw(shapes[r])
            if (rh, rw) != (h, w):
                raise UnsupportedOpError(f"tensor {t!r}: concat of mismatched spatial sizes")
            if r not in buffers:
                new_buffer(
                    r, rc * rh * rw, BufferRole.OUTPUT if r in outputs_set else BufferRole.ACT
                )
            v = TensorView(r, c, h, w, off, rc)
        else:
            new_buffer(t, c * h * w, BufferRole.OUTPUT if t in outputs_set else BufferRole.ACT)
            v = TensorView(t, c, h, w, 0, c)
        views[t] = v
        return v

    for t in graph.inputs:
        c, h, w = _nchw(shapes[t])
        new_buffer(t, c * h * w, BufferRole.INPUT)
        views[t] = TensorView(t, c, h, w, 0, c)

    def add(kind: LayerKind, n: Node, ins: tuple[TensorView, ...], **kw) -> None:
        layers.append(Layer(len(layers), n.name, kind, ins, out_view(n.outputs[0]), **kw))

    tb = _TensorOps(
        graph, buffers, views, layers, consts, new_buffer, out_view, root, element_bytes
    )
    notes: dict[str, object] = {}
    dw_stats: dict = {"convs": 0, "groups": []}

    for n in graph.nodes:
        op = n.op
        if op == "Concat":
            axis = n.attrs.get("axis", 1)
            r, _ = root(n.outputs[0])
            if len(shapes[n.outputs[0]]) == 4 and axis in (1, -3):
                if r == n.outputs[0]:
                    c, h, w = _nchw(shapes[r])
                    if r not in buffers:
                        new_buffer(
                            r, c * h * w, BufferRole.OUTPUT if r in outputs_set else BufferRole.ACT
                        )
                    views[r] = TensorView(r, c, h, w, 0, c)
                else:
                    out_view(n.outputs[0])
                tb.concat_channels(n)
            else:
                tb.concat_generic(n)
            continue
        if op in ("Flatten", "Reshape", "Identity", "Dropout"):
            src = views.get(n.inputs[0])
            oshape = shapes[n.outputs[0]]
            if src is not None and (
                op in ("Identity", "Dropout") or tuple(oshape) == tuple(shapes[n.inputs[0]])
            ):
                views[n.outputs[0]] = src
            elif (
                src is not None
                and len(oshape) == 2
                and oshape[0] == 1
                and oshape[1] == src.channels * src.pixels
                and (src.pixels == 1 or src.contiguous)
            ):
                chw = None if src.pixels == 1 else (src.channels, src.height, src.width)
                views[n.outputs[0]] = TensorView(
                    src.buffer,
                    src.channels * src.pixels,
                    1,
                    1,
                    src.channel_offset,
                    src.channels * src.pixels,
                    chw,
                )
            else:
                tb.reshape(n)
                continue
            if n.outputs[0] in outputs_set:
                raise UnsupportedOpError(f"node {n.name}: graph output {n.outputs[0]!r} is a view")
            continue
        if op in ("Transpose", "Split", "Slice"):
            tb.view_op(n)
            continue
        if op in ("Resize", "MatMul", "Softmax"):
            getattr(tb, op.lower())(n)
            continue
        if op == "Conv":
            if tuple(n.attrs.get("dilations", (1, 1))) != (1, 1):
                raise UnsupportedOpError(f"node {n.name}: dilated Conv is not supported")
            g = n.attrs.get("group", 1)
            w = n.params["W"]
            cout, cin, kh, kw = w.shape
            b = n.params.get("B")
            bias = np.zeros(cout, np.float32) if b is None else b.astype(np.float32)
            src = tb.tv(n.inputs[0])
            common = dict(
                kernel_shape=(kh, kw),
                strides=tuple(n.attrs.get("strides", (1, 1))),
                pads=tuple(n.attrs.get("pads", (0, 0, 0, 0))),
                activation=_act(n),
            )
            if g != 1:
                if not (g == cout == src.channels and cin == 1):
                    raise UnsupportedOpError(
                        f"node {n.name}: grouped Conv (group={g}) other than depthwise is not supported"
                    )
                out = out_view(n.outputs[0])
                packed = _depthwise_layers(n, src, out, bias, common, layers, consts, new_buffer)
                dw_stats["convs"] += 1
                dw_stats["groups"].append(packed)
                continue
            wm = np.ascontiguousarray(
                w.transpose(2, 3, 1, 0).reshape(kh * kw * cin, cout), dtype=np.float32
            )
            bname = new_buffer(f"{n.name}.bias", cout, BufferRole.CONST)
            consts[bname] = bias
            add(LayerKind.GEMM, n, (src,), weight=wm, bias=bias, bias_buffer=bname, **common)
        elif op == "Gemm":
            src = views[n.inputs[0]]
            w = n.params["W"].astype(np.float32)
            if src.chw is not None:
                c, h, ww = src.chw
                w = w.reshape(c, h, ww, -1).transpose(1, 2, 0, 3).reshape(c * h * ww, -1)
            src = TensorView(src.buffer, src.channels, 1, 1, src.channel_offset, src.pixel_stride)
            b = n.params.get("B")
            bias = np.zeros(w.shape[1], np.float32) if b is None else b.astype(np.float32)
            bname = new_buffer(f"{n.name}.bias", w.shape[1], BufferRole.CONST)
            consts[bname] = bias
            add(
                LayerKind.GEMM,
                n,
                (src,),
                activation=_act(n),
                weight=np.ascontiguousarray(w),
                bias=bias,
                bias_buffer=bname,
            )
        elif op in ("MaxPool", "AveragePool"):
            if tuple(n.attrs.get("dilations", (1, 1))) != (1, 1):
                raise UnsupportedOpError(f"node {n.name}: dilated pooling is not supported")
            kind = LayerKind.MAXPOOL if op == "MaxPool" else LayerKind.AVGPOOL
            add(
                kind,
                n,
                (tb.tv(n.inputs[0]),),
                kernel_shape=tuple(n.attrs["kernel_shape"]),
                strides=tuple(n.attrs.get("strides", (1, 1))),
                pads=tuple(n.attrs.get("pads", (0, 0, 0, 0))),
                count_include_pad=bool(n.attrs.get("count_include_pad", 0)),
                activation=_act(n),
            )
        elif op == "GlobalAveragePool":
            src = tb.tv(n.inputs[0])
            add(
                LayerKind.AVGPOOL,
                n,
                (src,),
                kernel_shape=(src.height, src.width),
                strides=(1, 1),
                activation=_act(n),
            )
        elif op == "Add" and tb.plain_add(n):
            add(LayerKind.ADD, n, (views[n.inputs[0]], views[n.inputs[1]]), activation=_act(n))
        elif op in ("Add", "Sub", "Mul", "Div"):
            tb.binary(n)
        elif op in ACTIVATIONS and n.inputs[0] in views:
            add(LayerKind.ACT, n, (views[n.inputs[0]],), activation=ACTIVATIONS[op])
        elif op in ACTIVATIONS:
            tb.unary(n, ACTIVATIONS[op])
        else:
            raise UnsupportedOpError(
                f"node {n.name}: op {op} is not supported by the Raptor compiler"
            )
    if dw_stats["convs"]:
        notes["depthwise"] = dw_stats
    for t in graph.outputs:
        tb.finish_output(t)
    notes["tensor_views"] = tb.tensor_views()

    inputs = [(t, views[t].buffer, tuple(shapes[t])) for t in graph.inputs]
    outputs = []
    for t in graph.outputs:
        v = views[t]
        if v.channel_offset != 0 or not v.contiguous:
            raise UnsupportedOpError(f"graph output {t!r} is a slice of another buffer")
        outputs.append((t, v.buffer, tuple(shapes[t])))
    sg = SpatialGraph(graph.name, layers, buffers, inputs, outputs, const_values=consts)
    sg.notes = notes
    return sg


def _depthwise_layers(n: Node, src, out, bias, common, layers, consts, new_buffer) -> dict:
    """A depthwise Conv packed block-diagonally: groups of `per` channels (per = floor(xbar_rows /
    (kh*kw))) share one crossbar row block; each group is one GEMM layer over its channel slice
    whose (kh*kw*per x per) weight is zero outside the diagonal blocks."""
    w = n.params["W"]
    c, _, kh, kw = w.shape
    per = max(1, min(c, _XBAR_ROWS[0] // (kh * kw)))
    for k, c0 in enumerate(range(0, c, per)):
        c1 = min(c, c0 + per)
        g = c1 - c0
        wm = np.zeros((kh, kw, g, g), np.float32)
        idx = np.arange(g)
        wm[:, :, idx, idx] = w[c0:c1, 0].transpose(1, 2, 0)
        bname = new_buffer(f"{n.name}.dw{k}.bias", g, BufferRole.CONST)
        consts[bname] = bias[c0:c1].copy()
        ins = (
            TensorView(
                src.buffer, g, src.height, src.width, src.channel_offset + c0, src.pixel_stride
            ),
        )
        o = TensorView(
            out.buffer, g, out.height, out.width, out.channel_offset + c0, out.pixel_stride
        )
        layers.append(
            Layer(
                len(layers),
                f"{n.name}.dw{k}",
                LayerKind.GEMM,
                ins,
                o,
                weight=wm.reshape(kh * kw * g, g),
                bias=bias[c0:c1].copy(),
                bias_buffer=bname,
                **common,
            )
        )
    return {"name": n.name, "channels": c, "kernel": kh * kw, "per_block": per}


_XBAR_ROWS = [128]  # crossbar rows the depthwise packing targets (set by build_spatial)


class _TensorOps:
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
