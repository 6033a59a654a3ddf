"""The suite runner puts every model through the import gate and checks --input-size before
it writes anything."""

from __future__ import annotations

import pytest

from raptor.errors import ModelError
from raptor.suite import runner
from raptor.suite.cases import CaseSpec


def test_corrupt_cached_model_is_one_line(tmp_path):
    """A model.onnx whose key matches (so it would be reused) but whose bytes are damaged."""
    spec = CaseSpec("vgg8", "arch-a", "latency", 1, str(tmp_path), input_size=16)
    spec.model_dir.mkdir(parents=True)
    spec.model_path.write_bytes(b"\x08\x07")  # ir_version 7 and nothing else
    runner._write_model_key(spec)
    assert runner._model_matches(spec)
    with pytest.raises(ModelError) as e:
        runner.prepare_models([spec], console=None)
    assert str(e.value) == f"{spec.model_path}: not an ONNX model (no graph)"
    assert not spec.common_dir.exists()


def test_bad_input_size_is_rejected_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "suite"
    argv = ["--models", "vgg8", "--archs", "arch-a", "--input-size", "10", "--out-dir", str(out)]
    assert runner.main(argv) == 2
    text = " ".join(capsys.readouterr().out.split())
    assert text == (
        "run_pimcomp_models.py: error: vgg8 needs an input size that is a positive multiple "
        "of 8, got 10"
    )
    assert not out.exists()


def test_prepared_model_is_imported_once_for_its_cases(tmp_path, monkeypatch):
    """Preparing a model imports it into the frontend cache, so that its first cases, started
    together on several workers, load the graph instead of each importing it; preparing it again
    reads only the cache's key."""
    import raptor.frontend as frontend
    from raptor.suite.execute import frontend_cache

    imports = []
    real = frontend.load_graph
    monkeypatch.setattr(frontend, "load_graph", lambda *a, **k: imports.append(a) or real(*a, **k))
    spec = CaseSpec("vgg8", "arch-a", "latency", 1, str(tmp_path), input_size=16)
    runner.prepare_models([spec], console=None)
    assert len(imports) == 1 and frontend_cache(spec).holds_graph()
    frontend_cache(spec).load()
    runner.prepare_models([spec], console=None)
    assert len(imports) == 1
