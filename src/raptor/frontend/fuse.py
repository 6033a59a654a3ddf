"""Activation fusion on the graph IR: Relu, Clip, Sigmoid and SiLU (Sigmoid + Mul reading the
same tensor) that are the only readers of a Conv / Gemm / Add output become that producer's
`attrs["activation"]` ("relu", "sigmoid", "silu" or ("clip", lo, hi)). The fused node takes
over the activation's output name, so graph outputs keep their names."""

from __future__ import annotations

from raptor.frontend.graph import Graph, Node

FUSABLE = ("Conv", "Gemm", "Add")


def _fusable_producer(g: Graph, t: str, prod: dict[str, Node]) -> Node | None:
    p = prod.get(t)
    if p is None or p.op not in FUSABLE or p.attrs.get("activation") is not None:
        return None
    if t in g.outputs or len(p.outputs) != 1:
        return None
    return p


def fuse_activations(g: Graph) -> None:
    changed = True
    while changed:
        changed = False
        prod = g.producer()
        cons = g.consumers()
        remove: set[int] = set()
        for n in g.nodes:
            if id(n) in remove:
                continue
            t = n.inputs[0] if n.inputs else None
            if n.op == "Sigmoid":
                p = _fusable_producer(g, t, prod)
                if p is None:
                    continue
                readers = cons.get(t, [])
                sig_readers = cons.get(n.outputs[0], [])
                # SiLU: x * sigmoid(x), the Mul and the Sigmoid are the only readers of x
                if (
                    len(readers) == 2
                    and len(sig_readers) == 1
                    and sig_readers[0].op == "Mul"
                    and n.outputs[0] not in g.outputs
                    and sorted(sig_readers[0].inputs) == sorted([t, n.outputs[0]])
                    and sig_readers[0] in readers
                ):
                    mul = sig_readers[0]
                    p.attrs["activation"] = "silu"
                    p.outputs = list(mul.outputs)
                    remove.update((id(n), id(mul)))
                    changed = True
                elif len(readers) == 1:
                    p.attrs["activation"] = "sigmoid"
                    p.outputs = list(n.outputs)
                    remove.add(id(n))
                    changed = True
            elif n.op in ("Relu", "Clip"):
                p = _fusable_producer(g, t, prod)
                if p is None or len(cons.get(t, [])) != 1:
                    continue
                if n.op == "Relu":
                    p.attrs["activation"] = "relu"
                else:
                    p.attrs["activation"] = ("clip", float(n.attrs["min"]), float(n.attrs["max"]))
                p.outputs = list(n.outputs)
                remove.add(id(n))
                changed = True
        g.nodes = [n for n in g.nodes if id(n) not in remove]
