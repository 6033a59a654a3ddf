import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def refused_compile(tmp_path, capsys):
    """`raptor compile` of vgg8 at 16x16 on arch-a with `flags` that must be refused: checks the
    user-error exit and that no output directory was written, and returns what it printed on
    stderr."""

    def run(*flags: str) -> str:
        import onnx

        from raptor.cli import EXIT_USER_ERROR, main
        from raptor.models import build_model

        path = tmp_path / "m.onnx"
        onnx.save(build_model("vgg8", input_size=16), path)
        out = tmp_path / "o"
        capsys.readouterr()
        assert main(["compile", str(path), "--arch", "arch-a", "--out", str(out), *flags]) == (
            EXIT_USER_ERROR
        )
        assert not out.exists()
        return capsys.readouterr().err

    return run
