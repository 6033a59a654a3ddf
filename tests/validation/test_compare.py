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
