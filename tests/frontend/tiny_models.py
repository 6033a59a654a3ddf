"""Small hand-made ONNX models for the import-gate tests: a conv, a pool and a fully connected
layer on a 1x3x4x4 input, with every attribute the tests mutate spelled out."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_model(
    conv: dict | None = None,
    pool: dict | None = None,
    opset: int = 17,
    input_type: int = TensorProto.FLOAT,
    input_shape: tuple = (1, 3, 4, 4),
    fc_rows: int = 16,
    second_input: str | None = None,
    nodes: bool = True,
) -> onnx.ModelProto:
    """Conv 3->4 (3x3, pad 1) -> Relu -> MaxPool 2x2/2 -> Flatten -> Gemm 16->5.

    second_input: None, "unused" (a second graph input nothing reads) or "added" (conv of a
    second input added to the first conv)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B")
    fc = numpy_helper.from_array((rng.standard_normal((fc_rows, 5)) * 0.3).astype(np.float32), "FC")
    inits = [w, b, fc]
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1])
    attrs.update(conv or {})
    n = helper.make_node
    conv_out = "c"
    body = [n("Conv", ["x", "W", "B"], ["c"], name="conv0", **attrs)]
    inputs = [helper.make_tensor_value_info("x", input_type, list(input_shape))]
    if second_input:
        inputs.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1, 3, 4, 4]))
    if second_input == "added":
        w2 = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
        inits.append(numpy_helper.from_array(w2, "W2"))
        body += [
            n("Conv", ["x2", "W2"], ["c2"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            n("Add", ["c", "c2"], ["s"], name="add0"),
        ]
        conv_out = "s"
    body += [
        n("Relu", [conv_out], ["r"], name="relu0"),
        n(
            "MaxPool",
            ["r"],
            ["p"],
            name="pool0",
            **{"kernel_shape": [2, 2], "strides": [2, 2], **(pool or {})},
        ),
        n("Flatten", ["p"], ["f"], name="flat0", axis=1),
        n("Gemm", ["f", "FC"], ["y"], name="fc0", transB=0, alpha=1.0),
    ]
    graph = helper.make_graph(
        body if nodes else [],
        "tiny",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", opset)])
    m.ir_version = 8
    return m
