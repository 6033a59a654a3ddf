"""ONNX → graph IR: one small handler per ONNX op resolves attributes to the canonical form of
graph.py. Handlers may emit transient ops (BatchNormalization, Pad) that fold.py removes.
Anything without a handler raises UnsupportedOpError naming the op type and the node."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from raptor.errors import UnsupportedOpError
from raptor.frontend.graph import Graph, Node

Shapes = dict[str, tuple[int, ...]]


class _Ctx:
    def __init__(self, graph: onnx.GraphProto, shapes: Shapes, opset: int):
        self.consts: dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in graph.initializer
        }
        self.shapes = shapes
        self.opset = opset
        self.nodes: list[Node] = []
        self.used_consts: set[str] = set()
        self._n = 0

    def const(self, name: str, node: onnx.NodeProto, what: str) -> np.ndarray:
        if name not in self.consts:
            raise UnsupportedOpError(
                f"{node.op_type} node {node.name or node.output[0]!r}: {what} must be a constant"
            )
        return self.consts[name]

    def opt_const(self, node: onnx.NodeProto, i: int) -> np.ndarray | None:
        if len(node.input) > i and node.input[i]:
            return self.const(node.input[i], node, f"input {i}")
        return None

    def tmp(self, base: str) -> str:
        self._n += 1
        return f"{base}__raptor{self._n}"

    def emit(self, node: onnx.NodeProto, op: str, inputs, outputs=None, attrs=None, params=None):
        for t in inputs:
            if t in self.consts:
                self.used_consts.add(t)
        n = Node(
            name=node.name or node.output[0],
            op=op,
            inputs=list(inputs),
            outputs=list(outputs if outputs is not None else node.output),
            attrs=attrs or {},
            params=params or {},
        )
        self.nodes.append(n)
        return n


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


def _unsupported(node: onnx.NodeProto, why: str = "") -> UnsupportedOpError:
    extra = f": {why}" if why else ""
    return UnsupportedOpError(
        f"unsupported ONNX op {node.op_type} (node {node.name or node.output[0]!r}){extra}"
    )


def _spatial_pads(node, a, in_shape, kernel, strides, dilations):
    """Resolve pads/auto_pad to (top, left, bottom, right)."""
    auto = _s(a.get("auto_pad", "NOTSET"))
    if auto in ("NOTSET", ""):
        p = list(a.get("pads", [0, 0, 0, 0]))
        if len(p) != 4:
            raise _unsupported(node, "only 2-D spatial ops are supported")
        return (p[0], p[1], p[2], p[3])
    if auto == "VALID":
        return (0, 0, 0, 0)
    out = []
    for n, k, s, d in zip(in_shape[2:], kernel, strides, dilations):
        o = -(-n // s)
        total = max(0, (o - 1) * s + (k - 1) * d + 1 - n)
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        out.append((lo, total - lo))
    return (out[0][0], out[1][0], out[0][1], out[1][1])


def _conv(ctx: _Ctx, node):
    a = _attrs(node)
    x = node.input[0]
    xs = ctx.shapes[x]
    if len(xs) != 4:
        raise _unsupported(node, f"only 2-D convolution is supported (input shape {xs})")
    w = ctx.const(node.input[1], node, "weight").astype(np.float32)
    b = ctx.opt_const(node, 2)
    b = np.zeros(w.shape[0], np.float32) if b is None else b.astype(np.float32)
    kernel = tuple(a.get("kernel_shape", w.shape[2:]))
    strides = tuple(a.get("strides", (1, 1)))
    dil = tuple(a.get("dilations", (1, 1)))
    pads = _spatial_pads(node, a, xs, kernel, strides, dil)
    ctx.emit(
        node,
        "Conv",
        [x],
        attrs=dict(
            kernel_shape=kernel,
            strides=strides,
            pads=pads,
            dilations=dil,
            group=int(a.get("group", 1)),
            activation=None,
        ),
        params={"W": w, "B": b},
    )


def _gemm(ctx: _Ctx, node):
    a = _attrs(node)
    if a.get("transA", 0):
        raise _unsupported(node, "transA=1 is not supported")
    x = node.input[0]
    if node.input[1] not in ctx.consts:
        raise _unsupported(node, "B must be a constant weight")
    w = ctx.consts[node.input[1]].astype(np.float32)
    if a.get("transB", 0):
        w = w.T
    w = (w * np.float32(a.get("alpha", 1.0))).astype(np.float32)
    n = w.shape[1]
    c = ctx.opt_const(node, 2)
    b = (
        np.zeros(n, np.float32)
        if c is None
        else np.broadcast_to(c.astype(np.float32) * np.float32(a.get("beta", 1.0)), (1, n)).reshape(
            n
        )
    )
    if c is not None and c.ndim == 2 and c.shape[0] not in (1,):
        raise _unsupported(node, f"bias of shape {c.shape} is not per-column")
    xs = ctx.shapes[x]
    if len(xs) != 2:
        raise _unsupported(node, f"input must be (1, K), got {xs}")
    ctx.emit(
        node,
        "Gemm",
        [x],
        attrs={"activation": None},
        params={"W": np.ascontiguousarray(w), "B": b.copy()},
    )


def _matmul(ctx: _Ctx, node):
    a, bname = node.input[0], node.input[1]
    if (
        bname in ctx.consts
        and ctx.consts[bname].ndim == 2
        and len(ctx.shapes.get(a, ())) == 2
        and a not in ctx.consts
    ):
        w = ctx.consts[bname].astype(np.float32)
        ctx.emit(
            node,
            "Gemm",
            [a],
            attrs={"activation": None},
            params={"W": w, "B": np.zeros(w.shape[1], np.float32)},
        )
        return
    ctx.emit(node, "MatMul", [a, bname])


def _pool(ctx: _Ctx, node):
    a = _attrs(node)
    x = node.input[0]
    xs = ctx.shapes[x]
    if len(xs) != 4:
        raise _unsupported(node, f"only 2-D pooling is supported (input shape {xs})")
    kernel = tuple(a["kernel_shape"])
    strides = tuple(a.get("strides", (1, 1)))
    dil = tuple(a.get("dilations", (1, 1)))
    pads = list(_spatial_pads(node, a, xs, kernel, strides, dil))
    if a.get("ceil_mode", 0):
        # fold ceil_mode into extra bottom/right padding (never counted by AveragePool)
        extra = []
        for i, (n, k, s, d) in enumerate(zip(xs[2:], kernel, strides, dil)):
            lo, hi = pads[i], pads[i + 2]
            o = -(-(n + lo + hi - ((k - 1) * d + 1)) // s) + 1
            if (o - 1) * s >= n + lo:
                o -= 1
            extra.append(max(0, (o - 1) * s + (k - 1) * d + 1 - (n + lo + hi)))
        if node.op_type == "AveragePool" and a.get("count_include_pad", 0) and any(extra):
            raise _unsupported(node, "ceil_mode with count_include_pad=1 is not supported")
        pads[2] += extra[0]
        pads[3] += extra[1]
    attrs = dict(kernel_shape=kernel, strides=strides, pads=tuple(pads))
    if node.op_type == "MaxPool":
        if dil != (1, 1):
            attrs["dilations"] = dil
        if len(node.output) > 1 and node.output[1]:
            raise _unsupported(node, "the Indices output is not supported")
        ctx.emit(node, "MaxPool", [x], outputs=[node.output[0]], attrs=attrs)
    else:
        attrs["count_include_pad"] = int(a.get("count_include_pad", 0))
        if kernel == tuple(xs[2:]) and not any(pads):
            ctx.emit(node, "GlobalAveragePool", [x])
            return
        ctx.emit(node, "AveragePool", [x], attrs=attrs)


def _gap(ctx: _Ctx, node):
    if len(ctx.shapes[node.input[0]]) != 4:
        raise _unsupported(node, "only 4-D input is supported")
    ctx.emit(node, "GlobalAveragePool", [node.input[0]])


def _reduce_mean(ctx: _Ctx, node):
    a = _attrs(node)
    x = node.input[0]
    xs = ctx.shapes[x]
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = ctx.const(node.input[1], node, "axes").tolist()
    if axes is None or len(xs) != 4 or sorted(int(v) % 4 for v in axes) != [2, 3]:
        raise _unsupported(node, "only a mean over the spatial axes (2, 3) is supported")
    if a.get("keepdims", 1):
        ctx.emit(node, "GlobalAveragePool", [x])
    else:
        t = ctx.tmp(node.output[0])
        ctx.shapes[t] = (xs[0], xs[1], 1, 1)
        ctx.emit(node, "GlobalAveragePool", [x], outputs=[t])
        ctx.emit(node, "Flatten", [t], attrs={"axis": 1}).name += ".flatten"


def _batchnorm(ctx: _Ctx, node):
    a = _attrs(node)
    p = {
        k: ctx.const(node.input[i], node, k).astype(np.float32)
        for i, k in enumerate(("scale", "bias", "mean", "var"), 1)
    }
    ctx.emit(
        node,
        "BatchNormalization",
        [node.input[0]],
        outputs=[node.output[0]],
        attrs={"epsilon": float(a.get("epsilon", 1e-5))},
        params=p,
    )


def _pad(ctx: _Ctx, node):
    a = _attrs(node)
    mode = _s(a.get("mode", "constant"))
    if ctx.opset < 11:
        pads = list(a["pads"])
        value = float(a.get("value", 0.0))
    else:
        pads = ctx.const(node.input[1], node, "pads").astype(np.int64).tolist()
        v = ctx.opt_const(node, 2)
        value = float(v.reshape(-1)[0]) if v is not None and v.size else 0.0
        axes = ctx.opt_const(node, 3)
        if axes is not None:
            rank = len(ctx.shapes[node.input[0]])
            full = [0] * (2 * rank)
            k = len(axes)
            for j, ax in enumerate(axes.tolist()):
                full[ax % rank] = pads[j]
                full[ax % rank + rank] = pads[j + k]
            pads = full
    ctx.emit(
        node,
        "Pad",
        [node.input[0]],
        attrs={"pads": tuple(int(p) for p in pads), "mode": mode, "value": value},
    )


def _binary(ctx: _Ctx, node):
    for t in node.input:
        if t in ctx.consts:
            ctx.consts[t] = (
                ctx.consts[t].astype(np.float32)
                if ctx.consts[t].dtype.kind == "f"
                else ctx.consts[t]
            )
    ctx.emit(node, node.op_type, list(node.input))


def _unary(ctx: _Ctx, node):
    ctx.emit(node, node.op_type, [node.input[0]])


def _clip(ctx: _Ctx, node):
    a = _attrs(node)
    if ctx.opset < 11:
        lo, hi = a.get("min", -np.inf), a.get("max", np.inf)
    else:
        lo_c, hi_c = ctx.opt_const(node, 1), ctx.opt_const(node, 2)
        lo = -np.inf if lo_c is None else lo_c
        hi = np.inf if hi_c is None else hi_c
    ctx.emit(node, "Clip", [node.input[0]], attrs={"min": float(lo), "max": float(hi)})


def _axis_op(ctx: _Ctx, node, default=1):
    a = _attrs(node)
    rank = len(ctx.shapes[node.input[0]])
    axis = int(a.get("axis", default))
    axis = axis % rank if node.op_type != "Flatten" else (axis if axis >= 0 else axis + rank)
    if node.op_type == "Softmax" and ctx.opset < 13 and axis != rank - 1:
        raise _unsupported(node, "pre-opset-13 Softmax over a non-last axis")
    ctx.emit(node, node.op_type, list(node.input), attrs={"axis": axis})


def _softmax(ctx: _Ctx, node):
    _axis_op(ctx, node, -1 if ctx.opset >= 13 else 1)


def _reshape_like(ctx: _Ctx, node):
    out = ctx.shapes[node.output[0]]
    x = node.input[0]
    xs = ctx.shapes[x]
    if len(out) == 2 and out[0] == xs[0] and int(np.prod(xs[1:])) == out[1] and len(xs) > 2:
        ctx.emit(node, "Flatten", [x], attrs={"axis": 1})
    else:
        ctx.emit(node, "Reshape", [x], attrs={"shape": tuple(out)})


def _flatten(ctx: _Ctx, node):
    a = _attrs(node)
    rank = len(ctx.shapes[node.input[0]])
    axis = int(a.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    if axis == 1:
        ctx.emit(node, "Flatten", [node.input[0]], attrs={"axis": 1})
    else:
        ctx.emit(
            node, "Reshape", [node.input[0]], attrs={"shape": tuple(ctx.shapes[node.output[0]])}
        )


def _transpose(ctx: _Ctx, node):
    a = _attrs(node)
    rank = len(ctx.shapes[node.input[0]])
    perm = tuple(int(p) for p in a.get("perm", list(range(rank))[::-1]))
    ctx.emit(node, "Transpose", [node.input[0]], attrs={"perm": perm})


def _split(ctx: _Ctx, node):
    a = _attrs(node)
    xs = ctx.shapes[node.input[0]]
    axis = int(a.get("axis", 0)) % len(xs)
    sizes = tuple(int(ctx.shapes[o][axis]) for o in node.output)
    ctx.emit(node, "Split", [node.input[0]], attrs={"axis": axis, "split": sizes})


def _slice(ctx: _Ctx, node):
    xs = ctx.shapes[node.input[0]]
    rank = len(xs)
    if ctx.opset < 10:
        a = _attrs(node)
        starts, ends = list(a["starts"]), list(a["ends"])
        axes = list(a.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = ctx.const(node.input[1], node, "starts").tolist()
        ends = ctx.const(node.input[2], node, "ends").tolist()
        ax = ctx.opt_const(node, 3)
        st = ctx.opt_const(node, 4)
        axes = list(range(len(starts))) if ax is None else ax.tolist()
        steps = [1] * len(starts) if st is None else st.tolist()
    rs, re_, ra, rst = [], [], [], []
    for s, e, ax, step in zip(starts, ends, axes, steps):
        ax = int(ax) % rank
        s_, e_, t_ = slice(int(s), int(e), int(step)).indices(xs[ax])
        rs.append(s_)
        re_.append(e_ if e_ >= 0 else None)
        ra.append(ax)
        rst.append(t_)
    ctx.emit(
        node,
        "Slice",
        [node.input[0]],
        attrs={"starts": tuple(rs), "ends": tuple(re_), "axes": tuple(ra), "steps": tuple(rst)},
    )


def _resize(ctx: _Ctx, node):
    a = _attrs(node)
    mode = _s(a.get("mode", "nearest"))
    if mode != "nearest":
        raise _unsupported(node, f"mode {mode!r} (only nearest)")
    xs = ctx.shapes[node.input[0]]
    ys = ctx.shapes[node.output[0]]
    ctx.emit(
        node,
        "Resize",
        [node.input[0]],
        attrs={
            "mode": "nearest",
            "scales": tuple(float(o) / float(i) for o, i in zip(ys, xs)),
            "coordinate_transformation_mode": _s(
                a.get("coordinate_transformation_mode", "half_pixel")
            ),
            "nearest_mode": _s(a.get("nearest_mode", "round_prefer_floor")),
        },
    )


def _upsample(ctx: _Ctx, node):
    a = _attrs(node)
    if _s(a.get("mode", "nearest")) != "nearest":
        raise _unsupported(node, "only nearest")
    xs, ys = ctx.shapes[node.input[0]], ctx.shapes[node.output[0]]
    ctx.emit(
        node,
        "Resize",
        [node.input[0]],
        attrs={
            "mode": "nearest",
            "scales": tuple(o / i for o, i in zip(ys, xs)),
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "floor",
        },
    )


def _cast(ctx: _Ctx, node):
    to = _attrs(node).get("to")
    if to != onnx.TensorProto.FLOAT:
        raise _unsupported(node, "only casts to float32 are supported")
    ctx.emit(node, "Reshape", [node.input[0]], attrs={"shape": tuple(ctx.shapes[node.output[0]])})


def _identity(ctx: _Ctx, node):
    ctx.emit(node, "Reshape", [node.input[0]], attrs={"shape": tuple(ctx.shapes[node.output[0]])})


HANDLERS: dict[str, Callable[[_Ctx, onnx.NodeProto], None]] = {
    "Conv": _conv,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _gap,
    "ReduceMean": _reduce_mean,
    "BatchNormalization": _batchnorm,
    "Pad": _pad,
    "Add": _binary,
    "Mul": _binary,
    "Sub": _binary,
    "Div": _binary,
    "Relu": _unary,
    "Sigmoid": _unary,
    "Clip": _clip,
    "Softmax": _softmax,
    "Concat": _axis_op,
    "Flatten": _flatten,
    "Reshape": _reshape_like,
    "Squeeze": _reshape_like,
    "Unsqueeze": _reshape_like,
    "Transpose": _transpose,
    "Split": _split,
    "Slice": _slice,
    "Resize": _resize,
    "Upsample": _upsample,
    "Cast": _cast,
    "Identity": _identity,
    "Dropout": _identity,
}


def import_model(model: onnx.ModelProto) -> Graph:
    """Convert a cleaned, shape-inferred ONNX model into the raw graph IR."""
    from raptor.frontend.cleanup import static_shapes

    g = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    shapes = static_shapes(model)
    init_names = {t.name for t in g.initializer}
    inputs = [vi.name for vi in g.input if vi.name not in init_names]
    for vi in g.input:
        if vi.name in inputs and vi.name not in shapes:
            raise UnsupportedOpError(f"graph input {vi.name!r} has no static shape")
    missing = [o for n in g.node for o in n.output if o and o not in shapes]
    if missing:
        shapes.update(_shapes_by_running(model, missing))
    ctx = _Ctx(g, shapes, opset)
    for node in g.node:
        if node.domain not in ("", "ai.onnx"):
            raise _unsupported(node, f"domain {node.domain!r}")
        h = HANDLERS.get(node.op_type)
        if h is None:
            raise _unsupported(node)
        h(ctx, node)
    consts = {k: v for k, v in ctx.consts.items() if k in ctx.used_consts}
    name = g.name or "graph"
    return Graph(
        name=name,
        nodes=ctx.nodes,
        shapes={k: tuple(int(d) for d in v) for k, v in ctx.shapes.items()},
        inputs=inputs,
        outputs=[o.name for o in g.output],
        constants=consts,
    )


def _shapes_by_running(model: onnx.ModelProto, names: list[str]) -> Shapes:
    """Shapes that inference could not give: run onnxruntime once on zeros."""
    import onnxruntime as ort

    from raptor.frontend.cleanup import static_shapes

    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    shapes = static_shapes(model)
    feeds = {}
    for i in sess.get_inputs():
        shp = shapes[i.name]
        feeds[i.name] = np.zeros(shp, dtype=np.float32)
    outs = sess.run(None, feeds)
    return {
        o.name: tuple(v.shape) for o, v in zip(sess.get_outputs(), outs) if o.name in set(names)
    }
