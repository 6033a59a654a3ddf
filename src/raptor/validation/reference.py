"""Reference data from onnxruntime, generated once per model file and reused.

Input i is standard-normal float32 drawn from np.random.default_rng(seed + i) in the model's
ONNX (NCHW) shape (symbolic dims -> 1); outputs come from onnxruntime with one intra-op thread.
Files under `common_dir`:

    reference_seed<S>.npz           in<i>_<j>, out<i>_<j> arrays (j indexes the meta's input/output names)
    reference_seed<S>.json          meta: model sha256, n_inputs, names, shapes, sensitivity
    reference_seed<S>_intermediates.npz   (only with intermediates=True) inter<i>_<j>

The data is reused when the meta's sha256 matches the model file and it holds at least
n_inputs inputs; otherwise (or with fast=False) it is regenerated. Writers hold an exclusive
fcntl lock on `.reference.lock` and write every file to a temp name + os.replace, the meta
last, so concurrent workers never see (or produce) a torn cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from raptor.frontend.files import sha256_file

if TYPE_CHECKING:  # imported where a model is read: a cached reference needs no onnx
    import onnx

META_VERSION = 1


@dataclass
class ReferenceData:
    inputs: list[dict[str, np.ndarray]]
    outputs: list[dict[str, np.ndarray]]
    sensitivity: float
    intermediates: list[dict[str, np.ndarray]] | None = None
    model_sha256: str = ""
    cached: bool = False  # True when loaded from common_dir rather than computed now
    paths: dict[str, str] = field(default_factory=dict)


def make_inputs(sess, n_inputs: int, seed: int) -> list[dict[str, np.ndarray]]:
    specs = [
        (i.name, [d if isinstance(d, int) and d > 0 else 1 for d in i.shape])
        for i in sess.get_inputs()
    ]
    out = []
    for k in range(n_inputs):
        rng = np.random.default_rng(seed + k)
        out.append({name: rng.standard_normal(shape).astype(np.float32) for name, shape in specs})
    return out


def output_sensitivity(outputs: list[dict[str, np.ndarray]]) -> float:
    """RMS over output elements of the std across inputs, over the RMS of the outputs."""
    if len(outputs) < 2:
        return float("nan")
    y = np.stack([np.concatenate([v.ravel() for v in o.values()]) for o in outputs]).astype(
        np.float64
    )
    return float(np.sqrt(np.mean(y.std(axis=0) ** 2)) / (np.sqrt(np.mean(y**2)) + 1e-30))


def _session(model: onnx.ModelProto):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _with_all_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for t in n.output:
            if t and t not in have:
                m.graph.output.append(onnx.helper.make_empty_tensor_value_info(t))
                have.add(t)
    return m


def _atomic_write(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _locked(common_dir: Path):
    with open(common_dir / ".reference.lock", "a+") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lf, fcntl.LOCK_UN)


def _paths(common_dir: Path, seed: int) -> dict[str, Path]:
    stem = f"reference_seed{seed}"
    return {
        "npz": common_dir / f"{stem}.npz",
        "meta": common_dir / f"{stem}.json",
        "inter": common_dir / f"{stem}_intermediates.npz",
    }


def _load(paths, meta, n_inputs: int, intermediates: bool) -> ReferenceData:
    with np.load(paths["npz"]) as z:
        ins = [
            {name: z[f"in{i}_{j}"] for j, name in enumerate(meta["inputs"])}
            for i in range(n_inputs)
        ]
        outs = [
            {name: z[f"out{i}_{j}"] for j, name in enumerate(meta["outputs"])}
            for i in range(n_inputs)
        ]
    inter = None
    if intermediates:
        names = meta["intermediate_names"]
        with np.load(paths["inter"]) as z:
            inter = [
                {name: z[f"inter{i}_{j}"] for j, name in enumerate(names)} for i in range(n_inputs)
            ]
    return ReferenceData(
        ins,
        outs,
        float(meta["sensitivity"]),
        inter,
        meta["model_sha256"],
        True,
        {k: str(v) for k, v in paths.items()},
    )


def _generate(
    model_path: Path, n_inputs: int, seed: int, intermediates: bool, sha: str
) -> ReferenceData:
    from raptor.frontend.gate import check_model

    model = check_model(model_path).model
    sess = _session(_with_all_outputs(model) if intermediates else model)
    out_names = [o.name for o in model.graph.output]
    ins = make_inputs(sess, n_inputs, seed)
    outs, inter = [], [] if intermediates else None
    all_names = [o.name for o in sess.get_outputs()]
    for feed in ins:
        vals = dict(zip(all_names, sess.run(None, feed)))
        outs.append({k: vals[k] for k in out_names})
        if intermediates:
            inter.append({k: v for k, v in vals.items() if k not in out_names})
    sens = output_sensitivity(outs)
    if not np.isfinite(sens):
        sens = input_sensitivity(model, seed)
    return ReferenceData(ins, outs, float(sens), inter, sha, False)


def exact_values(
    model_path: str | Path, inputs: list[dict[str, np.ndarray]], keep_all: bool = False
) -> list[dict[str, np.ndarray]]:
    """The model evaluated in float64 (raptor.frontend.evaluate on its graph IR) on each input:
    near-exact values to measure float32 rounding against. The graph outputs, or with keep_all
    every tensor of the graph IR (names follow the ONNX model's, fused tensors are absent)."""
    from raptor.frontend import load_graph
    from raptor.frontend.evaluate import evaluate

    g = load_graph(model_path)
    out = []
    for feed in inputs:
        env = evaluate(g, feed, keep_all=keep_all, dtype=np.float64)
        out.append({k: v for k, v in env.items() if k not in g.constants})
    return out


def ensure_reference(
    model_path: str | Path,
    common_dir: str | Path,
    n_inputs: int,
    seed: int = 0,
    fast: bool = True,
    intermediates: bool = False,
) -> ReferenceData:
    """Return seeded inputs and onnxruntime outputs for the model, cached under common_dir."""
    if n_inputs < 1:
        raise ValueError("n_inputs must be >= 1")
    from raptor.frontend.files import check_file

    model_path = check_file(model_path)  # the whole gate runs when the data is generated
    common_dir = Path(common_dir)
    common_dir.mkdir(parents=True, exist_ok=True)
    paths = _paths(common_dir, seed)
    sha = sha256_file(model_path)
    with _locked(common_dir):
        if fast and paths["meta"].exists() and paths["npz"].exists():
            try:
                meta = json.loads(paths["meta"].read_text())
                ok = (
                    meta.get("version") == META_VERSION
                    and meta.get("model_sha256") == sha
                    and meta.get("seed") == seed
                    and meta.get("n_inputs", 0) >= n_inputs
                    and (
                        not intermediates or (meta.get("intermediates") and paths["inter"].exists())
                    )
                )
                if ok:
                    return _load(paths, meta, n_inputs, intermediates)
            except (OSError, ValueError, KeyError):
                pass  # unreadable cache: regenerate
        data = _generate(model_path, n_inputs, seed, intermediates, sha)
        arrays = {}
        for i, (x, y) in enumerate(zip(data.inputs, data.outputs)):
            arrays.update({f"in{i}_{j}": v for j, v in enumerate(x.values())})
            arrays.update({f"out{i}_{j}": v for j, v in enumerate(y.values())})
        _atomic_write(paths["npz"], lambda f: np.savez(f, **arrays))
        inter_names = list(data.intermediates[0]) if intermediates else []
        if intermediates:
            inter = {
                f"inter{i}_{j}": v
                for i, d in enumerate(data.intermediates)
                for j, v in enumerate(d.values())
            }
            _atomic_write(paths["inter"], lambda f: np.savez(f, **inter))
        meta = {
            "version": META_VERSION,
            "model": model_path.name,
            "model_sha256": sha,
            "seed": seed,
            "n_inputs": n_inputs,
            "inputs": list(data.inputs[0]),
            "outputs": list(data.outputs[0]),
            "input_shapes": {k: list(v.shape) for k, v in data.inputs[0].items()},
            "output_shapes": {k: list(v.shape) for k, v in data.outputs[0].items()},
            "sensitivity": data.sensitivity,
            "intermediates": bool(intermediates),
            "intermediate_names": inter_names,
            "generator": "onnxruntime, intra_op_num_threads=1",
        }
        _atomic_write(paths["meta"], lambda f: f.write(json.dumps(meta, indent=2).encode()))
        data.paths = {k: str(v) for k, v in paths.items()}
        return data


def input_sensitivity(
    model: onnx.ModelProto | str | Path, seed: int = 0, n_inputs: int = 4
) -> float:
    """How much the output depends on the input: RMS over output elements of the std across
    `n_inputs` seeded standard-normal inputs, divided by the RMS of the outputs. 0 for a
    constant model, about 1 when outputs are input-driven and centred."""
    import onnx
    import onnxruntime as ort

    data = (
        model.SerializeToString()
        if isinstance(model, onnx.ModelProto)
        else Path(model).read_bytes()
    )
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    outs = [
        np.concatenate([o.ravel() for o in sess.run(None, feed)])
        for feed in make_inputs(sess, n_inputs, seed)
    ]
    y = np.stack(outs).astype(np.float64)
    spread = np.sqrt(np.mean(y.std(axis=0) ** 2))
    scale = np.sqrt(np.mean(y**2)) + 1e-30
    return float(spread / scale)
