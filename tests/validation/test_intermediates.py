"""validate --intermediates: every tensor the program stores vs onnxruntime (and float64), and
the first one over tolerance, which points at the layer where an error enters."""

import json

import numpy as np
import onnxruntime as ort

from raptor.arch import load_arch
from raptor.cli import main
from raptor.compiler import compile_model, compile_to_dir
from raptor.models import build_model, save_model
from raptor.options import CompileOptions
from raptor.sim import simulate
from raptor.validation.compare import RTOL, validate_dir
from raptor.validation.reference import _with_all_outputs


def _vgg8(tmp_path, **opts):
    model = save_model("vgg8", tmp_path / "vgg8.onnx", input_size=16)
    compile_to_dir(model, load_arch("arch-a"), CompileOptions(**opts), tmp_path / "run")
    return model, tmp_path / "run"


def test_first_tensor_over_tolerance_names_the_broken_layer(tmp_path, capsys):
    model, run = _vgg8(tmp_path, disable_noc_dataflow=True)
    args = ["validate", str(run), "--model", str(model), "--arch", "arch-a", "--intermediates"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3].startswith("intermediates of input 0: 10 of 18 tensors stored by the program")
    assert lines[-2].startswith("  (tensors the program keeps in local memory or sends core to")
    assert lines[-1] == "  no tensor over tolerance"
    # a 1 % error in one output channel of the first conv's crossbar weights
    cfg = json.loads((run / "pim" / "config.json").read_text())
    _, rows, cols = cfg["raptor"]["weights"]["matrices"][0]
    assert (rows, cols) == (27, 128)
    w = np.fromfile(run / "pim" / "weights.bin", "<f4")
    w[5 : rows * cols : cols] *= 1.01
    w.tofile(run / "pim" / "weights.bin")
    assert main(args) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("functional validation: FAIL")
    first = [ln for ln in lines if ln.startswith("  first over tolerance: ")]
    assert first and first[0].startswith("  first over tolerance: features.conv0.relu (Relu): ")
    # onnxruntime agrees with float64 there: the error is the simulator's, not float32 rounding
    v = validate_dir(run, model, load_arch("arch-a"), intermediates=True)
    t = v.first_bad_tensor
    assert t.name == "features.conv0.relu" and t.rel > RTOL and t.exact_rel > RTOL
    assert t.floor_rel < 1e-5
    assert v.to_dict()["intermediates"]["first_over_tolerance"] == "features.conv0.relu"


def test_throughput_rounds_compare_the_last_input(tmp_path):
    model, run = _vgg8(tmp_path, mode="throughput", pipeline=2, disable_noc_dataflow=True)
    v = validate_dir(run, model, load_arch("arch-a"), mode="throughput", intermediates=True)
    assert v.passed and v.tensors_round == 1 and len(v.tensors) == 10
    assert v.first_bad_tensor is None


def test_only_stored_tensors_are_read_back():
    """pimcomp's latency schedule and Raptor's NoC dataflow forward activations core to core:
    no intermediate may then be read from the (never written) host buffers."""
    m = build_model("vgg8", 16)
    arch = load_arch("arch-a")
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    sess = ort.InferenceSession(_with_all_outputs(m).SerializeToString())
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"input": x})))
    counts = {}
    for opts in (
        CompileOptions(compiler="pimcomp"),
        CompileOptions(),
        CompileOptions(disable_noc_dataflow=True),
    ):
        prog = compile_model(m, arch, opts).program
        assert len(prog.meta["tensors"]) >= 11
        got = simulate(prog, arch, inputs=[{"input": x}], tensors=True).tensors
        assert "classifier.fc1" in got
        counts[(opts.compiler, opts.disable_noc_dataflow)] = len(got)
        for name, val in got.items():
            err = np.abs(val - ref[name]).max() / np.abs(ref[name]).max()
            assert err < RTOL, name
    # pimcomp stores only the output; Raptor's host-memory dataflow every activation but flatten
    assert counts[("pimcomp", False)] == 1 and counts[("raptor", True)] == 11
    assert 1 <= counts[("raptor", False)] < 11
