"""`raptor` error classes: user errors are one line and exit 2; anything else is one
"internal error" line with a log file holding the traceback, exit 70 (--debug prints it)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from raptor.cli import EXIT_INTERNAL_ERROR, EXIT_USER_ERROR, main

INTERNAL = re.compile(
    r"raptor: internal error: ZeroDivisionError: boom "
    r"\(traceback in (\S+); rerun with --debug to print it\)\n"
)


@pytest.fixture
def broken_arch_loader(monkeypatch, tmp_path):
    """`raptor arch show` hits a bug; log files go to tmp_path."""

    def load_arch(name):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr("raptor.arch.load_arch", load_arch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_internal_error_is_one_line_with_a_log(broken_arch_loader, capsys):
    assert main(["arch", "show", "arch-a"]) == EXIT_INTERNAL_ERROR
    out, err = capsys.readouterr()
    assert out == ""
    m = INTERNAL.fullmatch(err)
    assert m, err
    log = Path(m.group(1))
    assert log.parent == broken_arch_loader
    text = log.read_text()
    assert text.startswith("raptor ") and "Traceback (most recent call last)" in text
    assert text.rstrip().endswith("ZeroDivisionError: boom")


def test_debug_prints_the_traceback_and_writes_no_log(broken_arch_loader, capsys):
    assert main(["--debug", "arch", "show", "arch-a"]) == EXIT_INTERNAL_ERROR
    _, err = capsys.readouterr()
    assert err.startswith("Traceback (most recent call last)")
    assert "ZeroDivisionError: boom\n" in err
    assert err.endswith("raptor: internal error: ZeroDivisionError: boom\n")
    assert not list(broken_arch_loader.glob("raptor-internal-*"))


def test_user_error_exit_code_differs(capsys):
    assert EXIT_USER_ERROR != EXIT_INTERNAL_ERROR
    assert main(["arch", "show", "no-such-arch"]) == EXIT_USER_ERROR
    _, err = capsys.readouterr()
    assert err.startswith("raptor: error: ") and err.count("\n") == 1


def test_unwritable_output_is_a_user_error(tmp_path, capsys):
    """The file system refusing the --out path is the user's problem, named in one line."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc = main(["arch", "export-pimsim", "arch-a", "--out", str(blocker / "out")])
    _, err = capsys.readouterr()
    assert rc == EXIT_USER_ERROR
    assert re.fullmatch(rf"raptor: error: {re.escape(str(blocker))}\S*: Not a directory\n", err)


def test_closed_stdout_is_quiet(monkeypatch, capsys):
    """`raptor ... | head`: the reader went away; no error line, no log, exit 141 (SIGPIPE)."""

    def load_arch(name):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("raptor.arch.load_arch", load_arch)
    assert main(["arch", "show", "arch-a"]) == 141
    assert capsys.readouterr().err == ""
