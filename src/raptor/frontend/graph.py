"""The graph IR: a static-shape, batch-1, topologically ordered dataflow graph.

After the frontend (importer → cleanup → fold → fuse) every node is one of NORMALIZED_OPS with
its attributes resolved to the canonical form below; later stages read only this IR.

* Conv:  inputs [x], attrs kernel_shape (kh, kw), strides, pads (top, left, bottom, right),
         dilations, group, activation (None | "relu" | "sigmoid" | "silu" | ("clip", lo, hi)),
         weight W (Cout, Cin/group, kh, kw) float32 and bias B (Cout,) float32 in `params`.
* Gemm:  inputs [x] of shape (1, K); params W (K, N) (already transposed) and B (N,);
         activation as for Conv.
* MaxPool / AveragePool: kernel_shape, strides, pads (top, left, bottom, right) with ceil_mode
         already folded into the bottom/right pads; count_include_pad for AveragePool.
* GlobalAveragePool: (1, C, H, W) -> (1, C, 1, 1).
* Add, Mul, Sub, Div, Concat (axis), Flatten, Reshape, Relu, Sigmoid, Clip, Softmax (axis),
  MatMul (activation x activation), Split, Resize, Transpose, Slice: ONNX semantics with
  attributes resolved to plain Python values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raptor.errors import IRVerifyError


@dataclass
class Node:
    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Graph:
    name: str
    nodes: list[Node]
    shapes: dict[str, tuple[int, ...]]
    inputs: list[str]
    outputs: list[str]
    constants: dict[str, np.ndarray] = field(default_factory=dict)

    def producer(self) -> dict[str, Node]:
        return {t: n for n in self.nodes for t in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for t in n.inputs:
                out.setdefault(t, []).append(n)
        return out

    def verify(self) -> None:
        known = set(self.inputs) | set(self.constants)
        for n in self.nodes:
            for t in n.inputs:
                if t not in known:
                    raise IRVerifyError(f"node {n.name} ({n.op}) reads {t!r} before it is produced")
            for t in n.outputs:
                if t not in self.shapes:
                    raise IRVerifyError(f"node {n.name} ({n.op}) output {t!r} has no static shape")
                known.add(t)
        for t in self.outputs:
            if t not in known:
                raise IRVerifyError(f"graph output {t!r} is never produced")

    def dump(self) -> str:
        lines = [f"graph {self.name} inputs={self.inputs} outputs={self.outputs}"]
        for n in self.nodes:
            attrs = {k: v for k, v in n.attrs.items()}
            shapes = [self.shapes.get(t) for t in n.outputs]
            lines.append(f"  {n.name}: {n.op}({', '.join(n.inputs)}) -> {shapes} {attrs}")
        return "\n".join(lines)


# The op types a normalised graph may contain (see the module docstring for their attributes).
NORMALIZED_OPS = frozenset(
    {
        "Conv",
        "Gemm",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "Add",
        "Mul",
        "Sub",
        "Div",
        "Concat",
        "Flatten",
        "Reshape",
        "Relu",
        "Sigmoid",
        "Clip",
        "Softmax",
        "MatMul",
        "Split",
        "Resize",
        "Transpose",
        "Slice",
    }
)
