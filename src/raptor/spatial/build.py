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
from raptor.spatial.build_tensor import TensorOps
from raptor.spatial.ir import (
    Buffer,
    BufferRole,
    DepthwiseGroup,
    Layer,
    LayerKind,
    SpatialGraph,
    SpatialNotes,
    TensorView,
)

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

    tb = TensorOps(graph, buffers, views, layers, consts, new_buffer, out_view, root, element_bytes)
    depthwise: list[DepthwiseGroup] = []

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
                packed = _depthwise_layers(
                    n, src, out, bias, common, layers, consts, new_buffer, xbar_rows
                )
                depthwise.append(packed)
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
    for t in graph.outputs:
        tb.finish_output(t)

    inputs = [(t, views[t].buffer, tuple(shapes[t])) for t in graph.inputs]
    outputs = []
    for t in graph.outputs:
        v = views[t]
        if v.channel_offset != 0 or not v.contiguous:
            raise UnsupportedOpError(f"graph output {t!r} is a slice of another buffer")
        outputs.append((t, v.buffer, tuple(shapes[t])))
    sg = SpatialGraph(graph.name, layers, buffers, inputs, outputs, const_values=consts)
    sg.notes = SpatialNotes(depthwise=tuple(depthwise), tensor_views=tb.tensor_views())
    return sg


def _depthwise_layers(
    n: Node, src, out, bias, common, layers, consts, new_buffer, xbar_rows: int
) -> DepthwiseGroup:
    """A depthwise Conv packed block-diagonally: groups of `per` channels (per = floor(xbar_rows /
    (kh*kw))) share one crossbar row block; each group is one GEMM layer over its channel slice
    whose (kh*kw*per x per) weight is zero outside the diagonal blocks."""
    w = n.params["W"]
    c, _, kh, kw = w.shape
    per = max(1, min(c, xbar_rows // (kh * kw)))
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
    return DepthwiseGroup(n.name, c, kh * kw, per)
