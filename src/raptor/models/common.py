"""Shared ONNX builder for the model suite.

`Builder` emits ONNX nodes with onnx.helper and, at the same time, evaluates each node with
numpy on a few seeded probe inputs. Convolutions and fully connected layers use that
probe to normalise themselves the way a trained network is normalised: a layer's raw He-init
output is measured per channel and the layer (or its BatchNormalization, whose running mean and
variance become the measured mean and second moment) maps it to values of mean about `beta`
and RMS about `gamma`, with seeded random `gamma`/`beta`. Activations therefore stay of order
1-10 at any depth (yolo11n's head: a few tens), and the output depends on the input. Statistics are rounded to float16 precision so that the bytes do not depend on
BLAS summation order.

`activations="realistic"` (yolo11n only) calibrates every Conv+BN the way an exporter does after
running BatchNorm in training mode on a batch: running mean and variance are the probe's mean and
*centred* variance per channel (no second-moment damping), and the BN weight and bias are
REALISTIC_GAMMA and REALISTIC_BETA for every channel, so each pre-activation channel has std 6 and
mean -1 on the probe. The attention's scaled logits then reach 170-370 (the default build: 2-6)
and the DFL logits 50-430, so that its two softmaxes amplify float32 rounding as the report of an
ultralytics export with calibrated BN showed (README, "Validation and tolerances").
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from raptor.frontend import kernels as K

OPSET = 17
ACTIVATIONS = ("probe", "realistic")
REALISTIC_GAMMA = 6.0  # BN weight of every channel under activations="realistic"
REALISTIC_BETA = -1.0  # BN bias of every channel under activations="realistic"
IR_VERSION = 8


def _r16(a: np.ndarray) -> np.ndarray:
    """Round to float16 precision (kept as float32) so probe statistics are stable."""
    return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float32)


class Builder:
    def __init__(
        self, name: str, input_size: int, seed: int, channels: int = 3, activations: str = "probe"
    ):
        if activations not in ACTIVATIONS:
            raise ValueError(f"activations must be one of {', '.join(ACTIVATIONS)}")
        self.name = name
        self.activations = activations
        self.rng = np.random.default_rng(seed)
        probe_rng = np.random.default_rng([seed, 7919])
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.vals: dict[str, np.ndarray] = {}
        self._count: dict[str, int] = {}
        self.bn_channels = 0  # channels of (real or already-fused) BatchNorms, for torch counts
        self.input_name = "input"
        self.input_shape = (1, channels, input_size, input_size)
        # a few probe images at small sizes so per-channel statistics of deep, spatially tiny
        # layers are estimated from enough positions (batch 1 at the usual sizes)
        self.probe_batch = int(np.clip(math.ceil(224 * 224 / (input_size * input_size)), 1, 8))
        probe_shape = (self.probe_batch,) + self.input_shape[1:]
        # float64 probe: the statistics must not depend on BLAS threading (float32 sgemm
        # results do), or the weights' bytes would
        self.vals["input"] = probe_rng.standard_normal(probe_shape)
        self.outputs: list[str] = []

    # ------------------------------------------------------------------ plumbing
    def uniq(self, prefix: str) -> str:
        k = self._count.get(prefix, 0)
        self._count[prefix] = k + 1
        return f"{prefix}_{k}" if k else prefix

    def const(self, value: np.ndarray, prefix: str) -> str:
        name = self.uniq(prefix)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        self.vals[name] = value
        return name

    def shape(self, t: str) -> tuple[int, ...]:
        """The ONNX (batch-1) shape of tensor t."""
        return (1,) + tuple(self.vals[t].shape[1:])

    def _node(self, op: str, inputs: list[str], value, name: str, n_out: int = 1, **attrs):
        outs = [name] if n_out == 1 else [f"{name}_out{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        values = value if n_out > 1 else [value]
        for o, v in zip(outs, values):
            self.vals[o] = np.asarray(v, dtype=np.float64)
        return outs[0] if n_out == 1 else outs

    # ------------------------------------------------------------------ layers
    def conv(
        self,
        x: str,
        cout: int,
        k: int,
        stride: int = 1,
        pad: int | None = None,
        group: int = 1,
        *,
        bn: bool = False,
        bias: bool = True,
        act: str | None = None,
        gamma: tuple[float, float] = (0.7, 1.2),
        beta_std: float = 0.2,
        beta_mean: float = 0.0,
        name: str = "conv",
        fused_bn: bool = False,
        eps: float = 1e-5,
    ) -> str:
        """Conv (+BatchNormalization when bn) (+activation), normalised on the probe.

        bn=True emits Conv without bias followed by BatchNormalization whose running stats are
        the probe's statistics. Otherwise the normalisation is folded into W and B (as in an
        exported network with BN already fused); fused_bn marks that for torch-style counts.
        """
        xv = self.vals[x]
        cin = xv.shape[1]
        pad = k // 2 if pad is None else pad
        fan_in = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * math.sqrt(2.0 / fan_in)).astype(
            np.float32
        )
        g = self.rng.uniform(gamma[0], gamma[1], cout).astype(np.float32)
        beta = (beta_mean + beta_std * self.rng.standard_normal(cout)).astype(np.float32)
        pads4 = (pad, pad, pad, pad)
        raw = K.conv2d(xv, w.astype(np.float64), None, (stride, stride), pads4, (1, 1), group)
        # per-channel statistics, shrunk towards the layer-wide ones when the probe has few
        # positions per channel (deep layers of small inputs): a channel whose few values
        # happen to agree must not get a huge 1/std gain
        npos = raw.shape[0] * raw.shape[2] * raw.shape[3]
        wgt = npos / (npos + 256.0)
        mean = wgt * raw.mean(axis=(0, 2, 3)) + (1 - wgt) * raw.mean()
        # normalise by the second moment, not the variance: a channel whose mean dominates
        # its spread then cannot amplify another input's (different) mean into a huge value
        sq = raw.astype(np.float64) ** 2
        var = wgt * sq.mean(axis=(0, 2, 3)) + (1 - wgt) * sq.mean()
        if self.activations == "realistic":
            # batch-calibrated BN: centred variance, one weight and bias for every channel
            var = var - mean**2
            g = np.full(cout, REALISTIC_GAMMA, np.float32)
            beta = np.full(cout, REALISTIC_BETA, np.float32)
        mean = _r16(mean)
        var = _r16(np.maximum(var, 1e-4))
        g, beta = _r16(g), _r16(beta)
        nm = self.uniq(name)
        attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=list(pads4))
        if group != 1:
            attrs["group"] = group
        if bn:
            wn = self.const(w, nm + ".weight")
            inputs = [x, wn]
            if bias:
                # a conv bias before BN: fold it into the running mean (exercises the folder)
                cb = _r16(0.1 * self.rng.standard_normal(cout))
                inputs.append(self.const(cb, nm + ".bias"))
                mean = _r16(mean + cb)
                raw = raw + cb.reshape(1, -1, 1, 1)
            y = self._node("Conv", inputs, raw, nm, **attrs)
            bn_in = [
                y,
                self.const(g, nm + ".bn.scale"),
                self.const(beta, nm + ".bn.bias"),
                self.const(mean, nm + ".bn.mean"),
                self.const(var, nm + ".bn.var"),
            ]
            out = K.batchnorm(raw, g, beta, mean, var, eps)
            y = self._node("BatchNormalization", bn_in, out, nm + ".bn", epsilon=eps)
            self.bn_channels += cout
        else:
            s = g / np.sqrt(var + eps)
            wf = (w * s.reshape(-1, 1, 1, 1)).astype(np.float32)
            bf = (beta - mean * s).astype(np.float32)
            out = K.conv2d(xv, wf.astype(np.float64), bf, (stride, stride), pads4, (1, 1), group)
            y = self._node(
                "Conv",
                [x, self.const(wf, nm + ".weight"), self.const(bf, nm + ".bias")],
                out,
                nm,
                **attrs,
            )
            if fused_bn:
                self.bn_channels += cout
        return self.act(y, act)

    def act(self, x: str, act: str | None) -> str:
        if act is None:
            return x
        if act == "relu":
            return self.relu(x)
        if act == "silu":
            return self.silu(x)
        raise ValueError(act)

    def relu(self, x: str) -> str:
        return self._node("Relu", [x], K.relu(self.vals[x]), self.uniq(x + ".relu"))

    def sigmoid(self, x: str) -> str:
        return self._node("Sigmoid", [x], K.sigmoid(self.vals[x]), self.uniq(x + ".sigmoid"))

    def silu(self, x: str) -> str:
        s = self.sigmoid(x)
        return self.mul(x, s, name=x + ".silu")

    def binary(self, op: str, a: str, b: str, name: str | None = None) -> str:
        fn = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract, "Div": np.divide}[op]
        v = fn(self.vals[a], self.vals[b])
        return self._node(op, [a, b], v, self.uniq(name or f"{a}.{op.lower()}"))

    def add(self, a: str, b: str, name: str | None = None) -> str:
        return self.binary("Add", a, b, name)

    def mul(self, a: str, b: str, name: str | None = None) -> str:
        return self.binary("Mul", a, b, name)

    def maxpool(self, x: str, k: int, s: int, p: int = 0, ceil: bool = False, name="pool") -> str:
        xv = self.vals[x]
        pads = [p, p, p, p]
        if ceil:
            extra = []
            for n in xv.shape[2:]:
                o = -(-(n + 2 * p - k) // s) + 1
                if (o - 1) * s >= n + p:
                    o -= 1
                extra.append(max(0, (o - 1) * s + k - (n + 2 * p)))
            vpads = (p, p, p + extra[0], p + extra[1])
        else:
            vpads = tuple(pads)
        out = K.maxpool2d(xv, (k, k), (s, s), vpads)
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=pads)
        if ceil:
            attrs["ceil_mode"] = 1
        return self._node("MaxPool", [x], out, self.uniq(name), **attrs)

    def gap(self, x: str) -> str:
        return self._node(
            "GlobalAveragePool", [x], K.global_avgpool(self.vals[x]), self.uniq("gap")
        )

    def flatten(self, x: str) -> str:
        v = self.vals[x]
        return self._node("Flatten", [x], v.reshape(v.shape[0], -1), self.uniq("flatten"), axis=1)

    def gemm(
        self, x: str, n: int, act: str | None = None, name: str = "fc", gain: float = 1.0
    ) -> str:
        """Fully connected layer as Gemm(transB=1), normalised to unit std on the probe."""
        xv = self.vals[x]
        kdim = xv.shape[1]
        w = (self.rng.standard_normal((n, kdim)) * math.sqrt(2.0 / kdim)).astype(np.float32)
        raw = xv @ w.T.astype(np.float64)
        std = float(_r16(np.float32(raw.std()) + 1e-6))
        w = (w * (gain / std)).astype(np.float32)
        b = _r16(-(raw.mean() * gain / std) + 0.1 * self.rng.standard_normal(n))
        out = xv @ w.T.astype(np.float64) + b
        nm = self.uniq(name)
        y = self._node(
            "Gemm",
            [x, self.const(w, nm + ".weight"), self.const(b, nm + ".bias")],
            out,
            nm,
            transB=1,
        )
        return self.act(y, act)

    def concat(self, xs: list[str], axis: int = 1, name="concat") -> str:
        v = np.concatenate([self.vals[t] for t in xs], axis=axis)
        return self._node("Concat", xs, v, self.uniq(name), axis=axis)

    def split(self, x: str, sizes: list[int], axis: int = 1, name="split") -> list[str]:
        parts = K.split(self.vals[x], sizes, axis)
        nm = self.uniq(name)
        sz = self.const(np.array(sizes, dtype=np.int64), nm + ".sizes")
        return self._node("Split", [x, sz], parts, nm, n_out=len(sizes), axis=axis)

    def reshape(self, x: str, shape: list[int], name="reshape") -> str:
        v = self.vals[x]
        assert shape[0] == 1, "reshape keeps the batch axis first"
        v = v.reshape((v.shape[0],) + tuple(shape[1:]))
        nm = self.uniq(name)
        sh = self.const(np.array(shape, dtype=np.int64), nm + ".shape")
        return self._node("Reshape", [x, sh], v, nm)

    def transpose(self, x: str, perm: list[int], name="transpose") -> str:
        v = np.transpose(self.vals[x], perm)
        return self._node("Transpose", [x], v, self.uniq(name), perm=perm)

    def matmul(self, a: str, b: str, name="matmul") -> str:
        v = np.matmul(self.vals[a], self.vals[b])
        return self._node("MatMul", [a, b], v, self.uniq(name))

    def softmax(self, x: str, axis: int, name="softmax") -> str:
        return self._node("Softmax", [x], K.softmax(self.vals[x], axis), self.uniq(name), axis=axis)

    def resize2x(self, x: str, name="resize") -> str:
        v = self.vals[x]
        out_shape = (v.shape[0], v.shape[1], v.shape[2] * 2, v.shape[3] * 2)
        out = K.resize_nearest(v, out_shape, "asymmetric", "floor")
        nm = self.uniq(name)
        scales = self.const(np.array([1, 1, 2, 2], dtype=np.float32), nm + ".scales")
        return self._node(
            "Resize",
            [x, "", scales],
            out,
            nm,
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )

    def slice(self, x: str, start: int, end: int, axis: int, name="slice") -> str:
        v = K.slice_(self.vals[x], [start], [end], [axis], [1])
        nm = self.uniq(name)
        ins = [
            x,
            self.const(np.array([start], np.int64), nm + ".starts"),
            self.const(np.array([end], np.int64), nm + ".ends"),
            self.const(np.array([axis], np.int64), nm + ".axes"),
        ]
        return self._node("Slice", ins, v, nm)

    # ------------------------------------------------------------------ model
    def finish(self, outputs: list[str]) -> onnx.ModelProto:
        ins = [helper.make_tensor_value_info(self.input_name, TensorProto.FLOAT, self.input_shape)]
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, self.shape(o)) for o in outputs]
        graph = helper.make_graph(self.nodes, self.name, ins, outs, initializer=self.inits)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_operatorsetid("", OPSET)],
            producer_name="raptor.models",
            producer_version="1",
        )
        model.ir_version = IR_VERSION
        return model


def count_params(model: onnx.ModelProto) -> dict[str, int]:
    """Parameter counts from the initializers (no execution).

    `onnx`: every float initializer that is a Conv/Gemm/MatMul weight or bias or a BatchNorm
    scale/bias (running mean/var excluded, as torch excludes buffers). `folded`: the same with
    every BatchNormalization folded into its conv (one bias per channel instead of two).
    """
    inits = {t.name: t for t in model.graph.initializer}

    def size(name: str) -> int:
        t = inits.get(name)
        return int(np.prod(t.dims)) if t is not None else 0

    total = 0
    folded = 0
    for n in model.graph.node:
        if n.op_type in ("Conv", "Gemm"):
            c = sum(size(i) for i in n.input[1:3])
            total += c
            folded += c
            if n.op_type == "Conv" and len(n.input) < 3:
                pass
        elif n.op_type == "BatchNormalization":
            c = size(n.input[1])
            total += 2 * c
            folded += c
    return {"onnx": total, "folded": folded}
