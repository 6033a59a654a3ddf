"""A small numpy evaluator of the graph IR (NCHW, float32): the semantic oracle that tests
use to show folding and fusion keep the values onnxruntime computes. With dtype=np.float64 it
evaluates in double precision: the near-exact values that validation measures float32 rounding
against (raptor.validation.compare)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from raptor.frontend import kernels as K
from raptor.frontend.graph import Graph, Node


def _conv(n: Node, x):
    a = n.attrs
    y = K.conv2d(
        x, n.params["W"], n.params["B"], a["strides"], a["pads"], a["dilations"], a["group"]
    )
    return [K.activation(y, a.get("activation"))]


def _gemm(n: Node, x):
    dt = K._ft(x)
    y = (x.astype(dt) @ n.params["W"].astype(dt) + n.params["B"]).astype(dt)
    return [K.activation(y, n.attrs.get("activation"))]


def _maxpool(n: Node, x):
    a = n.attrs
    return [K.maxpool2d(x, a["kernel_shape"], a["strides"], a["pads"], a.get("dilations", (1, 1)))]


def _avgpool(n: Node, x):
    a = n.attrs
    return [
        K.avgpool2d(x, a["kernel_shape"], a["strides"], a["pads"], a.get("count_include_pad", 0))
    ]


def _binary(fn):
    def run(n: Node, a, b):
        y = fn(a, b)
        if y.dtype.kind == "f":
            y = y.astype(np.float64 if np.float64 in (a.dtype, b.dtype) else np.float32)
        return [K.activation(y, n.attrs.get("activation"))]

    return run


def _reshape(n: Node, x, g: Graph):
    return [x.reshape(g.shapes[n.outputs[0]])]


def _resize(n: Node, x, g: Graph):
    a = n.attrs
    return [
        K.resize_nearest(
            x, g.shapes[n.outputs[0]], a["coordinate_transformation_mode"], a["nearest_mode"]
        )
    ]


def _slice(n: Node, x):
    a = n.attrs
    return [K.slice_(x, a["starts"], a["ends"], a["axes"], a["steps"])]


OPS: dict[str, Callable] = {
    "Conv": _conv,
    "Gemm": _gemm,
    "MaxPool": _maxpool,
    "AveragePool": _avgpool,
    "GlobalAveragePool": lambda n, x: [K.global_avgpool(x)],
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(np.divide),
    "Relu": lambda n, x: [K.relu(x)],
    "Sigmoid": lambda n, x: [K.sigmoid(x)],
    "Clip": lambda n, x: [np.clip(x, n.attrs["min"], n.attrs["max"]).astype(x.dtype)],
    "Softmax": lambda n, x: [K.softmax(x, n.attrs["axis"])],
    "MatMul": lambda n, a, b: [np.matmul(a, b).astype(np.result_type(a, b, np.float32))],
    "Concat": lambda n, *xs: [np.concatenate(xs, axis=n.attrs["axis"])],
    "Split": lambda n, x: K.split(x, n.attrs["split"], n.attrs["axis"]),
    "Transpose": lambda n, x: [np.ascontiguousarray(np.transpose(x, n.attrs["perm"]))],
    "Slice": _slice,
    # transient ops, present only before fold.py
    "BatchNormalization": lambda n, x: [
        K.batchnorm(
            x,
            n.params["scale"],
            n.params["bias"],
            n.params["mean"],
            n.params["var"],
            n.attrs["epsilon"],
        )
    ],
}
SHAPED = {"Flatten": _reshape, "Reshape": _reshape, "Resize": _resize}


def _as(v: np.ndarray, dtype) -> np.ndarray:
    return v.astype(dtype) if v.dtype.kind == "f" else v


def evaluate(
    graph: Graph, inputs: dict[str, np.ndarray], keep_all: bool = False, dtype=np.float32
) -> dict[str, np.ndarray]:
    """Run the graph on `inputs` (name -> array) in `dtype` (float32, or float64 for near-exact
    values). Returns the graph outputs, or every tensor when keep_all."""
    env: dict[str, np.ndarray] = {k: _as(v, dtype) for k, v in graph.constants.items()}
    for name in graph.inputs:
        env[name] = np.asarray(inputs[name], dtype=dtype).reshape(graph.shapes[name])
    for n in graph.nodes:
        args = [env[t] for t in n.inputs]
        if dtype != np.float32 and n.params:
            n = replace(n, params={k: _as(v, dtype) for k, v in n.params.items()})
        if n.op in SHAPED:
            outs = SHAPED[n.op](n, *args, graph)
        elif n.op == "Pad":
            p = n.attrs["pads"]
            r = len(p) // 2
            outs = [np.pad(args[0], list(zip(p[:r], p[r:])), constant_values=n.attrs["value"])]
        else:
            outs = OPS[n.op](n, *args)
        for t, v in zip(n.outputs, outs):
            env[t] = v
    if keep_all:
        return env
    return {t: env[t] for t in graph.outputs}
