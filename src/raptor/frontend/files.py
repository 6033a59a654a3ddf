"""Model files without onnx: the cheap first step of the import gate (raptor.frontend.gate: the
path names a non-empty regular file) and the sha256 that keys cached data (reference outputs,
the frontend cache), so a process that only reuses cached data never loads onnx."""

from __future__ import annotations

import hashlib
from pathlib import Path

from raptor.errors import ModelError


def check_file(path: str | Path) -> Path:
    """The path names a non-empty regular file (the cheap part of the gate)."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"{path}: no such file")
    if p.is_dir():
        raise ModelError(f"{path}: is a directory, not an ONNX file")
    if not p.is_file():
        raise ModelError(f"{path}: not a regular file")
    try:
        size = p.stat().st_size
    except OSError as e:
        raise ModelError(f"{path}: cannot read: {e.strerror}") from None
    if size == 0:
        raise ModelError(f"{path}: empty file, not an ONNX model")
    return p


def sha256_file(path: str | Path) -> str:
    """sha256 of the file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
