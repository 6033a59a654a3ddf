"""Keeping numba's on-disk cache of the compiled engine true to its sources.

numba (`cache=True`) keys each cached function on its own source file only, not on the files
of the functions it calls or inlines: after an edit to kernel_values.py, the cached machine code
of kernel.run, which inlined the old version, would still load (and can crash the process). So
before any compiled kernel loads, `drop_stale` compares a digest of every kernel source
(`kernel*.py`, `blas.py`) with the one recorded beside the cache and, when they differ, removes
the cached code of those modules; numba then compiles them again (about 35 s, once). Importing
this module does it; raptor.sim imports it first.

Only the cache numba keeps beside the sources (`__pycache__`) is handled; a cache moved elsewhere
with NUMBA_CACHE_DIR is left alone.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

STAMP = "numba_sources.sha256"


def _sources(pkg: Path) -> list[Path]:
    return sorted([*pkg.glob("kernel*.py"), pkg / "blas.py"])


def sources_digest(pkg: Path) -> str:
    """One digest over the names and bytes of the package's compiled-kernel sources."""
    h = hashlib.sha256()
    for p in _sources(pkg):
        if p.is_file():
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def drop_stale(pkg: Path | None = None) -> list[str]:
    """Remove the cached compiled code of the kernel modules of pkg (default: raptor.sim) when
    their sources changed since the cache was written; returns the names of the removed files."""
    pkg = Path(__file__).parent if pkg is None else pkg
    cache = pkg / "__pycache__"
    if os.environ.get("NUMBA_CACHE_DIR"):
        return []
    try:  # absent when Python writes no bytecode: numba creates it, the stamp must be there first
        cache.mkdir(exist_ok=True)
    except OSError:  # a read-only install: numba cannot cache there either
        return []
    digest = sources_digest(pkg)
    stamp = cache / STAMP
    try:
        if stamp.read_text() == digest:
            return []
    except OSError:
        pass
    modules = tuple(p.stem + "." for p in _sources(pkg))
    removed = []
    for f in cache.iterdir():
        if f.suffix in (".nbi", ".nbc") and f.name.startswith(modules):
            try:
                f.unlink()
                removed.append(f.name)
            except OSError:  # another process removed it first
                pass
    try:
        tmp = cache / f".{STAMP}.{os.getpid()}.tmp"
        tmp.write_text(digest)
        os.replace(tmp, stamp)
    except OSError:  # a read-only install: numba cannot write its cache there either
        pass
    return sorted(removed)


drop_stale()
