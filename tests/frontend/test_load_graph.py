import numpy as np
import onnxruntime as ort
import pytest

from raptor.frontend import NORMALIZED_OPS, load_graph
from raptor.frontend.evaluate import evaluate
from raptor.models import build_model

SMALL = {"vgg8": 32, "resnet18": 32, "resnet34": 32, "googlenet": 32, "yolo11n": 64}


def _ort(model, x):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"input": x})))


@pytest.mark.parametrize("name", ["vgg8", "resnet18", "googlenet", "yolo11n"])
def test_suite_model_imports_and_matches_ort(name):
    m = build_model(name, SMALL[name])
    g = load_graph(m)
    assert {n.op for n in g.nodes} <= NORMALIZED_OPS
    assert not any(n.op == "BatchNormalization" for n in g.nodes)
    x = (
        np.random.default_rng(4)
        .standard_normal((1, 3, SMALL[name], SMALL[name]))
        .astype(np.float32)
    )
    ref = _ort(m, x)
    got = evaluate(g, {"input": x})
    assert list(got) == list(ref)
    for k in ref:
        assert got[k].shape == ref[k].shape
        np.testing.assert_allclose(
            got[k], ref[k], atol=1e-4 * max(1.0, np.abs(ref[k]).max()), rtol=1e-4
        )


def test_resnet18_canonical_form():
    g = load_graph(build_model("resnet18", 32))
    ops = [n.op for n in g.nodes]
    assert ops.count("Conv") == 20 and ops.count("Add") == 8 and ops.count("Relu") == 0
    assert ops[-3:] == ["GlobalAveragePool", "Flatten", "Gemm"]
    conv1 = g.nodes[0]
    assert conv1.attrs["pads"] == (3, 3, 3, 3) and conv1.attrs["activation"] == "relu"
    assert conv1.params["W"].shape == (64, 3, 7, 7) and conv1.params["B"].shape == (64,)
    adds = [n for n in g.nodes if n.op == "Add"]
    assert all(a.attrs["activation"] == "relu" for a in adds)
    fc = g.nodes[-1]
    assert fc.params["W"].shape == (512, 1000) and fc.params["B"].shape == (1000,)
    assert g.shapes[g.outputs[0]] == (1, 1000)


def test_googlenet_ceil_mode_pads():
    g = load_graph(build_model("googlenet", 64))
    pools = [n for n in g.nodes if n.op == "MaxPool"]
    assert pools[0].attrs["pads"] == (0, 0, 1, 1)  # 32 -> 16 with ceil
    branch = next(p for p in pools if p.attrs["strides"] == (1, 1))
    assert branch.attrs["pads"] == (1, 1, 1, 1)
