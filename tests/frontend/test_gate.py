"""The import gate (raptor.frontend.gate) through every command that reads a model: one line
naming the file, the node and the problem, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto
from tiny_models import tiny_model

from raptor.cli import EXIT_USER_ERROR, main
from raptor.errors import ModelError
from raptor.frontend.gate import check_model

ARCH = str(Path(__file__).resolve().parents[1] / "fixtures" / "arch-tiny.json")
CORRUPT = (
    "not an ONNX model (protobuf parse error: "
    "Error parsing message with type 'onnx.ModelProto': Wire format was corrupt)"
)


def _bytes(m) -> bytes:
    return m.SerializeToString()


# case -> (what to write at the path, or None for nothing; the problem after "<path>: ")
BAD = {
    "empty file": (b"", "empty file, not an ONNX model"),
    "random bytes": (np.random.default_rng(0).bytes(256), CORRUPT),
    "truncated model": (_bytes(tiny_model())[:900], CORRUPT),
    "missing path": (None, "no such file"),
    "directory": ("dir", "is a directory, not an ONNX file"),
    "conv stride 0": (
        _bytes(tiny_model({"strides": [0, 1]})),
        "node 'conv0' (Conv): strides [0, 1] must be positive",
    ),
    "conv negative pads": (
        _bytes(tiny_model({"pads": [-1, 1, 1, 1]})),
        "node 'conv0' (Conv): pads [-1, 1, 1, 1] must be non-negative",
    ),
    "conv zero-size kernel": (
        _bytes(tiny_model({"kernel_shape": [0, 3]})),
        "node 'conv0' (Conv): kernel_shape [0, 3] must be positive",
    ),
    "conv dilation 0": (
        _bytes(tiny_model({"dilations": [1, 0]})),
        "node 'conv0' (Conv): dilations [1, 0] must be positive",
    ),
    "conv kernel vs weight": (
        _bytes(tiny_model({"kernel_shape": [2, 2]})),
        "node 'conv0' (Conv): kernel_shape [2, 2] does not match the weight's [3, 3]",
    ),
    "conv window larger than the input": (
        _bytes(tiny_model({"pads": [0, 0, 0, 0], "dilations": [2, 2]})),
        "node 'conv0' (Conv): window of 5 on axis 2 is larger than the padded input "
        "(4 + pads 0, 0)",
    ),
    "pool pads not smaller than the kernel": (
        _bytes(tiny_model(pool={"pads": [0, 0, 2, 2]})),
        "node 'pool0' (MaxPool): pads [0, 0, 2, 2] must be smaller than kernel_shape [2, 2]",
    ),
    "gemm shapes": (
        _bytes(tiny_model(fc_rows=7)),
        "node 'fc0' (Gemm): shape inference: Dimension mismatch in unification between 7 and 16",
    ),
    "opset 99": (_bytes(tiny_model(opset=99)), "opset 99 is not supported (supported: 7 to 28)"),
    "integer input": (
        _bytes(tiny_model(input_type=TensorProto.INT64)),
        "input 'x' is int64; only float32 inputs can be fed",
    ),
    "no nodes": (_bytes(tiny_model(nodes=False)), "the graph has no nodes"),
    "dynamic spatial dimension": (
        _bytes(tiny_model(input_shape=("N", 3, "h", 4))),
        "input 'x' has a dynamic dimension 'h' at axis 2; "
        "only the batch dimension (axis 0) may be dynamic",
    ),
    "fixed batch 2": (
        _bytes(tiny_model(input_shape=(2, 3, 4, 4))),
        "input 'x' has batch 2; only batch 1 or a dynamic batch is supported",
    ),
}


def _make(tmp_path: Path, case: str) -> tuple[Path, str]:
    data, problem = BAD[case]
    path = tmp_path / "model.onnx"
    if data == "dir":
        path.mkdir()
    elif data is not None:
        path.write_bytes(data)
    return path, f"{path}: {problem}"


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """A compiled good model, for `validate` against bad models (never validated itself)."""
    d = tmp_path_factory.mktemp("good")
    (d / "good.onnx").write_bytes(_bytes(tiny_model()))
    assert main(["compile", str(d / "good.onnx"), "--arch", ARCH, "--out", str(d / "out")]) == 0
    return d / "out"


@pytest.mark.parametrize("case", list(BAD))
def test_check_model_message(tmp_path, case):
    path, message = _make(tmp_path, case)
    with pytest.raises(ModelError) as e:
        check_model(path)
    assert str(e.value) == message


@pytest.mark.parametrize("compiler", ["raptor", "pimcomp"])
@pytest.mark.parametrize("case", list(BAD))
def test_compile_rejects(tmp_path, capsys, case, compiler):
    path, message = _make(tmp_path, case)
    out = tmp_path / "out"
    argv = ["compile", str(path), "--arch", ARCH, "--out", str(out), "--compiler", compiler]
    rc, stdout, stderr = _run(capsys, argv)
    assert (rc, stdout, stderr) == (EXIT_USER_ERROR, "", f"raptor: error: {message}\n")
    assert not out.exists()


@pytest.mark.parametrize("case", list(BAD))
def test_validate_rejects(tmp_path, capsys, compiled, case):
    path, message = _make(tmp_path, case)
    before = sorted(p.relative_to(compiled) for p in compiled.rglob("*"))
    rc, stdout, stderr = _run(
        capsys, ["validate", str(compiled), "--model", str(path), "--arch", ARCH]
    )
    assert (rc, stdout, stderr) == (EXIT_USER_ERROR, "", f"raptor: error: {message}\n")
    assert sorted(p.relative_to(compiled) for p in compiled.rglob("*")) == before


@pytest.mark.parametrize("case", list(BAD))
def test_bounds_rejects(tmp_path, capsys, case):
    path, message = _make(tmp_path, case)
    rc, stdout, stderr = _run(capsys, ["bounds", str(path), "--arch", ARCH])
    assert (rc, stdout, stderr) == (EXIT_USER_ERROR, "", f"raptor: error: {message}\n")


@pytest.mark.parametrize(
    "kind,model",
    [
        ("dynamic batch", tiny_model(input_shape=("N", 3, 4, 4))),
        ("two inputs, both read", tiny_model(second_input="added")),
        ("two inputs, one unread", tiny_model(second_input="unused")),
    ],
)
@pytest.mark.parametrize("compiler", ["raptor", "pimcomp"])
def test_feedable_models_compile_and_validate(tmp_path, capsys, kind, model, compiler):
    """A dynamic batch is forced to 1 and every graph input is fed, so these validate (they
    used to fail in `validate` on a str dimension and on a missing feed)."""
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    out = tmp_path / "out"
    argv = ["compile", str(path), "--arch", ARCH, "--out", str(out), "--compiler", compiler]
    assert _run(capsys, argv)[0] == 0
    rc, stdout, stderr = _run(capsys, ["validate", str(out), "--model", str(path), "--arch", ARCH])
    assert (rc, stderr) == (0, "")
    assert stdout.startswith("functional validation: PASS")
    checked = check_model(path)
    assert list(checked.inputs.values())[0] == (1, 3, 4, 4) and checked.outputs == ["y"]


def test_gate_accepts_suite_model():
    from raptor.models import build_model

    checked = check_model(build_model("resnet18", 32))
    assert checked.inputs == {"input": (1, 3, 32, 32)} and checked.outputs == ["fc"]
    assert checked.opset == 17


def test_models_build_bad_input_size(tmp_path, capsys):
    out = tmp_path / "v.onnx"
    rc, stdout, stderr = _run(
        capsys, ["models", "build", "vgg8", "--input-size", "10", "--out", str(out)]
    )
    assert (rc, stdout) == (EXIT_USER_ERROR, "")
    assert (
        stderr
        == "raptor: error: vgg8 needs an input size that is a positive multiple of 8, got 10\n"
    )
    assert not out.exists()


def test_frontend_errors_after_the_gate_name_the_file(tmp_path, capsys):
    """A valid model with an op the frontend cannot map: one line naming file, op and node."""
    from onnx import helper

    m = tiny_model()
    m.graph.node[1].op_type = "LeakyRelu"  # relu0
    m.graph.node[1].attribute.append(helper.make_attribute("alpha", 0.1))
    path = tmp_path / "leaky.onnx"
    path.write_bytes(m.SerializeToString())
    out = tmp_path / "out"
    rc, stdout, stderr = _run(capsys, ["compile", str(path), "--arch", ARCH, "--out", str(out)])
    assert (rc, stdout) == (EXIT_USER_ERROR, "")
    assert stderr == f"raptor: error: {path}: unsupported ONNX op LeakyRelu (node 'relu0')\n"
    assert not out.exists()


def test_onnxruntime_load_is_the_last_check(tmp_path, monkeypatch):
    """What the explicit checks would miss, onnxruntime's kernels reject at load time: with the
    attribute checks switched off, an out-of-range storage_order is still one line."""
    monkeypatch.setattr("raptor.frontend.gate._attribute_problem", lambda node: None)
    path = tmp_path / "m.onnx"
    path.write_bytes(_bytes(tiny_model(pool={"storage_order": 3})))
    with pytest.raises(ModelError) as e:
        check_model(path)
    assert str(e.value) == (
        f"{path}: onnxruntime: storage_order must be 0 (row-major) or 1 (column-major). Got: 3"
    )
