"""compare_outputs: per-input, per-output max-abs and relative errors, PASS iff rel <= RTOL."""

import numpy as np

from raptor.validation.compare import RTOL, compare_outputs


def test_pass_within_tolerance():
    ref = [{"y": np.array([[1.0, -2.0, 4.0]], np.float32)}]
    sim = [{"y": ref[0]["y"] + np.float32(4 * RTOL * 0.5)}]
    v = compare_outputs(sim, ref)
    assert v.passed and v.status == "PASS"
    e = v.errors[0]
    assert e.max_ref == 4.0 and abs(e.rel - 0.5 * RTOL) < 1e-7
    d = v.to_dict()
    assert d["status"] == "PASS" and d["outputs"][0]["name"] == "y"
    assert "PASS" in v.format()


def test_fail_on_error_shape_nan_missing_and_count():
    ref = [{"y": np.ones((1, 3), np.float32)}, {"y": np.ones((1, 3), np.float32)}]
    assert not compare_outputs([{"y": np.zeros((1, 3))}, {"y": np.ones((1, 3))}], ref).passed
    v = compare_outputs([{"y": np.ones((3,))}, {"y": np.full((1, 3), np.nan)}], ref)
    assert [e.note for e in v.errors] == ["shape [3] vs [1, 3]", "non-finite values"]
    assert not compare_outputs([{}, {"y": np.ones((1, 3))}], ref).passed
    assert not compare_outputs([{"y": np.ones((1, 3))}], ref).passed
    assert "FAIL" in compare_outputs([{"y": np.zeros((1, 3))}], ref[:1]).format()


def test_zero_reference_and_empty():
    z = [{"y": np.zeros(4)}]
    assert compare_outputs(z, z).passed
    assert not compare_outputs([{"y": np.ones(4)}], z).passed
    assert not compare_outputs([], []).passed  # nothing compared is not a pass


def test_ill_conditioned_output_judged_against_float64():
    """An output that misses RTOL against onnxruntime passes only if the simulator is within
    RTOL of float64, or no further from it than onnxruntime itself (below FLOOR_CAP)."""
    from raptor.validation.compare import FLOOR_CAP

    exact = [{"y": np.array([1000.0, 2.0, -3.0])}]
    ort_ = [{"y": exact[0]["y"] + [3.0, 0.0, 0.0]}]  # onnxruntime 3e-3 off float64

    def judge(sim_err):
        sim = [{"y": exact[0]["y"] + sim_err}]
        return compare_outputs(sim, ort_, exact_outputs=exact).errors[0]

    e = judge([0.5, 0.0, 0.0])  # 3.5e-3 from onnxruntime, 5e-4 from float64: within RTOL of it
    assert e.passed and e.rel > RTOL and e.exact_rel == 5e-4 and e.floor_rel == 3e-3
    e = judge([-2.5, 0.0, 0.0])  # 5.5e-3 from onnxruntime, 2.5e-3 from float64 < onnxruntime's 3e-3
    assert e.passed and e.rel > RTOL and e.exact_rel == 2.5e-3
    e = judge([0.0, 3.5, 0.0])  # 3.5e-3 from float64, worse than onnxruntime: FAIL
    assert not e.passed and e.exact_rel == 3.5e-3
    # without float64 values the old rule holds, and a pass vs onnxruntime never needs them
    assert not compare_outputs([{"y": exact[0]["y"] + [0.5, 0, 0]}], ort_).passed
    ok = compare_outputs([{"y": ort_[0]["y"] + [0.5, 0, 0]}], ort_, exact_outputs=exact)
    assert ok.passed and ok.errors[0].exact_rel is None
    # an onnxruntime result beyond FLOOR_CAP of float64 does not vouch for anything
    far = [{"y": exact[0]["y"] + [2 * FLOOR_CAP * 1000, 0, 0]}]
    sim = [{"y": exact[0]["y"] + [FLOOR_CAP * 1000, 0, 0]}]
    assert not compare_outputs(sim, far, exact_outputs=exact).passed
    v = compare_outputs([{"y": exact[0]["y"] + [-2.5, 0, 0]}], ort_, exact_outputs=exact)
    assert v.format().splitlines() == [
        "functional validation: PASS (max rel error 0.00548, tolerance 0.001; 1 judged against "
        "float64, see below)",
        "  ok  input 0 y: max-abs 5.5, rel 0.00548; vs float64 0.0025 (onnxruntime's own float32 "
        "error 0.003)",
    ]
    d = v.to_dict()["outputs"][0]
    assert d["rel_vs_float64"] == 2.5e-3 and d["onnxruntime_rel_vs_float64"] == 3e-3


def test_judge_outputs_evaluates_float64_only_when_it_can_change_the_verdict(monkeypatch):
    from types import SimpleNamespace

    import raptor.validation.reference as reference
    from raptor.validation.compare import judge_outputs

    calls = []

    def fake_exact(model_path, inputs, keep_all=False):
        calls.append(model_path)
        return [{"y": np.array([1000.0, 2.0])}]

    monkeypatch.setattr(reference, "exact_values", fake_exact)
    ref = SimpleNamespace(inputs=[{"x": np.zeros(1)}], outputs=[{"y": np.array([1003.0, 2.0])}])
    assert judge_outputs([{"y": np.array([1003.5, 2.0])}], ref, "m.onnx").passed
    assert calls == []  # within RTOL of onnxruntime: no float64 evaluation
    v = judge_outputs([{"y": np.array([999.5, 2.0])}], ref, "m.onnx")
    assert v.passed and calls == ["m.onnx"] and v.errors[0].exact_rel == 5e-4
    v = judge_outputs([{"y": np.array([0.0, 2.0])}], ref, "m.onnx")  # a defect's O(1) error
    assert not v.passed and len(calls) == 1 and v.errors[0].exact_rel is None
    v = judge_outputs([{"y": np.array([np.nan, 2.0])}], ref, "m.onnx")
    assert not v.passed and len(calls) == 1
