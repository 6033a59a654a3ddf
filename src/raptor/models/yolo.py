"""YOLO11n with the Ultralytics topology (yolo11.yaml at scale n: depth 0.50, width 0.25,
max channels 1024), in its exported inference form: every Conv+BN is already fused into a Conv
with bias, SiLU is Sigmoid*Mul.

Backbone: Conv 16/2, Conv 32/2, C3k2(64, e=.25), Conv 64/2, C3k2(128, e=.25), Conv 128/2,
C3k2(128, c3k), Conv 256/2, C3k2(256, c3k), SPPF(256, k5), C2PSA(256) [attention with 2 heads,
key dim 32: MatMul + Softmax, depthwise 3x3 positional conv]. Head: Resize x2 nearest, Concat,
C3k2(128), Resize, Concat, C3k2(64) -> P3, Conv 64/2, Concat, C3k2(128) -> P4, Conv 128/2,
Concat, C3k2(256, c3k) -> P5. Detect (nc 80, reg_max 16): per level box branch Conv 64, Conv 64,
Conv 1x1 -> 64 and class branch (DWConv 3x3 + Conv 1x1) x2, Conv 1x1 -> 80; then Reshape, Concat,
Split(64, 80), DFL (Reshape, Transpose, Softmax, fixed 1x1 Conv with weights 0..15), box decode
(Slice, Sub, Add, Div, Concat, Mul by strides) and Sigmoid of the classes -> (1, 84, N).
2.62 M params (torch count, BN as weight+bias), 2.616 M with BN fused.
"""

from __future__ import annotations

import numpy as np

from raptor.models.common import Builder

NC = 80
REG_MAX = 16


def _conv(
    b: Builder, x: str, c: int, k: int = 1, s: int = 1, g: int = 1, act: bool = True, name="conv"
) -> str:
    return b.conv(x, c, k, s, k // 2, g, act="silu" if act else None, fused_bn=True, name=name)


def _bottleneck(b: Builder, x: str, c2: int, shortcut: bool, e: float, name: str) -> str:
    c1 = b.shape(x)[1]
    c_ = int(c2 * e)
    y = _conv(b, _conv(b, x, c_, 3, name=name + ".cv1"), c2, 3, name=name + ".cv2")
    return b.add(x, y, name=name + ".add") if shortcut and c1 == c2 else y


def _c3k(b: Builder, x: str, c2: int, n: int, name: str) -> str:
    c_ = int(c2 * 0.5)
    a = _conv(b, x, c_, 1, name=name + ".cv1")
    for i in range(n):
        a = _bottleneck(b, a, c_, True, 1.0, name=f"{name}.m.{i}")
    bb = _conv(b, x, c_, 1, name=name + ".cv2")
    return _conv(b, b.concat([a, bb], name=name + ".cat"), c2, 1, name=name + ".cv3")


def _c3k2(b: Builder, x: str, c2: int, c3k: bool, e: float = 0.5, name: str = "c3k2") -> str:
    c = int(c2 * e)
    y0, y1 = b.split(_conv(b, x, 2 * c, 1, name=name + ".cv1"), [c, c], name=name + ".split")
    m = _c3k(b, y1, c, 2, name + ".m.0") if c3k else _bottleneck(b, y1, c, True, 0.5, name + ".m.0")
    return _conv(b, b.concat([y0, y1, m], name=name + ".cat"), c2, 1, name=name + ".cv2")


def _sppf(b: Builder, x: str, c2: int, name: str) -> str:
    c_ = b.shape(x)[1] // 2
    ys = [_conv(b, x, c_, 1, name=name + ".cv1")]
    for i in range(3):
        ys.append(b.maxpool(ys[-1], 5, 1, 2, name=f"{name}.m{i}"))
    return _conv(b, b.concat(ys, name=name + ".cat"), c2, 1, name=name + ".cv2")


def _attention(b: Builder, x: str, num_heads: int, name: str) -> str:
    _, c, h, w = b.shape(x)
    n = h * w
    head_dim = c // num_heads
    key_dim = int(head_dim * 0.5)
    # a smaller gain on q/k/v keeps the raw q.k products (before the 1/sqrt(d) scale) moderate
    qkv = b.conv(
        x,
        c + 2 * key_dim * num_heads,
        1,
        1,
        0,
        act=None,
        fused_bn=True,
        gamma=(0.35, 0.6),
        name=name + ".qkv",
    )
    qkv = b.reshape(qkv, [1, num_heads, 2 * key_dim + head_dim, n], name=name + ".view")
    q, k, v = b.split(qkv, [key_dim, key_dim, head_dim], axis=2, name=name + ".split")
    qt = b.transpose(q, [0, 1, 3, 2], name=name + ".qT")
    attn = b.matmul(qt, k, name=name + ".qk")
    scale = b.const(np.array([key_dim**-0.5], np.float32), name + ".scale")
    attn = b.softmax(b.mul(attn, scale, name=name + ".scaled"), axis=-1, name=name + ".softmax")
    at = b.transpose(attn, [0, 1, 3, 2], name=name + ".attnT")
    out = b.reshape(b.matmul(v, at, name=name + ".av"), [1, c, h, w], name=name + ".out")
    pe = _conv(
        b, b.reshape(v, [1, c, h, w], name=name + ".v"), c, 3, 1, g=c, act=False, name=name + ".pe"
    )
    return _conv(b, b.add(out, pe, name=name + ".sum"), c, 1, act=False, name=name + ".proj")


def _c2psa(b: Builder, x: str, c2: int, name: str) -> str:
    c = int(c2 * 0.5)
    a, bb = b.split(_conv(b, x, 2 * c, 1, name=name + ".cv1"), [c, c], name=name + ".split")
    blk = name + ".m.0"
    bb = b.add(bb, _attention(b, bb, c // 64, blk + ".attn"), name=blk + ".add1")
    f = _conv(b, _conv(b, bb, 2 * c, 1, name=blk + ".ffn.0"), c, 1, act=False, name=blk + ".ffn.1")
    bb = b.add(bb, f, name=blk + ".add2")
    return _conv(b, b.concat([a, bb], name=name + ".cat"), c2, 1, name=name + ".cv2")


def _detect(b: Builder, feats: list[str], strides: list[int], size: int) -> str:
    c2 = max(16, b.shape(feats[0])[1] // 4, REG_MAX * 4)
    c3 = max(b.shape(feats[0])[1], min(NC, 100))
    flat = []
    anchors, stride_row = [], []
    for i, (x, s) in enumerate(zip(feats, strides)):
        cx = b.shape(x)[1]
        n = f"model.23.{i}"
        box = _conv(b, _conv(b, x, c2, 3, name=n + ".cv2.0"), c2, 3, name=n + ".cv2.1")
        box = b.conv(box, 4 * REG_MAX, 1, 1, 0, name=n + ".cv2.2")
        cl = _conv(b, _conv(b, x, cx, 3, g=cx, name=n + ".cv3.0.0"), c3, 1, name=n + ".cv3.0.1")
        cl = _conv(b, _conv(b, cl, c3, 3, g=c3, name=n + ".cv3.1.0"), c3, 1, name=n + ".cv3.1.1")
        cl = b.conv(cl, NC, 1, 1, 0, name=n + ".cv3.2")
        _, _, h, w = b.shape(cl)
        y = b.concat([box, cl], name=n + ".cat")
        flat.append(b.reshape(y, [1, 4 * REG_MAX + NC, h * w], name=n + ".flat"))
        sy, sx = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        anchors.append(np.stack([sx.ravel(), sy.ravel()]))
        stride_row.append(np.full(h * w, s))
    x = b.concat(flat, axis=2, name="detect.cat")
    n_anchors = b.shape(x)[2]
    box, cls = b.split(x, [4 * REG_MAX, NC], axis=1, name="detect.split")
    # DFL: expectation over 16 distance bins, as a fixed 1x1 conv
    d = b.reshape(box, [1, 4, REG_MAX, n_anchors], name="dfl.view")
    d = b.softmax(b.transpose(d, [0, 2, 1, 3], name="dfl.T"), axis=1, name="dfl.softmax")
    wd = b.const(np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1), "dfl.conv.weight")
    from raptor.frontend import kernels as K

    dv = K.conv2d(b.vals[d], b.vals[wd])
    d = b._node("Conv", [d, wd], dv, "dfl.conv", kernel_shape=[1, 1])
    dist = b.reshape(d, [1, 4, n_anchors], name="dfl.out")
    lt = b.slice(dist, 0, 2, 1, name="decode.lt")
    rb = b.slice(dist, 2, 4, 1, name="decode.rb")
    anc = b.const(np.concatenate(anchors, axis=1)[None].astype(np.float32), "decode.anchors")
    x1y1 = b.binary("Sub", anc, lt, name="decode.x1y1")
    x2y2 = b.add(anc, rb, name="decode.x2y2")
    two = b.const(np.array([2.0], np.float32), "decode.two")
    cxy = b.binary("Div", b.add(x1y1, x2y2, name="decode.csum"), two, name="decode.cxy")
    wh = b.binary("Sub", x2y2, x1y1, name="decode.wh")
    dbox = b.concat([cxy, wh], axis=1, name="decode.box")
    strides_c = b.const(np.concatenate(stride_row)[None, None].astype(np.float32), "decode.strides")
    dbox = b.mul(dbox, strides_c, name="decode.scaled")
    return b.concat([dbox, b.sigmoid(cls)], axis=1, name="output0")


def build_yolo11n(input_size: int = 640, seed: int = 0, activations: str = "probe"):
    if input_size % 32:
        raise ValueError(f"yolo11n needs an input size divisible by 32, got {input_size}")
    b = Builder("yolo11n", input_size, seed, activations=activations)
    x = _conv(b, b.input_name, 16, 3, 2, name="model.0")
    x = _conv(b, x, 32, 3, 2, name="model.1")
    x = _c3k2(b, x, 64, False, 0.25, name="model.2")
    x = _conv(b, x, 64, 3, 2, name="model.3")
    p3 = _c3k2(b, x, 128, False, 0.25, name="model.4")
    x = _conv(b, p3, 128, 3, 2, name="model.5")
    p4 = _c3k2(b, x, 128, True, name="model.6")
    x = _conv(b, p4, 256, 3, 2, name="model.7")
    x = _c3k2(b, x, 256, True, name="model.8")
    x = _sppf(b, x, 256, name="model.9")
    p5 = _c2psa(b, x, 256, name="model.10")
    x = b.concat([b.resize2x(p5, name="model.11"), p4], name="model.12")
    h13 = _c3k2(b, x, 128, False, name="model.13")
    x = b.concat([b.resize2x(h13, name="model.14"), p3], name="model.15")
    o3 = _c3k2(b, x, 64, False, name="model.16")
    x = b.concat([_conv(b, o3, 64, 3, 2, name="model.17"), h13], name="model.18")
    o4 = _c3k2(b, x, 128, False, name="model.19")
    x = b.concat([_conv(b, o4, 128, 3, 2, name="model.20"), p5], name="model.21")
    o5 = _c3k2(b, x, 256, True, name="model.22")
    y = _detect(b, [o3, o4, o5], [8, 16, 32], input_size)
    return b.finish([y]), b
