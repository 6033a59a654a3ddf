"""Our pimcomp against the released PIMCOMP-NN (github sunxt99/PIMCOMP-NN at 2ed10c8).

The converter, config and parsers are tested always. The comparison needs the released binary in
$PIMCOMP_NN_BIN (built from that commit with CMake and g++; README, "pimcomp vs the released
PIMCOMP-NN") and is skipped without it: on small suite networks, for both one-chip architectures
and all three replication methods, every GEMM layer must get the same replicas, array groups and
crossbars as the released code, and every array group the same core.
"""

import os
from pathlib import Path

import pytest

from raptor.arch import load_arch
from raptor.errors import UnsupportedOpError
from raptor.frontend import load_graph
from raptor.models import build_model
from raptor.options import CompileOptions
from raptor.pimcomp import plan_model
from raptor.pimcomp.released import (
    ReleasedRunError,
    compare,
    core_grid,
    hardware_config,
    ll_name,
    model_json,
    parse_evaluation,
    parse_mapping,
    run_released,
)
from raptor.spatial.ir import LayerKind

BIN = os.environ.get("PIMCOMP_NN_BIN", "")
HAVE_BIN = bool(BIN) and os.path.isfile(BIN) and os.access(BIN, os.X_OK)
needs_released = pytest.mark.skipif(
    not HAVE_BIN,
    reason="PIMCOMP_NN_BIN does not name a built released PIMCOMP-NN binary (README: pimcomp vs "
    "the released PIMCOMP-NN; .ci/run builds one when ../shared/tools/build-pimcomp-nn.sh exists)",
)

_GRAPHS: dict = {}


def _graph(name: str, size: int):
    if (name, size) not in _GRAPHS:
        _GRAPHS[(name, size)] = load_graph(build_model(name, size))
    return _GRAPHS[(name, size)]


def _plan(g, arch, method):
    return plan_model(g, arch, CompileOptions(compiler="pimcomp", replication=method))


def test_model_json_matches_our_layers():
    g = _graph("resnet18", 32)
    m = model_json(g)
    nodes = m["node_list"]
    by_name = {e["name"]: e for e in nodes}
    assert nodes[0]["operation"] == "OP_INPUT" and nodes[0]["output_dim"] == [1, 3, 32, 32]
    # the released frontend keeps the ReLU after each residual Add as its own node: 41 nodes, the
    # count (and last index 40) its LL scheduler expects for "resnet18"
    ops = [e["operation"] for e in nodes]
    assert ops.count("OP_ELTWISE") == ops.count("OP_RELU") == 8
    assert len(nodes) == 41 and ll_name(m) == "resnet18"
    plan = _plan(g, load_arch("arch-a"), "balance")
    gemm = [ly for ly in plan.sg.layers if ly.kind == LayerKind.GEMM]
    assert len(gemm) == ops.count("OP_CONV") + ops.count("OP_FC") == 21
    for ly in gemm:  # the released H x W of every conv / FC is our weight matrix
        p = by_name[ly.name]["param"]
        if by_name[ly.name]["operation"] == "OP_CONV":
            h, w = p["kernel_h"] * p["kernel_w"] * p["input_channel"], p["output_channel"]
        else:
            h, w = p["num_input"], p["num_output"]
        assert (h, w) == (ly.rows, ly.cols), ly.name
    for i, e in enumerate(nodes):  # providers and consumers agree, indices are positions
        assert e["index"] == e["new_node_index"] == i
        assert e["provider_num"] == len(e["provider_index"]) == len(e["provider"])
        for p in e["provider_index"]:
            assert p < i and i in nodes[p]["consumer_index"]
    assert by_name["conv1"]["with_act"] == 1 and by_name["conv1"]["act_type"] == 0
    assert by_name["layer1.0.conv2"]["with_act"] == 0


def test_model_json_flatten_and_vgg8_has_no_ll_name():
    m = model_json(_graph("vgg8", 16))
    assert m["reshape_info"] == {
        "name": "classifier.fc0",
        "input_dim": [1, 512, 2, 2],
        "output_dim": [1, 2048],
    }
    assert len(m["node_list"]) == 13 and ll_name(m) is None


def test_model_json_rejects_what_released_cannot_express():
    g = _graph("yolo11n", 32)
    with pytest.raises(UnsupportedOpError, match="released PIMCOMP-NN has no"):
        model_json(g)


def test_hardware_config_counts_our_crossbars():
    a = hardware_config(load_arch("arch-a"))["chip_config"]
    mc = a["core_config"]["matrix_config"]
    # 16-bit weights in 2-bit cells: a 128x128 crossbar holds 128 x 16 weights, the released
    # code's logical crossbar
    assert mc["xbar_size"] == [128, 16] and mc["xbar_array_count"] == 96 and mc["adc_count"] == 16
    assert a["network_config"]["layout"] == [12, 14]
    b = hardware_config(load_arch("arch-b"))["chip_config"]
    assert b["network_config"]["layout"] == [6, 23]  # 138 cores, not the 12 x 12 mesh's 144
    assert core_grid(138) == (6, 23) and core_grid(144) == (12, 12) and core_grid(7) == (1, 7)
    with pytest.raises(UnsupportedOpError, match="one-chip"):
        hardware_config(load_arch("arch-c"))


MAPPING = """****************** Mapping Result ********************
144
core_0
   node  r_index  index_r  | AG_index  xbar_num  input_cycle
      1      0       0     |     0         4         33
      1      1       0     |     1         4         33
core_3
   node  r_index  index_r  | AG_index  xbar_num  input_cycle
      1      2       0     |     2         4         33
      2      0       1     |     4        70          1
"""


def test_parse_mapping_and_evaluation():
    names = ["in", "c", "fc"]
    ags = parse_mapping(MAPPING, names, {"c": 4, "fc": 64})  # fc: a column part of 64 of 70
    assert ags == {
        ("c", 0, 0): (0, 4),
        ("c", 1, 0): (0, 4),
        ("c", 2, 0): (3, 4),
        ("fc", 0, 1): (3, 64),
    }
    out = "x\npractical (ns)\n470023.00\nMVMUL (#)\n132500\nVVADD (#)\n7\nCOMM (#)\n3\n"
    out += "Volume (bytes)\n96\nCycles (ns)\n12\nMEM (#)\n5\nVolume (bytes)\n640\n"
    assert parse_evaluation(out) == (
        470023.0,
        {
            "MVMUL": 132500.0,
            "VVADD": 7.0,
            "COMM": 3.0,
            "COMM_bytes": 96.0,
            "MEM": 5.0,
            "MEM_bytes": 640.0,
        },
    )
    with pytest.raises(ReleasedRunError, match="printed no evaluation"):
        parse_evaluation("Map Check Failed")


def test_run_released_reports_a_missing_binary(tmp_path):
    with pytest.raises(ReleasedRunError, match="binary not found"):
        run_released(tmp_path / "nope", {"node_list": []}, {}, tmp_path / "w")


# ---- against the released binary ---------------------------------------------------------------
CASES = [("vgg8", 16), ("resnet18", 32)]  # resnet18 at 32: layer4 convs have one window


@needs_released
@pytest.mark.parametrize("model,size", CASES)
@pytest.mark.parametrize(
    "arch_name,method",
    [("arch-a", "balance"), ("arch-b", "balance"), ("arch-a", "W0H0"), ("arch-b", "uniform")],
)
def test_same_replication_crossbars_and_cores(tmp_path, model, size, arch_name, method):
    g, arch = _graph(model, size), load_arch(arch_name)
    m = model_json(g)
    rel = run_released(BIN, m, hardware_config(arch), tmp_path, method, "batch")
    plan = _plan(g, arch, method)
    rows = compare(plan, rel)
    assert len(rows) == len(rel.replication()) > 0
    for r in rows:
        assert (r["ours_replicas"], r["ours_ags"], r["ours_crossbars"]) == (
            r["released_replicas"],
            r["released_ags"],
            r["released_crossbars"],
        ), r
        assert r["same_cores"] == "yes", r
    # every AG it partitioned was mapped (the released first fit drops an AG that fits nowhere)
    assert rel.crossbars_needed == sum(xb for _, xb in rel.ags.values())
    assert (rel.crossbars_needed, rel.ags_needed) == (
        sum(a.crossbars for a in plan.ags),
        len(plan.ags),
    )
    assert rel.practical_ns > 0


@needs_released
def test_released_ll_runs_under_the_listed_name(tmp_path):
    g, arch = _graph("resnet18", 32), load_arch("arch-a")
    m = model_json(g)
    rel = run_released(BIN, m, hardware_config(arch), tmp_path, "W0H0", "element", ll_name(m))
    assert rel.ll_check == "PASS" and rel.practical_ns > 0
    assert {r["layer"]: r["released_replicas"] for r in compare(_plan(g, arch, "W0H0"), rel)} == {
        r["layer"]: r["ours_replicas"] for r in compare(_plan(g, arch, "W0H0"), rel)
    }
    with pytest.raises(ReleasedRunError, match="LL scheduler needs a listed model name"):
        run_released(BIN, m, hardware_config(arch), Path(tmp_path) / "x", "W0H0", "element")
