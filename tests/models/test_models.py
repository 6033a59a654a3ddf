import hashlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from raptor.errors import RaptorError
from raptor.models import (
    DEFAULT_INPUT_SIZE,
    MODEL_NAMES,
    build_model,
    input_sensitivity,
    model_info,
    save_model,
)

SMALL = {"vgg8": 32, "resnet18": 32, "resnet34": 32, "googlenet": 32, "yolo11n": 64}


def _run(model, seed=3):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(seed).standard_normal(inp.shape).astype(np.float32)
    return sess.run(None, {inp.name: x})


@pytest.fixture(scope="module", params=MODEL_NAMES)
def small_model(request):
    return request.param, build_model(request.param, SMALL[request.param])


def test_names_and_sizes():
    assert MODEL_NAMES == ("vgg8", "resnet18", "resnet34", "googlenet", "yolo11n")
    assert DEFAULT_INPUT_SIZE == {
        "vgg8": 32,
        "resnet18": 224,
        "resnet34": 224,
        "googlenet": 224,
        "yolo11n": 640,
    }


def test_checker_and_ort(small_model):
    name, m = small_model
    onnx.checker.check_model(m, full_check=True)
    assert m.opset_import[0].version == 17
    shp = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert shp == [1, 3, SMALL[name], SMALL[name]]
    outs = _run(m)
    for y in outs:
        assert np.isfinite(y).all()
    if name == "yolo11n":
        y = outs[0]
        assert y.shape[:2] == (1, 84)
        assert (y[:, 4:] >= 0).all() and (y[:, 4:] <= 1).all()  # class scores
        assert np.abs(y[:, :4]).max() < 16 * 32 * 2  # boxes in pixels: < 2 * reg_max * stride
    else:
        assert np.abs(outs[0]).max() < 100


def test_intermediate_activations_bounded(small_model):
    """Every tensor (except yolo's pixel-unit box decode) stays of order 1-100."""
    name, m = small_model
    full = onnx.ModelProto()
    full.CopyFrom(m)
    skip = ("decode.", "dfl.conv", "dfl.out", "output0")
    for n in full.graph.node:
        if not n.name.startswith(skip):
            full.graph.output.extend(
                [onnx.helper.make_empty_tensor_value_info(t) for t in n.output]
            )
    worst = 0.0
    for seed in (1, 2):
        for y in _run(full, seed)[1:]:
            worst = max(worst, float(np.abs(y).max()))
    # yolo's deep head at tiny maps has sparse spikes of a few tens (see model_info notes)
    bound = 300 if name == "yolo11n" else 100
    assert 0.5 < worst < bound, f"{name}: max |activation| {worst}"


def test_sensitivity(small_model):
    name, m = small_model
    s = input_sensitivity(m, seed=0)
    assert s > 0.02, f"{name}: output barely depends on the input (sensitivity {s:.2e})"


def test_deterministic_bytes():
    a = build_model("resnet18", 32, seed=1).SerializeToString()
    b = build_model("resnet18", 32, seed=1).SerializeToString()
    c = build_model("resnet18", 32, seed=2).SerializeToString()
    assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest()
    assert a != c


def test_vgg8_fc_follows_input_size():
    m = build_model("vgg8", 16)
    fc = next(t for t in m.graph.initializer if t.name == "classifier.fc0.weight")
    assert list(fc.dims) == [1024, 512 * 2 * 2]


@pytest.mark.parametrize(
    "name,expected,tol",
    [
        ("vgg8", 12_976_266, 0),
        ("resnet18", 11_689_512, 0),
        ("resnet34", 21_797_672, 0),
        ("googlenet", 6_624_904, 0),
        ("yolo11n", 2_624_080, 0.002),
    ],
)
def test_param_counts(name, expected, tol):
    info = model_info(name)
    assert abs(info["params"] - expected) <= tol * expected, info
    assert info["params_folded"] <= info["params"]


def test_save_model_atomic(tmp_path):
    p = save_model("vgg8", tmp_path / "sub" / "v.onnx", input_size=16)
    assert p.exists() and not list(p.parent.glob("*.tmp"))
    assert onnx.load(str(p)).graph.node
    p2 = save_model("vgg8", tmp_path, input_size=16)
    assert p2.name == "vgg8.onnx" and p2.read_bytes() == p.read_bytes()


def test_unknown_model():
    with pytest.raises(RaptorError, match="unknown model"):
        build_model("alexnet")


@pytest.mark.slow
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_full_size(name):
    m = build_model(name)
    onnx.checker.check_model(m, full_check=True)
    outs = _run(m)
    assert all(np.isfinite(y).all() for y in outs)
    assert input_sensitivity(m) > 0.02


def test_bytes_do_not_depend_on_blas_threads():
    import os
    import subprocess
    import sys

    code = (
        "import hashlib;from raptor.models import build_model;"
        "print(hashlib.sha256(build_model('yolo11n', 64).SerializeToString()).hexdigest())"
    )
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    here = hashlib.sha256(build_model("yolo11n", 64).SerializeToString()).hexdigest()
    assert out.stdout.strip() == here


def test_yolo11n_realistic_activations(tmp_path, capsys):
    """--activations realistic: batch-calibrated BN (centred variance, weight 6, bias -1) gives
    the attention and the head a trained detector's magnitudes; the probe build is untouched."""
    from raptor.cli import main
    from raptor.models.common import REALISTIC_BETA, REALISTIC_GAMMA
    from raptor.models.yolo import build_yolo11n

    _, probe = build_yolo11n(64)
    model, real = build_yolo11n(64, activations="realistic")
    assert onnx.checker.check_model(model, full_check=True) is None
    # pre-activation channels: std 6 and mean -1 on the probe the BN was calibrated on (checked
    # on the first, largest map: deeper maps of a 64x64 input shrink towards the layer's stats)
    v = real.vals["model.0"]
    assert np.allclose(v.std(axis=(0, 2, 3)), REALISTIC_GAMMA, rtol=0.05)
    assert np.allclose(v.mean(axis=(0, 2, 3)), REALISTIC_BETA, atol=0.05 * REALISTIC_GAMMA)
    # the attention logits are where the probe build stays small and the realistic one does not
    att = "model.10.m.0.attn.scaled"
    assert np.abs(real.vals[att]).max() > 10 * np.abs(probe.vals[att]).max()
    assert (
        model.SerializeToString()
        == build_model("yolo11n", 64, activations="realistic").SerializeToString()
    )
    assert model.SerializeToString() != build_model("yolo11n", 64).SerializeToString()

    out = tmp_path / "v.onnx"
    assert main(["models", "build", "vgg8", "--activations", "realistic", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "raptor: error: --activations realistic is only available for yolo11n, not vgg8\n"
    )
    assert not out.exists() and not list(tmp_path.iterdir())
    y = tmp_path / "y.onnx"
    args = ["models", "build", "yolo11n", "--input-size", "64", "--activations", "realistic"]
    assert main([*args, "--out", str(y)]) == 0
    assert y.read_bytes() == model.SerializeToString()
