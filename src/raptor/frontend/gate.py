"""The import gate: every ONNX model is checked here before anything compiles, validates or
bounds it.

    check_model(model) -> CheckedModel     model: path, str or onnx.ModelProto

In order: the path exists and is a non-empty regular file; it parses as an ONNX ModelProto;
every name is valid UTF-8; the graph has nodes; its ai.onnx opset is in SUPPORTED_OPSETS; every
initializer decodes to its shape and is finite; the batch is 1 or dynamic; every graph input is
a float32 tensor whose shape is static once the batch is 1; `onnx.checker` passes; the
attributes the frontend lowers are in range; strict shape inference passes (type checks, data
propagation: with the checker, the checker's full check); every graph output is a float32
tensor computed by a node; each Conv's weight matches its kernel, groups, input channels and
bias, and every Conv/pool window fits its padded input; onnxruntime loads it. The checker,
shape inference and onnxruntime see a batch-1 copy whose large weights are typed graph inputs
(no megabytes serialized again). The first failure raises ModelError with one line:
`<file>: node '<name>' (<op>): <problem>`, or `<file>: <problem>` when no node is at fault.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import TensorProto, helper, shape_inference

from raptor.errors import ModelError
from raptor.frontend.cleanup import force_batch_one, static_shapes
from raptor.frontend.files import check_file

# ai.onnx opsets that both pinned runtimes define (onnx 1.23: 1-28, onnxruntime 1.32: 7-28)
SUPPORTED_OPSETS = range(7, 29)

_SPATIAL = ("Conv", "MaxPool", "AveragePool")
_AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass
class CheckedModel:
    """A model that passed the gate: the ModelProto as read, and what can be fed and compared."""

    model: onnx.ModelProto
    label: str
    opset: int
    inputs: dict[str, tuple[int, ...]] = field(default_factory=dict)  # batch forced to 1
    outputs: list[str] = field(default_factory=list)


def check_model(model: str | Path | onnx.ModelProto) -> CheckedModel:
    """Run the whole gate (see the module docstring); raises ModelError on the first failure."""
    if isinstance(model, onnx.ModelProto):
        label = f"model {model.graph.name or 'graph'!r}"
        m = model
    else:
        label = str(model)
        m = _parse(check_file(model), label)

    def fail(problem: str, node: onnx.NodeProto | None = None) -> ModelError:
        return ModelError(f"{label}: {_where(node)}{problem}")

    if not m.HasField("graph"):
        raise fail("not an ONNX model (no graph)")
    bad = _non_utf8_string(m)
    if bad:
        raise fail(f"{bad} is not valid UTF-8")
    g = m.graph
    if not g.node:
        raise fail("the graph has no nodes")
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        raise fail("the model imports no ai.onnx opset")
    if opset not in SUPPORTED_OPSETS:
        lo, hi = SUPPORTED_OPSETS[0], SUPPORTED_OPSETS[-1]
        raise fail(f"opset {opset} is not supported (supported: {lo} to {hi})")
    _check_initializers(g, fail)
    _check_batch(g, fail)
    skeleton = _skeleton(m)
    inputs = _check_inputs(skeleton.graph, {t.name for t in g.initializer}, fail)
    for vi in g.output:  # the checker's own message for this names neither the tensor nor why
        if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
            raise fail(f"output {vi.name!r} declares no shape (onnx.checker requires one)")
    try:
        onnx.checker.check_model(skeleton)
    except (onnx.checker.ValidationError, ValueError) as e:
        node, problem = _checker_message(g, str(e))
        raise fail(f"onnx.checker: {problem}", node) from None
    for node in g.node:
        problem = _attribute_problem(node)
        if problem:
            raise fail(problem, node)
    try:
        inferred = shape_inference.infer_shapes(
            skeleton, check_type=True, strict_mode=True, data_prop=True
        )
    except (shape_inference.InferenceError, onnx.checker.ValidationError, ValueError) as e:
        # a window larger than its input passes inference with a size-0 output, and the node
        # that reads it fails instead: name the cause when shapes without strictness show it
        _check_windows(g, static_shapes(_loose_inference(skeleton)), fail)
        node, problem = _inference_message(g, str(e))
        raise fail(f"shape inference: {problem}", node) from None
    outputs = _check_outputs(g, fail)
    _check_windows(g, static_shapes(inferred), fail)
    problem = _onnxruntime_problem(skeleton)
    if problem:
        m_node = re.match(r"Node \((.*?)\) Op \(([\w.]+)\) (?:\[\w+\] )?(.*)", problem)
        node = _find_node(g, m_node.group(1), m_node.group(2)) if m_node else None
        raise fail(f"onnxruntime: {m_node.group(3) if node else problem}", node)
    return CheckedModel(m, label, int(opset), inputs, outputs)


def _parse(path: Path, label: str) -> onnx.ModelProto:
    from google.protobuf.message import DecodeError

    try:
        data = path.read_bytes()
    except OSError as e:
        raise ModelError(f"{label}: cannot read: {e.strerror}") from None
    m = onnx.ModelProto()
    try:
        m.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise ModelError(f"{label}: not an ONNX model (protobuf parse error: {e})") from None
    if any(t.data_location == TensorProto.EXTERNAL for t in m.graph.initializer):
        from onnx.external_data_helper import load_external_data_for_model

        try:
            load_external_data_for_model(m, str(path.parent))
        except (OSError, ValueError) as e:
            raise ModelError(f"{label}: cannot load external tensor data: {e}") from None
    return m


def _non_utf8_string(msg, path: str = "model") -> str | None:
    """The first string field (a name, an op type, a doc string) that protobuf could not
    decode as UTF-8 (ONNX is proto2: such fields come back as bytes); None if all decode."""
    for fd, value in msg.ListFields():
        values = list(value) if fd.is_repeated else [value]
        if fd.type == fd.TYPE_STRING:
            if any(isinstance(v, bytes) for v in values):
                return f"{path}.{fd.name}"
        elif fd.type == fd.TYPE_MESSAGE:
            for i, v in enumerate(values):
                bad = _non_utf8_string(
                    v, f"{path}.{fd.name}" + (f"[{i}]" if fd.is_repeated else "")
                )
                if bad:
                    return bad
    return None


def _where(node: onnx.NodeProto | None) -> str:
    if node is None:
        return ""
    name = node.name or (node.output[0] if node.output else "?")
    return f"node {name!r} ({node.op_type}): "


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.split("==> Context:")[0].splitlines() if ln.strip()]
    return lines[0] if lines else text.strip() or "invalid model"


def _find_node(g: onnx.GraphProto, name: str, op: str | None = None) -> onnx.NodeProto | None:
    for n in g.node:
        if (n.name == name or (not n.name and n.output and n.output[0] == name)) and (
            op is None or n.op_type == op
        ):
            return n
    return None


def _checker_message(g: onnx.GraphProto, text: str) -> tuple[onnx.NodeProto | None, str]:
    """onnx.checker puts the node in a '==> Context: ... Name: X OpType: Y' trailer."""
    m = re.search(r"Name: (\S*) OpType: (\S+)", text)
    node = _find_node(g, m.group(1), m.group(2)) if m else None
    return node, _first_line(text)


def _inference_message(g: onnx.GraphProto, text: str) -> tuple[onnx.NodeProto | None, str]:
    """Strict inference lists '(op_type:Conv, node name: conv0): [ShapeInferenceError] ...'
    for the first failing node, then the nodes it starved; keep the first."""
    m = re.search(r"\(op_type:([\w.]+), node name: (.*?)\): (?:\[\w+\] )?(.*)", text)
    if not m:
        return None, _first_line(re.sub(r"^\[\w+\] (Inference error\(s\): )?", "", text))
    return _find_node(g, m.group(2), m.group(1)), m.group(3).strip()


def _attribute_problem(node: onnx.NodeProto) -> str | None:
    """Range checks of the attributes the frontend lowers (the checker checks only types)."""
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    op = node.op_type
    if op in _SPATIAL:
        kernel = a.get("kernel_shape")
        for name, least, what in (
            ("kernel_shape", 1, "positive"),
            ("strides", 1, "positive"),
            ("dilations", 1, "positive"),
            ("pads", 0, "non-negative"),
        ):
            v = a.get(name)
            if v is not None and any(int(x) < least for x in v):
                return f"{name} {list(v)} must be {what}"
            if v is not None and kernel is not None:
                want = 2 * len(kernel) if name == "pads" else len(kernel)
                if len(v) != want:
                    return f"{name} has {len(v)} values, a {len(kernel)}-D kernel needs {want}"
        auto = a.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto not in _AUTO_PAD:
            return f"auto_pad {auto!r} is not one of {', '.join(_AUTO_PAD)}"
        if auto != "NOTSET" and "pads" in a:
            return f"auto_pad {auto} and explicit pads cannot both be given"
        pads = a.get("pads")
        if op != "Conv" and pads is not None and kernel is not None:
            n = len(kernel)
            if any(pads[i] >= kernel[i] or pads[i + n] >= kernel[i] for i in range(n)):
                return f"pads {list(pads)} must be smaller than kernel_shape {list(kernel)}"
        if op == "Conv" and int(a.get("group", 1)) < 1:
            return f"group {a['group']} must be positive"
        for flag in ("ceil_mode", "count_include_pad", "storage_order"):
            if flag in a and int(a[flag]) not in (0, 1):
                return f"{flag} {a[flag]} must be 0 or 1"
    elif op == "Gemm":
        for flag in ("transA", "transB"):
            if flag in a and int(a[flag]) not in (0, 1):
                return f"{flag} {a[flag]} must be 0 or 1"
        for name in ("alpha", "beta"):
            if name in a and not math.isfinite(float(a[name])):
                return f"{name} {a[name]} is not finite"
    elif op == "BatchNormalization":
        eps = float(a.get("epsilon", 1e-5))
        if not (math.isfinite(eps) and eps >= 0):
            return f"epsilon {eps} must be finite and non-negative"
    return None


def _check_initializers(g: onnx.GraphProto, fail) -> None:
    """Every weight decodes to its declared shape and holds finite numbers."""
    import numpy as np
    from onnx import numpy_helper

    known = set(TensorProto.DataType.values())
    for t in g.initializer:
        if t.data_type not in known:
            raise fail(f"initializer {t.name!r} has an unknown data type {t.data_type}")
        try:
            a = numpy_helper.to_array(t)
        except (ValueError, TypeError, KeyError) as e:
            raise fail(f"initializer {t.name!r} does not decode: {e}") from None
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise fail(f"initializer {t.name!r} holds NaN or infinite values")


def _check_batch(g: onnx.GraphProto, fail) -> None:
    """A fixed batch other than 1 would be silently changed by forcing batch 1."""
    inits = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) and dims[0].HasField("dim_value") and dims[0].dim_value != 1:
            raise fail(
                f"input {vi.name!r} has batch {dims[0].dim_value}; "
                "only batch 1 or a dynamic batch is supported"
            )


def _weight_problem(
    node: onnx.NodeProto, weights: dict[str, list[int]], shapes: dict[str, tuple[int, ...]]
) -> str | None:
    """A Conv's weight must match its kernel_shape, group, input channels and bias (strict
    inference compares none of these)."""
    if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in weights:
        return None
    w = weights[node.input[1]]
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    group = int(a.get("group", 1))
    if "kernel_shape" in a and w[2:] != list(a["kernel_shape"]):
        return f"kernel_shape {list(a['kernel_shape'])} does not match the weight's {w[2:]}"
    x = shapes.get(node.input[0])
    if len(w) < 2 or w[0] % group or (x is not None and len(x) > 1 and w[1] * group != x[1]):
        c = x[1] if x is not None and len(x) > 1 else "?"
        return f"weight {w} does not fit {c} input channels in {group} group(s)"
    if len(node.input) > 2 and node.input[2] in weights and weights[node.input[2]] != [w[0]]:
        return f"bias of shape {weights[node.input[2]]} does not match {w[0]} output channels"
    return None


def _onnxruntime_problem(skeleton: onnx.ModelProto) -> str | None:
    """The reference runs in onnxruntime: its kernels check attributes at load time that the
    checks above may miss. Loading the skeleton (weights are inputs, no optimisation) costs
    10-30 ms on the suite's models."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 4  # its own log line would be a second line on stderr
    try:
        ort.InferenceSession(skeleton.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime's error classes derive from Exception
        text = _first_line(str(e))
        text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
        return text.split(" was false. ", 1)[-1]  # ORT_ENFORCE: drop source location, condition
    return None


def _loose_inference(m: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    except (shape_inference.InferenceError, onnx.checker.ValidationError, ValueError):
        return m


def _check_windows(g: onnx.GraphProto, shapes: dict[str, tuple[int, ...]], fail) -> None:
    weights = {t.name: list(t.dims) for t in g.initializer}
    for node in g.node:
        problem = _weight_problem(node, weights, shapes) or _window_problem(node, shapes, weights)
        if problem:
            raise fail(problem, node)


def _window_problem(
    node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]], weights
) -> str | None:
    """Every sliding window fits the padded input at least once (strict inference lets a
    kernel larger than the input through, with a negative output size)."""
    if node.op_type not in _SPATIAL or not node.input:
        return None
    x = shapes.get(node.input[0])
    a = {v.name: helper.get_attribute_value(v) for v in node.attribute}
    kernel = a.get("kernel_shape")
    if kernel is None and len(node.input) > 1:
        kernel = weights.get(node.input[1], [None, None])[2:]
    if x is None or not kernel or len(x) != len(kernel) + 2:
        return None
    n = len(kernel)
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto.startswith("SAME"):
        return None
    pads = list(a.get("pads", [0] * 2 * n)) if auto == "NOTSET" else [0] * 2 * n
    dil = list(a.get("dilations", [1] * n))
    for i in range(n):
        span = dil[i] * (kernel[i] - 1) + 1
        if x[2 + i] + pads[i] + pads[i + n] < span:
            return (
                f"window of {span} on axis {2 + i} is larger than the padded input "
                f"({x[2 + i]} + pads {pads[i]}, {pads[i + n]})"
            )
    return None


def _skeleton(m: onnx.ModelProto) -> onnx.ModelProto:
    """A copy with batch 1 whose large float weights are graph inputs of the same type and
    shape instead of initializers: the checker and shape inference see the same graph without
    serializing megabytes of weights (their values were checked by _check_initializers; small
    tensors such as Reshape shapes and Resize scales stay, for data propagation)."""
    c = onnx.ModelProto()
    c.CopyFrom(m)
    force_batch_one(c)  # leaves initializers (and inputs named like them) alone
    declared = {vi.name for vi in c.graph.input}
    kept = []
    for t in c.graph.initializer:
        if t.data_type == TensorProto.FLOAT and math.prod(t.dims) > 64:
            if t.name not in declared:
                c.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, t.dims))
        else:
            kept.append(t)
    small = [onnx.TensorProto.FromString(t.SerializeToString()) for t in kept]
    del c.graph.initializer[:]
    c.graph.initializer.extend(small)
    return c


def _type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"type {elem_type}"


def _check_inputs(g: onnx.GraphProto, weights: set[str], fail) -> dict[str, tuple[int, ...]]:
    real = [vi for vi in g.input if vi.name not in weights]
    if not real:
        raise fail("the graph has no input to feed")
    out: dict[str, tuple[int, ...]] = {}
    for vi in real:
        what = f"input {vi.name!r}"
        if not vi.type.HasField("tensor_type"):
            raise fail(f"{what} is not a tensor")
        tt = vi.type.tensor_type
        if tt.elem_type != TensorProto.FLOAT:
            raise fail(f"{what} is {_type_name(tt.elem_type)}; only float32 inputs can be fed")
        if not tt.HasField("shape") or not tt.shape.dim:
            raise fail(f"{what} has no shape; inputs need a batch dimension and a static shape")
        dims = []
        for i, d in enumerate(tt.shape.dim):
            if not d.HasField("dim_value"):
                sym = f" {d.dim_param!r}" if d.dim_param else ""
                raise fail(
                    f"{what} has a dynamic dimension{sym} at axis {i}; "
                    "only the batch dimension (axis 0) may be dynamic"
                )
            if d.dim_value <= 0:
                raise fail(f"{what} has a dimension of size {d.dim_value} at axis {i}")
            dims.append(int(d.dim_value))
        out[vi.name] = tuple(dims)
    return out


def _check_outputs(g: onnx.GraphProto, fail) -> list[str]:
    if not g.output:
        raise fail("the graph has no outputs")
    produced = {o for n in g.node for o in n.output if o}
    for vi in g.output:
        what = f"output {vi.name!r}"
        if vi.name not in produced:
            raise fail(f"{what} is not computed by any node")
        if not vi.type.HasField("tensor_type"):
            raise fail(f"{what} is not a tensor")
        et = vi.type.tensor_type.elem_type
        if et != TensorProto.FLOAT:
            raise fail(f"{what} is {_type_name(et)}; only float32 outputs can be compared")
    return [vi.name for vi in g.output]
