"""Folding passes on the graph IR (each: Graph -> None, in place).

* fold_batchnorm: BatchNormalization after a single-consumer Conv goes into W and B; a BN with
  any other producer becomes a depthwise 1x1 Conv.
* fold_pad: a constant Pad on the two spatial axes goes into the pads of the Convs / pools that
  read it (MaxPool only for a -inf pad value, or a zero pad of a provably non-negative tensor;
  AveragePool only when its own count_include_pad semantics agree).
* fold_bias_add: Add of a per-channel constant after a single-consumer Conv/Gemm goes into B.
"""

from __future__ import annotations

import numpy as np

from raptor.errors import UnsupportedOpError
from raptor.frontend.graph import Graph, Node


def _single_consumer(g: Graph, t: str) -> Node | None:
    cons = g.consumers().get(t, [])
    if len(cons) == 1 and t not in g.outputs:
        return cons[0]
    return None


def fold_batchnorm(g: Graph) -> None:
    prod = g.producer()
    remove: set[int] = set()
    for bn in g.nodes:
        if bn.op != "BatchNormalization":
            continue
        p = bn.params
        s = (p["scale"] / np.sqrt(p["var"].astype(np.float64) + bn.attrs["epsilon"])).astype(
            np.float32
        )
        shift = (p["bias"] - p["mean"] * s).astype(np.float32)
        src = prod.get(bn.inputs[0])
        if (
            src is not None
            and src.op == "Conv"
            and src.attrs.get("activation") is None
            and _single_consumer(g, bn.inputs[0]) is bn
        ):
            src.params["W"] = (src.params["W"] * s.reshape(-1, 1, 1, 1)).astype(np.float32)
            src.params["B"] = (src.params["B"] * s + shift).astype(np.float32)
            src.outputs = list(bn.outputs)
            remove.add(id(bn))
            continue
        shape = g.shapes[bn.inputs[0]]
        if len(shape) != 4:
            raise UnsupportedOpError(
                f"unsupported ONNX op BatchNormalization (node {bn.name!r}): input rank {len(shape)}"
            )
        c = shape[1]
        bn.op = "Conv"
        bn.attrs = dict(
            kernel_shape=(1, 1),
            strides=(1, 1),
            pads=(0, 0, 0, 0),
            dilations=(1, 1),
            group=c,
            activation=None,
        )
        bn.params = {"W": s.reshape(c, 1, 1, 1).copy(), "B": shift}
    g.nodes = [n for n in g.nodes if id(n) not in remove]


_NONNEG_OPS = {"Relu", "Sigmoid"}


def _nonnegative(g: Graph, t: str) -> bool:
    prod = g.producer().get(t)
    if prod is None:
        return False
    if prod.op in _NONNEG_OPS:
        return True
    act = prod.attrs.get("activation")
    if act in ("relu", "sigmoid"):
        return True
    if isinstance(act, tuple) and act[0] == "clip" and act[1] >= 0:
        return True
    if prod.op == "Clip" and prod.attrs.get("min", -np.inf) >= 0:
        return True
    if prod.op in ("MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Reshape"):
        return _nonnegative(g, prod.inputs[0])
    if prod.op == "Concat":
        return all(_nonnegative(g, i) for i in prod.inputs)
    return False


def fold_pad(g: Graph) -> None:
    remove: set[int] = set()
    for pad in g.nodes:
        if pad.op != "Pad":
            continue
        pads = pad.attrs["pads"]
        rank = len(pads) // 2
        what = f"unsupported ONNX op Pad (node {pad.name!r})"
        if pad.attrs["mode"] != "constant" or rank != 4:
            raise UnsupportedOpError(f"{what}: only constant padding of a 4-D tensor can be folded")
        begin, end = pads[:rank], pads[rank:]
        if begin[0] or begin[1] or end[0] or end[1] or min(pads) < 0:
            raise UnsupportedOpError(f"{what}: only non-negative spatial padding can be folded")
        extra = (begin[2], begin[3], end[2], end[3])
        value = pad.attrs["value"]
        cons = g.consumers().get(pad.outputs[0], [])
        if not cons or pad.outputs[0] in g.outputs:
            raise UnsupportedOpError(f"{what}: its output is a graph output")
        for c in cons:
            ok = False
            if c.op == "Conv":
                ok = value == 0.0
            elif c.op == "MaxPool":
                ok = value == -np.inf or (value == 0.0 and _nonnegative(g, pad.inputs[0]))
            elif c.op == "AveragePool":
                ok = value == 0.0 and (c.attrs["count_include_pad"] or not any(c.attrs["pads"]))
            if not ok:
                raise UnsupportedOpError(f"{what}: cannot fold into its consumer {c.op} {c.name!r}")
        for c in cons:
            c.attrs["pads"] = tuple(a + b for a, b in zip(c.attrs["pads"], extra))
            if c.op == "AveragePool":
                c.attrs["count_include_pad"] = 1
            c.inputs = [pad.inputs[0] if t == pad.outputs[0] else t for t in c.inputs]
        remove.add(id(pad))
    g.nodes = [n for n in g.nodes if id(n) not in remove]


def fold_bias_add(g: Graph) -> None:
    prod = g.producer()
    remove: set[int] = set()
    for add in g.nodes:
        if add.op != "Add" or len(add.inputs) != 2:
            continue
        cidx = [i for i, t in enumerate(add.inputs) if t in g.constants]
        if len(cidx) != 1:
            continue
        act_in = add.inputs[1 - cidx[0]]
        c = np.asarray(g.constants[add.inputs[cidx[0]]], dtype=np.float32)
        src = prod.get(act_in)
        if src is None or src.op not in ("Conv", "Gemm") or src.attrs.get("activation") is not None:
            continue
        if _single_consumer(g, act_in) is not add:
            continue
        out_shape = g.shapes[add.outputs[0]]
        if out_shape != g.shapes[act_in]:
            continue
        n = src.params["B"].shape[0]
        if src.op == "Gemm":
            fits = c.ndim <= 2 and c.size in (1, n) and (c.ndim < 2 or c.shape[0] == 1)
            if not fits:
                continue
            bias = np.broadcast_to(c.reshape(-1), (n,))
        else:
            if c.size == 1:
                bias = np.full(n, c.reshape(-1)[0], np.float32)
            elif c.ndim >= 3 and c.shape[-1] == 1 and c.shape[-2] == 1 and c.size == n:
                bias = c.reshape(n)
            else:
                continue
        src.params["B"] = (src.params["B"] + bias).astype(np.float32)
        src.outputs = list(add.outputs)
        remove.add(id(add))
    g.nodes = [n for n in g.nodes if id(n) not in remove]
