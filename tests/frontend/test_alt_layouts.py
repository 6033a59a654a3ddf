"""The frontend on networks laid out the way other exporters lay them out: explicit Pad nodes,
unfused BatchNormalization, Clip(0, 6), SiLU, Gemm with transB=0 / alpha / beta, MatMul + Add,
ReduceMean + Reshape, Identity/Constant/Shape chains, a symbolic batch dimension."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from raptor.errors import UnsupportedOpError
from raptor.frontend import NORMALIZED_OPS, load_graph
from raptor.frontend.evaluate import evaluate

RNG = np.random.default_rng(0)


def _w(*shape, scale=0.3):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes, inits, out_shape, batch="N", opset=17, size=12):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, *out_shape[1:]])
    g = helper.make_graph(nodes, "alt", [x], [y], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _check_same(m, size=12, seed=0):
    g = load_graph(m)
    assert {n.op for n in g.nodes} <= NORMALIZED_OPS
    x = np.random.default_rng(seed).standard_normal((1, 3, size, size)).astype(np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": x})[0]
    got = evaluate(g, {"x": x})["y"]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    return g


def _bn(prefix, c):
    return [
        _init(prefix + ".s", RNG.uniform(0.5, 1.5, c).astype(np.float32)),
        _init(prefix + ".b", _w(c)),
        _init(prefix + ".m", _w(c)),
        _init(prefix + ".v", RNG.uniform(0.5, 2.0, c).astype(np.float32)),
    ]


def alt_network():
    """conv stack with explicit pads, BN, Clip, SiLU, pooling and two FC layouts."""
    n = helper.make_node
    inits = [
        _init("w1", _w(8, 3, 3, 3)),
        *_bn("bn1", 8),
        _init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
        _init("w2", _w(8, 8, 3, 3)),
        _init("b2", _w(8)),
        _init("w3", _w(8, 8, 1, 1)),
        *_bn("bn3", 8),
        _init("mpads", np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64)),
        _init("zero", np.array(0.0, np.float32)),
        _init("six", np.array(6.0, np.float32)),
        _init("axes", np.array([0], np.int64)),
        _init("g1", _w(8, 16)),
        _init("g1b", _w(16)),
        _init("mm", _w(16, 5)),
        _init("mmb", _w(1, 5)),
    ]
    nodes = [
        n("Identity", ["x"], ["x_id"], name="id0"),
        n("Pad", ["x_id", "pads"], ["x_pad"], name="pad0"),
        n("Conv", ["x_pad", "w1"], ["c1"], name="conv1"),
        n("BatchNormalization", ["c1", "bn1.s", "bn1.b", "bn1.m", "bn1.v"], ["bn1"], name="bn1"),
        n("Clip", ["bn1", "zero", "six"], ["r1"], name="relu6"),
        n("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Sigmoid", ["c2"], ["s2"], name="sig2"),
        n("Mul", ["c2", "s2"], ["a2"], name="silu2"),
        n("Conv", ["a2", "w3"], ["c3"], name="conv3"),
        n("Add", ["c3", "a2"], ["sum"], name="res"),
        n("BatchNormalization", ["sum", "bn3.s", "bn3.b", "bn3.m", "bn3.v"], ["bn3"], name="bn3"),
        n("Relu", ["bn3"], ["r3"], name="relu3"),
        n("Pad", ["r3", "mpads"], ["r3p"], name="pad1"),
        n("MaxPool", ["r3p"], ["p3"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        n("ReduceMean", ["p3"], ["gap"], name="rmean", axes=[2, 3], keepdims=1),
        n("Shape", ["gap"], ["shp"], name="shape"),
        n("Gather", ["shp", "axes"], ["bdim"], name="gather", axis=0),
        n("Constant", [], ["minus1"], name="const", value=_init("m1", np.array([-1], np.int64))),
        n("Concat", ["bdim", "minus1"], ["newshape"], name="cat_shape", axis=0),
        n("Reshape", ["gap", "newshape"], ["flat"], name="reshape"),
        n("Gemm", ["flat", "g1", "g1b"], ["f1"], name="fc1", transB=0, alpha=0.5, beta=2.0),
        n("Sigmoid", ["f1"], ["f1s"], name="fc1_sigmoid"),
        n("MatMul", ["f1s", "mm"], ["f2"], name="fc2"),
        n("Add", ["f2", "mmb"], ["y"], name="fc2_bias"),
    ]
    return _model(nodes, inits, (1, 5))


def test_alt_network_matches_ort():
    g = _check_same(alt_network())
    ops = [nd.op for nd in g.nodes]
    assert ops == [
        "Conv",
        "Conv",
        "Conv",
        "Add",
        "Conv",
        "MaxPool",
        "GlobalAveragePool",
        "Flatten",
        "Gemm",
        "Gemm",
    ]
    c1, c2, c3, add, bnconv, pool, _, _, fc1, fc2 = g.nodes
    assert c1.attrs["pads"] == (1, 1, 1, 1) and c1.attrs["activation"] == ("clip", 0.0, 6.0)
    assert c2.attrs["activation"] == "silu" and c2.attrs["strides"] == (2, 2)
    assert c3.attrs["activation"] is None and add.attrs["activation"] is None
    # BN after an Add becomes a depthwise 1x1 conv carrying the Relu
    assert bnconv.attrs["group"] == 8 and bnconv.attrs["activation"] == "relu"
    assert pool.attrs["pads"] == (0, 0, 1, 1)
    assert fc1.params["W"].shape == (8, 16) and fc1.attrs["activation"] == "sigmoid"
    assert fc2.params["W"].shape == (16, 5) and fc2.params["B"].shape == (5,)
    assert g.outputs == ["y"] and g.shapes["y"] == (1, 5) and g.shapes["x"] == (1, 3, 12, 12)


def test_transb1_and_reducemean_keepdims0_and_avgpool_ceil():
    n = helper.make_node
    inits = [_init("w", _w(4, 3, 3, 3)), _init("fc", _w(7, 4)), _init("fcb", _w(7))]
    nodes = [
        n("Conv", ["x", "w"], ["c"], name="conv", auto_pad="SAME_UPPER", strides=[2, 2]),
        n("Relu", ["c"], ["r"], name="relu"),
        n(
            "AveragePool",
            ["r"],
            ["ap"],
            name="ap",
            kernel_shape=[3, 3],
            strides=[2, 2],
            ceil_mode=1,
        ),
        n("ReduceMean", ["ap"], ["m"], name="rm", axes=[-1, -2], keepdims=0),
        n("Gemm", ["m", "fc", "fcb"], ["y"], name="fc", transB=1),
    ]
    g = _check_same(_model(nodes, inits, (1, 7), batch=1, size=11), size=11)
    assert [nd.op for nd in g.nodes] == [
        "Conv",
        "AveragePool",
        "GlobalAveragePool",
        "Flatten",
        "Gemm",
    ]
    assert g.nodes[0].attrs["pads"] == (1, 1, 1, 1)
    assert g.nodes[1].attrs["pads"][2:] == (1, 1) and g.nodes[1].attrs["count_include_pad"] == 0


def test_unsupported_op_message():
    n = helper.make_node
    nodes = [n("LeakyRelu", ["x"], ["y"], name="my_leaky", alpha=0.1)]
    with pytest.raises(UnsupportedOpError) as e:
        load_graph(_model(nodes, [], (1, 3, 12, 12)))
    msg = str(e.value)
    assert "LeakyRelu" in msg and "my_leaky" in msg and "\n" not in msg


def test_unfoldable_pad_is_reported():
    n = helper.make_node
    inits = [_init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))]
    nodes = [n("Pad", ["x", "pads"], ["y"], name="lonely_pad", mode="reflect")]
    with pytest.raises(UnsupportedOpError, match="Pad.*lonely_pad"):
        load_graph(_model(nodes, inits, (1, 3, 14, 14)))


def test_load_from_path(tmp_path):
    m = alt_network()
    p = tmp_path / "alt.onnx"
    onnx.save(m, str(p))
    assert [nd.op for nd in load_graph(p).nodes] == [nd.op for nd in load_graph(str(p)).nodes]
