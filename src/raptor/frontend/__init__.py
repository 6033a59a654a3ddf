"""ONNX frontend: import, clean up, fold and fuse into the graph IR.

    load_graph(model) -> Graph     model: path, str or onnx.ModelProto

Pipeline: gate (gate.check_model: the file, the checker, strict shape inference, opset,
inputs/outputs, attribute ranges) → cleanup (batch 1, constants, Identity, shape inference; onnxslim with slim=True)
→ importer (per-op handlers, canonical attributes, ceil_mode / Gemm / ReduceMean resolved)
→ fold (BatchNormalization, Pad, bias Add) → fuse (activations) → check every op is one of
NORMALIZED_OPS → Graph.verify().
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from raptor.errors import RaptorError, UnsupportedOpError
from raptor.frontend.graph import NORMALIZED_OPS, Graph, Node

if TYPE_CHECKING:  # onnx is imported by the frontend's passes, when a model is loaded
    import onnx


def finalize(g: Graph) -> Graph:
    """Reject leftover non-canonical ops, give every fusable node an activation key, drop
    unused constants and shapes, verify."""
    for n in g.nodes:
        if n.op not in NORMALIZED_OPS:
            raise UnsupportedOpError(f"unsupported ONNX op {n.op} (node {n.name!r})")
        if n.op in ("Conv", "Gemm", "Add"):
            n.attrs.setdefault("activation", None)
    used = {t for n in g.nodes for t in n.inputs}
    g.constants = {k: v for k, v in g.constants.items() if k in used}
    live = used | {t for n in g.nodes for t in n.outputs} | set(g.inputs) | set(g.outputs)
    g.shapes = {k: v for k, v in g.shapes.items() if k in live}
    g.verify()
    return g


def load_graph(model: str | Path | onnx.ModelProto, slim: bool = False) -> Graph:
    """Load any reasonable ONNX model into the normalised graph IR (see graph.py)."""
    from raptor.frontend.cleanup import cleanup
    from raptor.frontend.fold import fold_batchnorm, fold_bias_add, fold_pad
    from raptor.frontend.fuse import fuse_activations
    from raptor.frontend.gate import check_model
    from raptor.frontend.importer import import_model

    checked = check_model(model)
    try:
        g = import_model(cleanup(checked.model, slim=slim))
        fold_batchnorm(g)
        fold_pad(g)
        fold_bias_add(g)
        fuse_activations(g)
        return finalize(g)
    except RaptorError as e:  # name the file, as the gate does
        raise type(e)(f"{checked.label}: {e}") from None


__all__ = ["Graph", "Node", "NORMALIZED_OPS", "load_graph"]
