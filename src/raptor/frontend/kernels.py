"""Numpy kernels with ONNX semantics (NCHW, float32), shared by the graph-IR evaluator and the
model builders' probe pass. Each kernel takes arrays plus resolved attributes and returns an
array; none of them knows about graphs. Results are float32, except that float64 inputs stay
float64 (the builders probe in float64 so that weights do not depend on BLAS threading)."""

from __future__ import annotations

import numpy as np


def _ft(x: np.ndarray):
    return np.float64 if x.dtype == np.float64 else np.float32


def _pad_nchw(x: np.ndarray, pads: tuple[int, int, int, int], value: float) -> np.ndarray:
    t, left, b, r = pads
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (0, 0), (t, b), (left, r)), mode="constant", constant_values=value)


def _out_size(n: int, k: int, s: int, d: int) -> int:
    return (n - d * (k - 1) - 1) // s + 1


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    strides: tuple[int, int] = (1, 1),
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),
    dilations: tuple[int, int] = (1, 1),
    group: int = 1,
) -> np.ndarray:
    """2-D convolution, x (N, Cin, H, W), w (Cout, Cin/group, kh, kw)."""
    dt = _ft(x)
    x = _pad_nchw(x.astype(dt, copy=False), pads, 0.0)
    n, cin, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    sh, sw = strides
    dh, dw = dilations
    ho, wo = _out_size(h, kh, sh, dh), _out_size(wd, kw, sw, dw)
    og = cout // group
    wg = w.reshape(group, og, cg, kh, kw).astype(dt, copy=False)
    out = np.zeros((n, group, og, ho * wo), dtype=dt)
    for i in range(kh):
        for j in range(kw):
            sl = x[
                :,
                :,
                i * dh : i * dh + sh * (ho - 1) + 1 : sh,
                j * dw : j * dw + sw * (wo - 1) + 1 : sw,
            ]
            sl = sl.reshape(n, group, cg, ho * wo)
            out += np.matmul(wg[None, :, :, :, i, j], sl)
    out = out.reshape(n, cout, ho, wo)
    if b is not None:
        out += b.reshape(1, -1, 1, 1).astype(dt)
    return out


def _pool_windows(x, kernel, strides, dilations):
    n, c, h, w = x.shape
    kh, kw = kernel
    sh, sw = strides
    dh, dw = dilations
    ho, wo = _out_size(h, kh, sh, dh), _out_size(w, kw, sw, dw)
    for i in range(kh):
        for j in range(kw):
            yield x[
                :,
                :,
                i * dh : i * dh + sh * (ho - 1) + 1 : sh,
                j * dw : j * dw + sw * (wo - 1) + 1 : sw,
            ]


def maxpool2d(x, kernel, strides, pads=(0, 0, 0, 0), dilations=(1, 1)) -> np.ndarray:
    xp = _pad_nchw(x, pads, -np.inf)
    out = None
    for sl in _pool_windows(xp, kernel, strides, dilations):
        out = sl.copy() if out is None else np.maximum(out, sl)
    return out.astype(_ft(x))


def avgpool2d(x, kernel, strides, pads=(0, 0, 0, 0), count_include_pad=0) -> np.ndarray:
    xp = _pad_nchw(x, pads, 0.0)
    total = None
    for sl in _pool_windows(xp, kernel, strides, (1, 1)):
        total = sl.astype(_ft(x)).copy() if total is None else total + sl
    if count_include_pad:
        return (total / float(kernel[0] * kernel[1])).astype(_ft(x))
    ones = _pad_nchw(np.ones((1, 1) + x.shape[2:], dtype=np.float32), pads, 0.0)
    cnt = None
    for sl in _pool_windows(ones, kernel, strides, (1, 1)):
        cnt = sl.copy() if cnt is None else cnt + sl
    return (total / cnt).astype(_ft(x))


def global_avgpool(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=(2, 3), keepdims=True, dtype=np.float64).astype(_ft(x))


def batchnorm(x, scale, bias, mean, var, eps=1e-5) -> np.ndarray:
    s = (scale / np.sqrt(var.astype(np.float64) + eps)).astype(_ft(x))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean.reshape(shape)) * s.reshape(shape) + bias.reshape(shape)


def sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x))).astype(_ft(x))


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0).astype(_ft(x))


def activation(x: np.ndarray, act) -> np.ndarray:
    """Apply a fused activation as stored in Node.attrs["activation"]."""
    if act is None:
        return x
    if act == "relu":
        return relu(x)
    if act == "sigmoid":
        return sigmoid(x)
    if act == "silu":
        return (x * sigmoid(x)).astype(_ft(x))
    if isinstance(act, tuple) and act[0] == "clip":
        return np.clip(x, act[1], act[2]).astype(_ft(x))
    raise ValueError(f"unknown activation {act!r}")


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    e = np.exp(x - m)
    return (e / e.sum(axis=axis, keepdims=True)).astype(_ft(x))


def resize_nearest(
    x: np.ndarray,
    out_shape: tuple[int, ...],
    coordinate_transformation_mode: str = "asymmetric",
    nearest_mode: str = "floor",
) -> np.ndarray:
    """ONNX Resize, mode nearest, to the given output shape (scales = out/in per axis)."""
    y = x
    for ax, (n_in, n_out) in enumerate(zip(x.shape, out_shape)):
        if n_in == n_out:
            continue
        scale = n_out / n_in
        o = np.arange(n_out, dtype=np.float64)
        ctm = coordinate_transformation_mode
        if ctm == "asymmetric":
            src = o / scale
        elif ctm == "half_pixel":
            src = (o + 0.5) / scale - 0.5
        elif ctm == "pytorch_half_pixel":
            src = (o + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(o)
        elif ctm == "align_corners":
            src = o * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(o)
        else:
            raise ValueError(f"unsupported coordinate_transformation_mode {ctm}")
        if nearest_mode == "floor":
            idx = np.floor(src)
        elif nearest_mode == "ceil":
            idx = np.ceil(src)
        elif nearest_mode == "round_prefer_floor":
            idx = np.where(src - np.floor(src) == 0.5, np.floor(src), np.round(src))
        else:  # round_prefer_ceil
            idx = np.floor(src + 0.5)
        idx = np.clip(idx, 0, n_in - 1).astype(np.int64)
        y = np.take(y, idx, axis=ax)
    return y.astype(_ft(x))


def slice_(x: np.ndarray, starts, ends, axes, steps) -> np.ndarray:
    sl = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        sl[a] = slice(s, e, st)
    return x[tuple(sl)]


def split(x: np.ndarray, sizes, axis: int) -> list[np.ndarray]:
    idx = np.cumsum(sizes)[:-1]
    return np.split(x, idx, axis=axis)
