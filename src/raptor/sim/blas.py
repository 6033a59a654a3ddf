"""numpy's own BLAS (the OpenBLAS build bundled with the numpy wheel), callable from compiled
code, so that an MVM computed by the compiled engine is bit for bit what `x @ W` gives in numpy.

numpy evaluates a 1-D float32 `x @ W` (W of shape n x p, C-contiguous) as follows, and
`mvm_into` repeats it exactly:
- p == 1: a dot product (`cblas_sdot`, summed into a double, then rounded to float32, which
  leaves the float32 result unchanged);
- n == 1 (and p > 1): no BLAS, each output is 0 + x[0] * W[0, j];
- otherwise `cblas_sgemv(RowMajor, Trans, n, p, 1, W, p, x, 1, 0, y, 1)`.
The symbols are registered with LLVM by address at import, so cached compiled code links to them
in every process.
"""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np
from llvmlite import binding as _llvm
from numba import njit, types

_SUFFIX = "64_"  # numpy wheels bundle an ILP64 OpenBLAS with this symbol suffix


def _load() -> ctypes.CDLL:
    libdir = os.path.dirname(np.__file__) + ".libs"
    libs = sorted(glob.glob(os.path.join(libdir, "libscipy_openblas*.so*")))
    if not libs:  # pragma: no cover - a numpy build without a bundled OpenBLAS
        raise ImportError(f"numpy's bundled OpenBLAS not found in {libdir}")
    return ctypes.CDLL(libs[0])


_dll = _load()
for _name in ("sgemv", "sdot"):
    _sym = f"scipy_cblas_{_name}{_SUFFIX}"
    _llvm.add_symbol(_sym, ctypes.cast(getattr(_dll, _sym), ctypes.c_void_p).value)

_i64, _ptr, _f32 = types.int64, types.intp, types.float32
_sgemv = types.ExternalFunction(
    f"scipy_cblas_sgemv{_SUFFIX}",
    types.void(
        types.int32, types.int32, _i64, _i64, _f32, _ptr, _i64, _ptr, _i64, _f32, _ptr, _i64
    ),
)
_sdot = types.ExternalFunction(f"scipy_cblas_sdot{_SUFFIX}", _f32(_i64, _ptr, _i64, _ptr, _i64))
_ROW_MAJOR, _TRANS = 101, 112


@njit(cache=True, nogil=True)
def mvm_into(x: np.ndarray, xo: int, w: np.ndarray, wo: int, n: int, p: int, y: np.ndarray) -> None:
    """y[:p] = x[xo:xo+n] @ w[wo:wo+n*p].reshape(n, p), as numpy computes it (float32)."""
    if n == 0:
        for j in range(p):
            y[j] = np.float32(0.0)
    elif p == 1:
        y[0] = _sdot(n, x.ctypes.data + 4 * xo, 1, w.ctypes.data + 4 * wo, 1)
    elif n == 1:
        x0 = x[xo]
        for j in range(p):
            y[j] = np.float32(0.0) + x0 * w[wo + j]
    else:
        _sgemv(
            _ROW_MAJOR,
            _TRANS,
            n,
            p,
            np.float32(1.0),
            w.ctypes.data + 4 * wo,
            p,
            x.ctypes.data + 4 * xo,
            1,
            np.float32(0.0),
            y.ctypes.data,
            1,
        )
