"""The graph IR of an ONNX model file, imported once and kept on disk for later compiles.

`CachedModel(path, cache_dir, code)` stands for the model file at `path` wherever a compiler
takes a model (raptor.compiler.compile_model); its `load()` returns what `load_graph(path)`
returns. The first load runs the whole frontend (gate included) and pickles the graph into
`cache_dir/frontend_graph.pkl` after its key; every later load whose key matches unpickles it
instead. The key is the sha256 of the file's bytes, the frontend options (`slim`), `code` (the
caller's fingerprint of the compiler sources: a changed pass invalidates the graph) and the
Python version. A model file that fails the gate is never cached; a file whose key differs
(another model, another option, other code) is imported again and replaces the cached graph.
The pickle is written to a temporary name and renamed, so concurrent compiles never read a torn
file; a cache that cannot be read or written only costs the import.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from raptor.frontend.files import sha256_file
from raptor.frontend.graph import Graph

CACHE_NAME = "frontend_graph.pkl"
FORMAT = 1


@dataclass(frozen=True)
class CachedModel:
    """An ONNX model file whose imported graph is kept in `cache_dir` (module docstring)."""

    path: Path
    cache_dir: Path
    code: str
    slim: bool = False

    @cached_property
    def file_sha256(self) -> str:
        """sha256 of the model file's bytes, read once per CachedModel (a compile asks for it
        through the frontend cache's key, the plan memo's key and the suite's compile key)."""
        return sha256_file(self.path)

    def key(self) -> str:
        parts = (
            f"format={FORMAT}",
            f"model_sha256={self.file_sha256}",
            f"slim={self.slim}",
            f"code={self.code}",
            f"python={sys.version_info[:2]}",
        )
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    @property
    def cache_path(self) -> Path:
        return Path(self.cache_dir) / CACHE_NAME

    def cached(self, key: str) -> Graph | None:
        """The cached graph when its key is `key`, else None."""
        try:
            with open(self.cache_path, "rb") as f:
                if pickle.load(f) != key:
                    return None
                graph = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError):
            return None
        return graph if isinstance(graph, Graph) else None

    def holds_graph(self) -> bool:
        """The cache holds this file's graph (so the file passed the gate, with this code),
        checked from the stored key alone."""
        try:
            with open(self.cache_path, "rb") as f:
                return pickle.load(f) == self.key()
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError):
            return False

    def load(self) -> Graph:
        from raptor.frontend import load_graph

        key = self.key()
        graph = self.cached(key)
        if graph is not None:
            return graph
        graph = load_graph(self.path, slim=self.slim)
        self._store(key, graph)
        return graph

    def _store(self, key: str, graph: Graph) -> None:
        d = Path(self.cache_dir)
        try:
            d.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{CACHE_NAME}.", suffix=".tmp", dir=d)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as f:  # the key first: holds_graph reads only it
                pickle.dump(key, f, protocol=pickle.HIGHEST_PROTOCOL)
                pickle.dump(graph, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.cache_path)
        except OSError:  # a full or read-only disk: the graph is simply not kept
            Path(tmp).unlink(missing_ok=True)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
