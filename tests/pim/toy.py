"""Tiny ONNX models and helpers shared by the compiler tests (imported by path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ARCH_TINY = Path(__file__).resolve().parents[1] / "fixtures" / "arch-tiny.json"


class OnnxBuilder:
    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.k = 0

    def _name(self, p: str) -> str:
        self.k += 1
        return f"{p}{self.k}"

    def const(self, arr: np.ndarray) -> str:
        n = self._name("c")
        self.inits.append(numpy_helper.from_array(arr.astype(np.float32), n))
        return n

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out + "_n", **attrs))
        return out

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        k: int = 3,
        stride: int = 1,
        pad: int = 1,
        relu: bool = True,
    ) -> str:
        w = self.rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)
        b = self.rng.standard_normal(cout) * 0.1
        y = self.node(
            "Conv",
            [x, self.const(w), self.const(b)],
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad] * 4,
        )
        return self.node("Relu", [y]) if relu else y

    def gemm(self, x: str, k: int, n: int) -> str:
        w = self.rng.standard_normal((n, k)) / np.sqrt(k)
        b = self.rng.standard_normal(n) * 0.1
        return self.node("Gemm", [x, self.const(w), self.const(b)], transB=1)

    def model(self, x_shape: list[int], out: str, out_shape: list[int]) -> onnx.ModelProto:
        g = helper.make_graph(
            self.nodes,
            "toy",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)],
            self.inits,
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        return m


def toy_resnet(hw: int = 8, c: int = 8, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """Conv+Relu -> MaxPool -> Conv+Relu -> Conv -> Add+Relu -> GAP -> Flatten -> Gemm."""
    b = OnnxBuilder(seed)
    x = b.conv("x", 3, c)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = b.conv(x, c, c)
    y = b.conv(y, c, c, relu=False)
    x = b.node("Relu", [b.node("Add", [x, y])])
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    return b.model([1, 3, hw, hw], b.gemm(x, c, classes), [1, classes])


def toy_convnet(hw: int = 8, c: int = 8, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """Conv+Relu -> Conv+Relu (stride 2) -> Flatten -> Gemm (Gemm reads a flattened NHWC tensor)."""
    b = OnnxBuilder(seed)
    x = b.conv("x", 3, c)
    x = b.conv(x, c, c, stride=2)
    x = b.node("Flatten", [x], axis=1)
    k = c * (hw // 2) ** 2
    return b.model([1, 3, hw, hw], b.gemm(x, k, classes), [1, classes])


def toy_inception(hw: int = 8, seed: int = 0) -> onnx.ModelProto:
    """Two branches concatenated along channels, avg-pool branch, GAP, Gemm."""
    b = OnnxBuilder(seed)
    x = b.conv("x", 3, 8)
    p = b.conv(x, 8, 4, k=1, pad=0)
    q = b.conv(x, 8, 6, k=3, pad=1)
    r = b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    r = b.conv(r, 8, 2, k=1, pad=0)
    x = b.node("Concat", [p, q, r], axis=1)
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.conv(x, 12, 8)
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    return b.model([1, 3, hw, hw], b.gemm(x, 8, 5), [1, 5])


def reference(
    model: onnx.ModelProto, inputs: list[dict[str, np.ndarray]]
) -> list[dict[str, np.ndarray]]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return [dict(zip(names, sess.run(None, x))) for x in inputs]


def max_rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / max(1e-6, float(np.max(np.abs(want)))))
