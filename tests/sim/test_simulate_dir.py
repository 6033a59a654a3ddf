"""simulate_dir on a written pim/ directory: NHWC input/output layouts, streamed rounds, .npz
inputs, report serialisation; validate_dir against a stand-in reference."""

import json
import sys
import types

import numpy as np
import pytest
from simprog import ld, program, sldi, st

from raptor.errors import SimulationError
from raptor.isa.pimdir import write_pimdir
from raptor.sim import simulate_dir
from raptor.validation.compare import validate_dir

SHAPE = [1, 4, 2, 3]  # 24 elements, stored NHWC
META = {
    "element_bytes": 2,
    "inputs": [{"name": "x", "address": 0, "shape": SHAPE, "layout": "NHWC"}],
    "outputs": [{"name": "y", "address": 100, "shape": SHAPE, "layout": "NHWC"}],
    "pipeline": 2,
}


def copy_dir(tmp_path):
    prog = program([[sldi(1, 100), ld(0, 0, 48), st(1, 0, 48)]], memory=np.zeros(128), meta=META)
    prog.array_group_map = [[]]
    return write_pimdir(prog, tmp_path / "case" / "pim")


def test_identity_program_streams_inputs_per_round(tmp_path, arch):
    copy_dir(tmp_path)
    xs = [
        {"x": np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32)} for i in range(2)
    ]
    r = simulate_dir(tmp_path / "case", arch, "throughput", inputs=xs)
    assert r.pipeline == 2 and len(r.outputs) == 2
    for x, y in zip(xs, r.outputs):
        np.testing.assert_array_equal(y["y"], x["x"])
    d = r.to_dict()
    json.dumps(d)
    assert d["outputs"] == [{"y": SHAPE}, {"y": SHAPE}]
    assert "latency" in r.format()


def test_npz_and_random_inputs(tmp_path, arch):
    copy_dir(tmp_path)
    x = np.arange(24, dtype=np.float32).reshape(SHAPE)
    np.savez(tmp_path / "in.npz", x=x)
    r = simulate_dir(tmp_path / "case" / "pim", arch, "latency", inputs=str(tmp_path / "in.npz"))
    np.testing.assert_array_equal(r.outputs[0]["y"], x)
    r = simulate_dir(tmp_path / "case", arch, "latency")
    assert r.outputs[0]["y"].shape == tuple(SHAPE) and np.abs(r.outputs[0]["y"]).sum() > 0


def test_validate_dir_with_reference(tmp_path, arch, monkeypatch):
    copy_dir(tmp_path)
    xs = [
        {"x": np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32)} for i in range(4)
    ]

    def ensure_reference(model_path, common_dir, n_inputs, seed):
        return types.SimpleNamespace(
            inputs=xs[:n_inputs], outputs=[{"y": x["x"]} for x in xs[:n_inputs]]
        )

    fake = types.ModuleType("raptor.validation.reference")
    fake.ensure_reference = ensure_reference
    monkeypatch.setitem(sys.modules, "raptor.validation.reference", fake)
    monkeypatch.setattr("raptor.frontend.gate.check_model", lambda path: None)  # no model file
    v = validate_dir(tmp_path / "case", "model.onnx", arch, "throughput", 2, 0)
    assert v.passed and len(v.errors) == 2
    assert v.to_dict()["simulation"]["pipeline"] == 2


@pytest.mark.parametrize(
    "write,problem",
    [
        (lambda p: p.write_text("garbage\n"), "not an .npz file of input arrays"),
        (
            lambda p: np.save(p.open("wb"), np.zeros(3)),
            "a single .npy array, not an .npz file of named inputs",
        ),
        (
            lambda p: np.savez(p.open("wb"), **{"r/x": np.zeros(3)}),
            "key 'r/x' is not <round>/<input name>",
        ),
    ],
)
def test_bad_inputs_file_is_one_line(tmp_path, arch, write, problem):
    copy_dir(tmp_path)
    path = tmp_path / "in.npz"
    write(path)
    with pytest.raises(SimulationError) as e:
        simulate_dir(tmp_path / "case", arch, "latency", inputs=str(path))
    assert str(e.value) == f"{path}: {problem}"
