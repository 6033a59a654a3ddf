"""The released PIMCOMP-NN compiler (github sunxt99/PIMCOMP-NN) as a reference for our pimcomp.

Nothing here contains or builds the released code; the user builds it and passes its binary.

* `model_json(graph)`: our normalised graph IR in the released backend's model format
  (`{"node_list": [...], "reshape_info": {...}}`, one node per op, NCHW dims, provider/consumer
  names and indices). Conv/Gemm carry their fused activation (`with_act`/`act_type`); an Add with
  a fused ReLU becomes OP_ELTWISE + OP_RELU, as the released frontend leaves it. Both compilers
  therefore see the same layers, in the same order, under the same names.
* `hardware_config(arch)`: our architecture in its `config.json`. It counts *logical* crossbars
  (one cell holds a whole weight), so a logical crossbar is our physical one's weight capacity:
  `xbar_size = [rows, weights_per_crossbar_row]` (128 x 16 for 16-bit weights in 2-bit cells),
  `xbar_array_count` = crossbars per core and `layout` a grid of exactly `core_count` cores.
  `adc_count` is what the backend reads as ArithmeticPrecision (the weight bits).
* `run_released(...)`: stages `config.json`, `models/JSON/<name>.json` and `output/` in a work
  directory (the binary reads `../config.json` and `../models/JSON/` relative to its working
  directory), runs it, and reads back the replication, the array groups and the core of each
  from `output/MappingResult.txt` and its evaluator's totals from stdout.
* `compare(plan, released)`: per GEMM layer, ours next to the released code's.

The released LL ("element") scheduler accepts only the model names it lists, each with a fixed
index of the last node (`LL_LAST_NODE`); `ll_name(model)` picks the listed name whose index is
the converted network's, or None (then only HT, "batch", can run).
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raptor.arch import Arch
from raptor.errors import RaptorError, UnsupportedOpError
from raptor.frontend.graph import Graph, Node

# The released ElementPipelineSchedule's hard-coded last node index per model name.
LL_LAST_NODE = {
    "alexnet": 16,
    "vgg16": 26,
    "resnet18": 40,
    "resnet34": 72,
    "resnet50": 89,
    "googlenet": 89,
    "squeezenet": 39,
    "inception_v3": 121,
    "mobilenetv2": 100,
    "shufflenet": 104,
    "caffenet": 16,
    "rcnn-ilsvrc13": 16,
}
NO_CLIP = 10000000  # the released frontend's clip bounds of an unclipped conv/FC


class ReleasedRunError(RaptorError):
    """The released binary failed, or its output could not be read."""


def _activation(node: Node) -> dict[str, Any]:
    act = node.attrs.get("activation")
    out = {"with_act": 0, "act_type": -1, "with_bn": 0, "with_clip": 0}
    out.update(clip_min=-NO_CLIP, clip_max=NO_CLIP)
    if act is None:
        return out
    if act == "relu":
        return {**out, "with_act": 1, "act_type": 0}
    if act == "sigmoid":
        return {**out, "with_act": 1, "act_type": 2}
    if isinstance(act, tuple) and act[0] == "clip":
        return {**out, "with_clip": 1, "clip_min": float(act[1]), "clip_max": float(act[2])}
    raise UnsupportedOpError(f"released PIMCOMP-NN has no {act} activation (node {node.name!r})")


def _pads(node: Node) -> dict[str, int]:
    top, left, bottom, right = node.attrs["pads"]
    return {"pad_h0": top, "pad_h1": bottom, "pad_w0": left, "pad_w1": right}


def model_json(graph: Graph) -> dict[str, Any]:
    """The released backend's model JSON for a normalised graph (see the module docstring)."""
    if len(graph.inputs) != 1:
        raise UnsupportedOpError(
            f"released PIMCOMP-NN takes one network input, {graph.name} has {len(graph.inputs)}"
        )
    nodes: list[dict[str, Any]] = []
    name_of: dict[str, str] = {}  # tensor -> JSON node producing it
    inp = graph.inputs[0]
    nodes.append({"name": inp, "operation": "OP_INPUT", "out": graph.shapes[inp], "in": []})
    name_of[inp] = inp
    reshape_info = None
    for n in graph.nodes:
        ins = [name_of[t] for t in n.inputs if t in name_of]
        shape = graph.shapes[n.outputs[0]]
        ent: dict[str, Any] = {"name": n.name, "in": ins, "out": shape}
        if n.op == "Conv":
            kh, kw = n.attrs["kernel_shape"]
            sh, sw = n.attrs["strides"]
            dh, dw = n.attrs.get("dilations", (1, 1))
            cin = graph.shapes[n.inputs[0]][1]
            ent["operation"] = "OP_CONV"
            ent["param"] = {
                "kernel_h": kh,
                "kernel_w": kw,
                "stride_h": sh,
                "stride_w": sw,
                **_pads(n),
                "dilation_h": dh,
                "dilation_w": dw,
                "group": n.attrs.get("group", 1),
                "input_channel": cin,
                "output_channel": shape[1],
                "with_bias": int("B" in n.params),
            }
            ent.update(_activation(n))
        elif n.op == "Gemm":
            k = graph.shapes[n.inputs[0]][-1]
            ent["operation"] = "OP_FC"
            ent["param"] = {"num_input": k, "num_output": shape[-1], "with_bias": 1}
            ent.update(_activation(n))
            src = graph.producer().get(n.inputs[0])
            if reshape_info is None and src is not None and src.op in ("Flatten", "Reshape"):
                reshape_info = {
                    "name": n.name,
                    "input_dim": list(graph.shapes[src.inputs[0]]),
                    "output_dim": list(graph.shapes[n.inputs[0]]),
                }
        elif n.op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
            ent["operation"] = "OP_POOL"
            if n.op == "GlobalAveragePool":
                _, _, h, w = graph.shapes[n.inputs[0]]
                geo = {"kernel_h": h, "kernel_w": w, "stride_h": 1, "stride_w": 1}
                geo.update(pad_h0=0, pad_h1=0, pad_w0=0, pad_w1=0)
            else:
                kh, kw = n.attrs["kernel_shape"]
                sh, sw = n.attrs["strides"]
                geo = {"kernel_h": kh, "kernel_w": kw, "stride_h": sh, "stride_w": sw, **_pads(n)}
            geo["pool_method"] = 0 if n.op == "MaxPool" else 1
            geo["global"] = int(n.op == "GlobalAveragePool")
            ent["param"] = geo
        elif n.op == "Add":
            ent["operation"] = "OP_ELTWISE"
            ent["param"] = {"eletype": 2}
            act = n.attrs.get("activation")
            if act not in (None, "relu"):
                raise UnsupportedOpError(
                    f"released PIMCOMP-NN has no {act} after an Add (node {n.name!r})"
                )
            if act == "relu":  # the released frontend fuses activations into conv/FC only
                nodes.append({**ent, "name": n.name})
                ent = {"name": n.outputs[0], "in": [n.name], "out": shape}
                ent["operation"] = "OP_RELU"
        elif n.op == "Concat":
            if n.attrs.get("axis", 1) != 1:
                raise UnsupportedOpError(
                    f"released PIMCOMP-NN concatenates channels only ({n.name!r})"
                )
            ent["operation"] = "OP_CONCAT"
        elif n.op in ("Flatten", "Reshape"):
            ent["operation"] = "OP_FLATTEN"
            ent["param"] = {"axis": 1, "end_axis": -1}
        elif n.op in ("Relu", "Sigmoid"):
            ent["operation"] = {"Relu": "OP_RELU", "Sigmoid": "OP_SIGMOID"}[n.op]
        else:
            raise UnsupportedOpError(
                f"released PIMCOMP-NN has no equivalent of {n.op} (node {n.name!r})"
            )
        nodes.append(ent)
        name_of[n.outputs[0]] = ent["name"]
    return {"node_list": _link(nodes), "reshape_info": reshape_info or {}}


def _link(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    index = {e["name"]: i for i, e in enumerate(nodes)}
    consumers: dict[str, list[str]] = {e["name"]: [] for e in nodes}
    for e in nodes:
        for p in e["in"]:
            consumers[p].append(e["name"])
    out = []
    for i, e in enumerate(nodes):
        ent = {k: v for k, v in e.items() if k not in ("in", "out")}
        out_dim = list(e["out"])
        ent.update(bitwidth=16, index=i, new_node_index=i, output_dim=out_dim)
        ent["output_dim_num"] = len(out_dim)
        ent["provider"] = list(e["in"])
        ent["provider_num"] = len(e["in"])
        ent["provider_index"] = [index[p] for p in e["in"]]
        if e["in"]:
            in_dim = list(nodes[index[e["in"][0]]]["out"])
            ent["input_dim"], ent["input_dim_num"] = in_dim, len(in_dim)
        ent["consumer"] = consumers[e["name"]]
        ent["consumer_num"] = len(consumers[e["name"]])
        ent["consumer_index"] = [index[c] for c in consumers[e["name"]]]
        out.append(ent)
    return out


def ll_name(model: dict[str, Any]) -> str | None:
    """A model name the released LL scheduler accepts for this node list, or None."""
    last = len(model["node_list"]) - 1
    for name, idx in LL_LAST_NODE.items():
        if idx == last:
            return name
    return None


def core_grid(n: int) -> tuple[int, int]:
    """The squarest (rows, cols) grid of exactly n cores."""
    r = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return r, n // r


def hardware_config(arch: Arch) -> dict[str, Any]:
    """The released `config.json` for `arch` (the keys its backend reads; see the docstring)."""
    if arch.chips != 1:
        raise UnsupportedOpError(
            f"{arch.name}: the comparison with released PIMCOMP-NN covers one-chip architectures"
        )
    rows, cols = arch.core_layout
    layout = [rows, cols] if rows * cols == arch.core_count else list(core_grid(arch.core_count))
    m = arch.matrix
    return {
        "chip_config": {
            "core_config": {
                "matrix_config": {
                    "xbar_array_count": arch.crossbars_per_core,
                    "xbar_size": [m.rows, arch.weights_per_crossbar_row],
                    "cell_precision": m.cell_precision,
                    "adc_count": arch.weight_bits,
                }
            },
            "network_config": {"layout": layout},
            "core_cnt": arch.core_count,
        }
    }


@dataclass
class ReleasedRun:
    """What one run of the released binary reported."""

    method: str
    pipeline: str  # "batch" (HT) or "element" (LL)
    names: list[str]  # JSON node index -> name
    # (node name, replica index incl. column parts, AG index in replica) -> (core, crossbars)
    ags: dict[tuple[str, int, int], tuple[int, int]] = field(default_factory=dict)
    crossbars_needed: int = 0  # "#RRAMs needed"
    ags_needed: int = 0  # "#ArrayGroups needed"
    practical_ns: float = 0.0  # its evaluator's "practical (ns)"
    totals: dict[str, float] = field(default_factory=dict)
    ll_check: str = ""  # LL: its own check that every node produced all outputs (PASS/FAIL)
    stdout: str = ""

    def replication(self) -> dict[str, int]:
        reps: dict[str, set[int]] = {}
        for name, r, _ in self.ags:
            reps.setdefault(name, set()).add(r)
        return {k: len(v) for k, v in reps.items()}

    def layer_ags(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, _, _ in self.ags:
            out[name] = out.get(name, 0) + 1
        return out

    def layer_crossbars(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for (name, _, _), (_, xb) in self.ags.items():
            out[name] = out.get(name, 0) + xb
        return out


_MAP_ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


def parse_mapping(text: str, names: list[str], crossbars_per_ag: dict[str, int]) -> dict:
    """`output/MappingResult.txt`: per core, one row per AG (node, r_index, index_r | ...).
    Its xbar_num column is the full-width count even for a column part, so the crossbars of an
    AG come from `crossbars_per_ag` (per node, from the partition) instead."""
    out: dict[tuple[str, int, int], tuple[int, int]] = {}
    core = -1
    for line in text.splitlines():
        if line.startswith("core_"):
            core = int(line[5:])
            continue
        m = _MAP_ROW.match(line)
        if m:
            node, r, k = (int(x) for x in m.groups()[:3])
            name = names[node]
            out[(name, r, k)] = (core, crossbars_per_ag.get(name, int(m.group(5))))
    return out


_TOTALS = ("MVMUL (#)", "VVADD (#)", "COMM (#)", "MEM (#)")


def parse_evaluation(stdout: str) -> tuple[float, dict[str, float]]:
    """The evaluator's `practical (ns)` and its instruction totals, from stdout."""
    lines = [ln.strip() for ln in stdout.splitlines()]
    if "practical (ns)" not in lines:
        raise ReleasedRunError("released PIMCOMP-NN printed no evaluation ('practical (ns)')")
    i = lines.index("practical (ns)")
    practical = float(lines[i + 1])
    totals = {}
    for key in _TOTALS:
        if key in lines[i:]:
            j = lines.index(key, i)
            totals[key.split()[0]] = float(lines[j + 1])
            if lines[j + 2 : j + 3] == ["Volume (bytes)"]:  # COMM and MEM: bytes moved
                totals[key.split()[0] + "_bytes"] = float(lines[j + 3])
    return practical, totals


def _int_after(stdout: str, label: str) -> int:
    m = re.search(re.escape(label) + r"\s*(\d+)", stdout)
    if not m:
        raise ReleasedRunError(f"released PIMCOMP-NN printed no {label!r}")
    return int(m.group(1))


def released_crossbars_per_ag(model: dict[str, Any], cfg: dict[str, Any]) -> dict[str, int]:
    """Crossbars of one AG (column part) per conv/FC node under the released partition rule:
    ceil(W / CrossbarW) logical crossbars, cut into parts of at most a core's crossbars."""
    mc = cfg["chip_config"]["core_config"]["matrix_config"]
    xw, per_core = mc["xbar_size"][1], mc["xbar_array_count"]
    out = {}
    for e in model["node_list"]:
        if e["operation"] in ("OP_CONV", "OP_FC"):
            p = e["param"]
            w = p["output_channel"] if e["operation"] == "OP_CONV" else p["num_output"]
            out[e["name"]] = min(math.ceil(w / xw), per_core)
    return out


def run_released(
    binary: str | Path,
    model: dict[str, Any],
    cfg: dict[str, Any],
    work: Path,
    method: str = "balance",
    pipeline: str = "batch",
    name: str = "model",
    timeout_s: float = 600.0,
) -> ReleasedRun:
    """Run the released binary on `model` under `cfg` in `work` (created, overwritten)."""
    import json

    binary = Path(binary).resolve()
    if not binary.is_file():
        raise ReleasedRunError(f"released PIMCOMP-NN binary not found: {binary}")
    if pipeline == "element" and LL_LAST_NODE.get(name) != len(model["node_list"]) - 1:
        raise ReleasedRunError(
            f"released PIMCOMP-NN's LL scheduler needs a listed model name whose last node index "
            f"is {len(model['node_list']) - 1}; {name!r} is not one"
        )
    if work.exists():
        shutil.rmtree(work)
    (work / "models" / "JSON").mkdir(parents=True)
    (work / "output").mkdir()
    (work / "build").mkdir()
    (work / "config.json").write_text(json.dumps(cfg, indent=1))
    (work / "models" / "JSON" / f"{name}.json").write_text(json.dumps(model))
    args = [str(binary), f"-m={name}", f"-r={method}", f"-p={pipeline}"]
    try:
        proc = subprocess.run(
            args, cwd=work / "build", capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as e:
        raise ReleasedRunError(f"released PIMCOMP-NN ran over {timeout_s:g} s: {e}") from None
    (work / "stdout.txt").write_text(proc.stdout)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        how = f"exited with {proc.returncode}"
        if proc.returncode < 0:
            how = f"was killed by signal {-proc.returncode}"
        raise ReleasedRunError(f"released PIMCOMP-NN {how}: {tail}")
    names = [e["name"] for e in model["node_list"]]
    run = ReleasedRun(method, pipeline, names, stdout=proc.stdout)
    mapping = (work / "output" / "MappingResult.txt").read_text()
    run.ags = parse_mapping(mapping, names, released_crossbars_per_ag(model, cfg))
    run.crossbars_needed = _int_after(proc.stdout, "#RRAMs needed:")
    run.ags_needed = _int_after(proc.stdout, "#ArrayGroups needed:")
    run.practical_ns, run.totals = parse_evaluation(proc.stdout)
    if "Check Result" in proc.stdout:
        run.ll_check = "PASS" if re.search(r"-+ PASS -+", proc.stdout) else "FAIL"
    return run


COMPARE_FIELDS = [
    "layer",
    "windows",
    "ours_replicas",
    "released_replicas",
    "ours_ags",
    "released_ags",
    "ours_crossbars",
    "released_crossbars",
    "ours_cores",
    "released_cores",
    "same_cores",
]


def _cores(cs: set[int]) -> str:
    s = sorted(cs)
    return f"{s[0]}" if len(s) == 1 else f"{s[0]}-{s[-1]} ({len(s)})"


def compare(plan: Any, released: ReleasedRun) -> list[dict[str, Any]]:
    """Per GEMM layer of our pimcomp plan (`raptor.pimcomp.plan_model`), ours next to the
    released code's: replicas (column parts count as replicas, as released), AGs, crossbars,
    the cores holding them, and whether every AG sits on the same core in both."""
    from raptor.spatial.ir import LayerKind

    rel_core = {k: c for k, (c, _) in released.ags.items()}
    rel_cores: dict[str, set[int]] = {}
    for (name, _, _), (c, _) in released.ags.items():
        rel_cores.setdefault(name, set()).add(c)
    rel_reps, rel_ags, rel_xb = (
        released.replication(),
        released.layer_ags(),
        released.layer_crossbars(),
    )
    by_layer: dict[int, list] = {}
    for ag in plan.ags:
        by_layer.setdefault(ag.layer, []).append(ag)
    rows = []
    for ly in plan.sg.layers:
        if ly.kind != LayerKind.GEMM:
            continue
        ags = by_layer.get(ly.index, [])
        parts = 1 + max((a.part for a in ags), default=0)
        same = all(
            rel_core.get((ly.name, a.replica * parts + a.part, a.index)) == a.core for a in ags
        )
        rows.append(
            {
                "layer": ly.name,
                "windows": ly.out_pixels,
                "ours_replicas": plan.replication.get(ly.index, 1) * parts,
                "released_replicas": rel_reps.get(ly.name, 0),
                "ours_ags": len(ags),
                "released_ags": rel_ags.get(ly.name, 0),
                "ours_crossbars": sum(a.crossbars for a in ags),
                "released_crossbars": rel_xb.get(ly.name, 0),
                "ours_cores": _cores({a.core for a in ags}) if ags else "",
                "released_cores": _cores(rel_cores[ly.name]) if ly.name in rel_cores else "",
                "same_cores": "yes" if same and ags else "no",
            }
        )
    return rows
