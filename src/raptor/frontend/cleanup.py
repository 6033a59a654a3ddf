"""ONNX-level cleanup before import: batch forced to 1, Constant nodes turned into
initializers, Identity/Dropout bypassed, every node whose inputs are all constant (including
Shape of a statically shaped tensor and the Gather/Concat/Unsqueeze chains that follow it)
evaluated once and replaced by an initializer, then shape inference. onnxslim can run first
(`slim=True`) for exports that need more than this."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

_PASSTHROUGH = {"Identity", "Dropout"}
# ops whose value is never folded even with constant inputs (none are cheap enough to matter,
# but random generators must stay random)
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}


def force_batch_one(model: onnx.ModelProto) -> onnx.ModelProto:
    """Set the first dimension of every graph input to 1 and drop stale inferred shapes."""
    init_names = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims):
            dims[0].ClearField("dim_param")
            dims[0].dim_value = 1
    for vi in model.graph.output:
        dims = vi.type.tensor_type.shape.dim
        if len(dims) and not dims[0].HasField("dim_value"):
            dims[0].ClearField("dim_param")
            dims[0].dim_value = 1
    del model.graph.value_info[:]
    return model


def static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    out = {}
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        dims = tt.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            out[vi.name] = tuple(int(d.dim_value) for d in dims)
    return out


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - best effort: missing shapes are computed later
        return model


def _eval_node(node: onnx.NodeProto, values: list[np.ndarray], opset: int) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    ins = [f"in{i}" if n else "" for i, n in enumerate(node.input)]
    feeds = {f"in{i}": v for i, v in enumerate(values) if node.input[i]}
    n = helper.make_node(
        node.op_type, ins, [f"out{i}" for i in range(len(node.output))], domain=node.domain
    )
    n.attribute.extend(node.attribute)
    g = helper.make_graph(
        [n],
        "fold",
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in feeds.items()
        ],
        [
            helper.make_tensor_value_info(f"out{i}", onnx.TensorProto.UNDEFINED, None)
            for i in range(len(node.output))
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", opset)])
    return list(ReferenceEvaluator(m).run(None, feeds))


def cleanup(model: onnx.ModelProto, slim: bool = False) -> onnx.ModelProto:
    """Return a cleaned copy: batch 1, no Constant/Identity nodes, constants folded, shapes
    inferred. The graph's output names are preserved."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    force_batch_one(m)
    if slim:
        try:
            import onnxslim

            m = onnxslim.slim(m)
            force_batch_one(m)
        except Exception:  # noqa: BLE001 - onnxslim is a convenience; our own pass follows
            pass
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 17)
    m = infer_shapes(m)
    shapes = static_shapes(m)
    graph = m.graph
    consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    graph_inputs = {vi.name for vi in graph.input} - set(consts)
    outputs = [o.name for o in graph.output]
    alias: dict[str, str] = {}
    kept: list[onnx.NodeProto] = []
    new_consts: dict[str, np.ndarray] = {}

    def res(t: str) -> str:
        while t in alias:
            t = alias[t]
        return t

    for node in graph.node:
        for i, t in enumerate(node.input):
            if t:
                node.input[i] = res(t)
        op = node.op_type
        if op == "Constant":
            val = _eval_node(node, [], opset)[0]
            consts[node.output[0]] = val
            new_consts[node.output[0]] = val
            continue
        if op in _PASSTHROUGH and node.input[0] and node.output[0] not in outputs:
            alias[node.output[0]] = node.input[0]
            continue
        if op == "Shape" and node.input[0] in shapes:
            shp = np.array(shapes[node.input[0]], dtype=np.int64)
            start = next((a.i for a in node.attribute if a.name == "start"), 0)
            end = next((a.i for a in node.attribute if a.name == "end"), None)
            val = shp[start:end]
            consts[node.output[0]] = val
            new_consts[node.output[0]] = val
            continue
        if (
            node.domain in ("", "ai.onnx")
            and op not in _NO_FOLD
            and node.input
            and all((not t) or t in consts for t in node.input)
            and not any(o in outputs for o in node.output)
        ):
            try:
                vals = _eval_node(node, [consts[t] if t else None for t in node.input], opset)
            except Exception:  # noqa: BLE001 - leave it to the importer to report
                kept.append(node)
                continue
            for o, v in zip(node.output, vals):
                consts[o] = np.asarray(v)
                new_consts[o] = np.asarray(v)
            continue
        kept.append(node)

    # keep only constants that are still read
    used = {t for n in kept for t in n.input}
    inits = [
        numpy_helper.from_array(np.asarray(v), k)
        for k, v in consts.items()
        if k in used and k not in graph_inputs
    ]
    del graph.node[:]
    graph.node.extend(kept)
    del graph.initializer[:]
    graph.initializer.extend(inits)
    # initializers listed as graph inputs (old exporters) are not real inputs
    real_inputs = [vi for vi in graph.input if vi.name not in consts]
    del graph.input[:]
    graph.input.extend(real_inputs)
    del graph.value_info[:]
    return infer_shapes(m)
