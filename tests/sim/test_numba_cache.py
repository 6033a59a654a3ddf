"""The compiled engine's numba cache is dropped when any kernel source changes: numba keys a
cached function on its own file only, so code that inlined an edited callee would still load."""

from __future__ import annotations

from raptor.sim import numba_cache


def _pkg(tmp_path):
    pkg = tmp_path / "sim"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "kernel.py").write_text("def run(): pass\n")
    (pkg / "kernel_values.py").write_text("def move(): pass\n")
    (pkg / "blas.py").write_text("def mvm_into(): pass\n")
    (pkg / "engine.py").write_text("x = 1\n")
    return pkg


def _cache(pkg) -> set[str]:
    names = {"kernel.run-151.py311.nbi", "kernel.run-151.py311.1.nbc", "blas.mvm_into-9.py311.nbi"}
    for n in names | {"engine.cpython-311.pyc", "other.f-1.py311.nbi"}:
        (pkg / "__pycache__" / n).write_bytes(b"x")
    return names


def test_cache_is_dropped_only_when_a_kernel_source_changes(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    pkg = _pkg(tmp_path)
    names = _cache(pkg)
    # no record of the sources the cache was built from: drop it
    assert set(numba_cache.drop_stale(pkg)) == names
    left = {p.name for p in (pkg / "__pycache__").iterdir()}
    assert left == {"engine.cpython-311.pyc", "other.f-1.py311.nbi", numba_cache.STAMP}
    # same sources: the cache numba writes next is kept
    _cache(pkg)
    assert numba_cache.drop_stale(pkg) == []
    # a callee's source changes (not the file of the cached function): dropped again
    (pkg / "kernel_values.py").write_text("def move(): return 1\n")
    assert set(numba_cache.drop_stale(pkg)) == names
    assert numba_cache.drop_stale(pkg) == []
    # a file that is not a kernel source does not count
    (pkg / "engine.py").write_text("x = 2\n")
    _cache(pkg)
    assert numba_cache.drop_stale(pkg) == []


def test_a_missing_cache_directory_is_created_with_its_stamp(tmp_path, monkeypatch):
    """Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE), __pycache__ does not exist
    when raptor.sim is first imported; numba creates it later. The stamp must be written then,
    or the next process would take numba's fresh cache for a stale one."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    pkg = _pkg(tmp_path)
    (pkg / "__pycache__").rmdir()
    assert numba_cache.drop_stale(pkg) == []
    stamp = pkg / "__pycache__" / numba_cache.STAMP
    assert stamp.read_text() == numba_cache.sources_digest(pkg)
    names = _cache(pkg)  # what numba writes next
    assert numba_cache.drop_stale(pkg) == [] and names <= {p.name for p in stamp.parent.iterdir()}


def test_the_package_cache_is_stamped_with_its_sources():
    """Importing raptor.sim ran drop_stale on the real package: its stamp is current."""
    import os

    import raptor.sim

    pkg = numba_cache.Path(raptor.sim.__file__).parent
    stamp = pkg / "__pycache__" / numba_cache.STAMP
    if not os.environ.get("NUMBA_CACHE_DIR"):  # else numba's cache is elsewhere
        assert stamp.read_text() == numba_cache.sources_digest(pkg)
