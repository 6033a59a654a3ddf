import json
import multiprocessing as mp

import numpy as np
import onnxruntime as ort

from raptor.models import save_model
from raptor.validation import reference as R
from raptor.validation.reference import ensure_reference


def _model(tmp_path, seed=0):
    return save_model("vgg8", tmp_path / "vgg8.onnx", input_size=16, seed=seed)


def test_generate_and_reuse(tmp_path, monkeypatch):
    mp_ = _model(tmp_path)
    common = tmp_path / "common"
    ref = ensure_reference(mp_, common, n_inputs=3, seed=5)
    assert not ref.cached and len(ref.inputs) == 3 and len(ref.outputs) == 3
    x0 = ref.inputs[0]["input"]
    assert x0.dtype == np.float32 and x0.shape == (1, 3, 16, 16)
    np.testing.assert_array_equal(
        x0, np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    )
    sess = ort.InferenceSession(str(mp_), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(
        ref.outputs[2][sess.get_outputs()[0].name],
        sess.run(None, ref.inputs[2])[0],
        rtol=1e-5,
        atol=1e-6,
    )
    assert ref.sensitivity > 0.02
    meta = json.loads((common / "reference_seed5.json").read_text())
    assert meta["model_sha256"] == R.sha256_file(mp_)

    calls = []
    real = R._generate
    monkeypatch.setattr(R, "_generate", lambda *a, **k: calls.append(1) or real(*a, **k))
    again = ensure_reference(mp_, common, n_inputs=2, seed=5)
    assert again.cached and not calls
    np.testing.assert_array_equal(
        again.outputs[1]["classifier.fc1"], ref.outputs[1]["classifier.fc1"]
    )
    # more inputs than cached, fast=False, or a changed model: regenerate
    ensure_reference(mp_, common, n_inputs=4, seed=5)
    assert len(calls) == 1
    ensure_reference(mp_, common, n_inputs=4, seed=5, fast=False)
    assert len(calls) == 2
    _model(tmp_path, seed=1)  # same path, new bytes
    changed = ensure_reference(mp_, common, n_inputs=2, seed=5)
    assert len(calls) == 3 and not changed.cached
    assert not np.allclose(changed.outputs[0]["classifier.fc1"], ref.outputs[0]["classifier.fc1"])
    assert not list(common.glob("*.tmp"))


def test_intermediates(tmp_path):
    mp_ = _model(tmp_path)
    ref = ensure_reference(mp_, tmp_path / "c", n_inputs=1, intermediates=True)
    assert "features.conv0" in ref.intermediates[0] and "classifier.fc0" in ref.intermediates[0]
    again = ensure_reference(mp_, tmp_path / "c", n_inputs=1, intermediates=True)
    assert again.cached
    np.testing.assert_array_equal(
        again.intermediates[0]["features.pool2"], ref.intermediates[0]["features.pool2"]
    )
    assert np.isfinite(ref.sensitivity)


def _worker(args):
    path, common = args
    r = ensure_reference(path, common, n_inputs=2, seed=0)
    return float(r.outputs[1]["classifier.fc1"].sum())


def test_concurrent_callers(tmp_path):
    mp_ = _model(tmp_path)
    common = tmp_path / "shared"
    with mp.get_context("spawn").Pool(2) as pool:
        sums = pool.map(_worker, [(str(mp_), str(common))] * 4)
    assert len(set(sums)) == 1
    assert ensure_reference(mp_, common, n_inputs=2).cached
