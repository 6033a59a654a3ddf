import math

import numpy as np
import pytest

from raptor.arch import load_arch
from raptor.bounds import compute_bounds, critical_path, water_fill
from raptor.frontend.graph import Graph, Node


def test_water_fill_balances_the_bottleneck():
    # P = 100, 10; X = 1, 4; budget 9 -> r = (5, 1): max(20, 10) = 20
    t_b, reps = water_fill([100, 10], [1, 4], 9)
    assert reps == [5, 1] and t_b == 20
    # exhaustive check of optimality on a small instance
    best = min(
        max(math.ceil(100 / a), math.ceil(10 / b))
        for a in range(1, 10)
        for b in range(1, 3)
        if a + 4 * b <= 9
    )
    assert t_b == best
    with pytest.raises(ValueError, match="needs 5 crossbars, chip has 4"):
        water_fill([1, 1], [1, 4], 4)


def _toy_graph():
    w1 = np.zeros((64, 3, 3, 3), np.float32)
    w2 = np.zeros((64, 64, 3, 3), np.float32)
    fc = np.zeros((64, 10), np.float32)
    nodes = [
        Node("c1", "Conv", ["x"], ["a"], {"group": 1}, {"W": w1}),
        Node("c2", "Conv", ["a"], ["b"], {"group": 1}, {"W": w2}),
        Node("add", "Add", ["a", "b"], ["c"]),
        Node("gap", "GlobalAveragePool", ["c"], ["d"]),
        Node("flat", "Flatten", ["d"], ["e"]),
        Node("fc", "Gemm", ["e"], ["y"], {}, {"W": fc}),
    ]
    shapes = {
        "x": (1, 3, 8, 8),
        "a": (1, 64, 8, 8),
        "b": (1, 64, 8, 8),
        "c": (1, 64, 8, 8),
        "d": (1, 64, 1, 1),
        "e": (1, 64),
        "y": (1, 10),
    }
    return Graph("toy", nodes, shapes, ["x"], ["y"])


def test_bounds_by_hand():
    g = _toy_graph()
    a = load_arch("arch-a")
    b = compute_bounds(g, a)
    assert critical_path(g) == 3
    # c1: R=27, C=64 -> 1 row tile x 4 crossbars (16 weights per crossbar row); c2: R=576 -> 5 x 4; fc: 1 x 1
    assert b["crossbars_needed"] == 4 + 20 + 1
    assert b["work_crossbar_mvms"] == 64 * 4 + 64 * 20 + 1
    t = 2601  # 16-bit MVM under PIMCOMP constants
    assert b["mvm_ns"] == t
    assert b["latency_lb_unlimited_ns"] == 3 * t
    assert b["latency_lb_no_replication_ns"] == 64 * t
    # 16128 crossbars are plenty: every pixel gets its replica, T_B = 1
    assert b["bottleneck_mvms_best_replication"] == 1
    assert b["throughput_ub_per_s"] == pytest.approx(1e9 / t)


def test_every_compile_report_carries_the_bounds():
    from raptor.compiler import compile_model
    from raptor.options import CompileOptions

    g = _toy_graph()
    for n in g.nodes:  # give the toy real weights and biases so it compiles
        if n.op in ("Conv", "Gemm"):
            n.params["W"] = np.ones_like(n.params["W"]) * 0.01
            n.params["B"] = np.zeros(n.params["W"].shape[0 if n.op == "Conv" else 1], np.float32)
            n.attrs.setdefault("activation", None)
            if n.op == "Conv":
                n.attrs.update(
                    kernel_shape=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1)
                )
    res = compile_model(g, load_arch("arch-a"), CompileOptions())
    b = res.report["bounds"]
    assert b == {
        k: v for k, v in compute_bounds(g, load_arch("arch-a")).items() if k != "replication_best"
    }


def test_machine_bounds_by_hand():
    g = _toy_graph()
    b = compute_bounds(g, load_arch("arch-a"))
    # one mvmul holds a core 2601 ns + pimsim-nn's 2048-byte local read (32 beats x 20 ns)
    t = 2601 + 640
    assert b["mvm_occupancy_ns"] == t
    # an mvmul takes at most 128 input entries: c1 feeds 64 windows of 27, c2 64 of 576 (4.5 row
    # tiles: its last 64 rows of two pixels can share one mvmul block-diagonally), fc one of 64
    entries = 64 * 27 + 64 * 576 + 64
    assert b["mvm_instructions_min"] == math.ceil(entries / 128) == 302
    assert b["window_sets"] == 3
    assert b["mvm_issue_ns"] == pytest.approx(302 * t / 168)
    # every mvmul writes 16 outputs x 2 B per crossbar (64 B beats at 30 ns); c1's and c2's
    # 64 output columns of 16-bit weights in 2-bit cells fill 4 crossbars per input vector
    # (1 and 5 vectors per pixel), fc's 10 a 0.625 of one
    xbar_ns = 32 / 64 * 30
    writes = (64 * 4 + 64 * 5 * 4 + 1 * 0.625) * xbar_ns
    assert b["mvm_write_ns"] == pytest.approx(writes / 168)
    # c2's 5 row tiles leave 4 partial sums of 64 columns per pixel; one element added costs
    # 2 reads of 2 B at 20 ns per 64 B beat, a write at 30 ns, and 4 cycles per 32 lanes
    add = 2 / 64 * (2 * 20 + 30) + 4 / 32
    assert b["partial_sum_ns"] == pytest.approx(64 * 4 * 64 * add / 168)
    work = (302 * t + writes + 64 * 4 * 64 * add) / 168
    assert b["core_work_ns"] == pytest.approx(work)
    # input 384 B = 12 beats of 32 B at 40 ns; output 20 B = 1 beat at 50 ns
    assert b["global_memory_io_ns"] == 12 * 40 + 50
    assert b["latency_lb_machine_ns"] == 3 * t  # the chain of three weight layers dominates
    assert b["throughput_ub_machine_per_s"] == pytest.approx(1e9 / work)


def test_machine_bound_counts_shared_windows_once():
    """Siblings (layers reading the same input with the same window) can share one input vector:
    the compiler merges them, so the bound counts them once, and a program never issues fewer
    mvmuls than the bound says. A 147-row window (7x7x3) leaves 19 rows that several pixels share
    one mvmul for: 147/128 mvmuls per pixel, not 2."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent / "pim"))
    from toy import OnnxBuilder

    from raptor.compiler import compile_model
    from raptor.frontend import load_graph
    from raptor.isa.opcodes import Opcode
    from raptor.options import CompileOptions

    bld = OnnxBuilder(0)
    x = bld.conv("x", 3, 16, k=7, pad=3)
    a = bld.conv(bld.conv(x, 16, 8, k=1, pad=0), 8, 8)
    c = bld.conv(bld.conv(x, 16, 8, k=1, pad=0), 8, 8)
    y = bld.node("Flatten", [bld.node("GlobalAveragePool", [bld.node("Add", [a, c])])], axis=1)
    model = bld.model([1, 3, 8, 8], bld.gemm(y, 8, 5), [1, 5])
    arch = load_arch("arch-a")
    b = compute_bounds(load_graph(model), arch)
    assert (b["weight_layers"], b["window_sets"]) == (6, 5)
    entries = 64 * 147 + 64 * 16 + 2 * 64 * 72 + 8
    assert b["mvm_instructions_min"] == math.ceil(entries / 128)
    counts = []
    for opts in (CompileOptions(), CompileOptions(disable_sibling_merge=True)):
        res = compile_model(model, arch, opts)
        counts.append(sum(int((s["opcode"] == Opcode.MVMUL).sum()) for s in res.program.cores))
        ratio = counts[-1] / b["mvm_instructions_min"]
        assert res.report["mvm_vs_machine_min"] == pytest.approx(ratio, abs=1e-4)
    assert counts[0] < counts[1]  # the merged siblings share their mvmuls
    # counted per layer and per row tile, the bound would claim more than the merged program
    assert 64 * 2 + 2 * 64 + 2 * 64 + 1 > counts[0] >= b["mvm_instructions_min"]


def test_machine_bounds_hold_for_compiled_programs():
    """Both machine bounds are below what the simulator measures for real programs (NoC and
    host-memory dataflow, both modes)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent / "pim"))
    from toy import toy_resnet

    from raptor.compiler import compile_model
    from raptor.options import CompileOptions
    from raptor.sim import simulate

    arch = load_arch("arch-a")
    model = toy_resnet(hw=16, c=32)
    for opts in (
        CompileOptions(),
        CompileOptions(disable_noc_dataflow=True),
        CompileOptions(mode="throughput", pipeline=3),
    ):
        res = compile_model(model, arch, opts)
        rng = np.random.default_rng(0)
        ins = [
            {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}
            for _ in range(opts.pipeline)
        ]
        rep = simulate(res.program, arch, opts.mode, opts.pipeline, ins)
        prog_lb = res.report["machine_bound_program"]["latency_lb_program_ns"]
        assert 0 < res.report["bounds"]["latency_lb_machine_ns"] <= rep.latency_ns
        assert 0 < prog_lb <= rep.latency_ns
        if opts.pipeline > 1:  # every round repeats the program's work on the same cores
            assert rep.deadlines_ns[-1] >= opts.pipeline * prog_lb * 0.999


def test_machine_work_terms_hold_for_compiled_programs():
    """The core-work terms of the machine bound are what every program pays at least: summed over
    the cores, the simulated matrix time covers the fewest mvmuls with their input reads and
    output writes, and the vector time covers the partial sums of the row tiles; on a chip of 8
    cores the work term is the bound, and the program takes longer."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent / "pim"))
    from toy import toy_resnet

    from raptor.compiler import compile_model
    from raptor.options import CompileOptions
    from raptor.sim import simulate

    tiny = load_arch(str(Path(__file__).resolve().parent / "fixtures" / "arch-tiny.json"))
    model = toy_resnet(hw=16, c=48)  # 432-row convs: 4 row tiles, 3 partial sums per output
    rng = np.random.default_rng(0)
    x = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}]
    for arch in (tiny, load_arch("arch-a")):
        res = compile_model(model, arch, CompileOptions())
        b = res.report["bounds"]
        slots = arch.core_count * arch.core.rob_size
        assert b["mvm_write_ns"] > 0 and b["partial_sum_ns"] > 0
        rep = simulate(res.program, arch, "latency", 1, x)
        matrix = sum(c.matrix_busy_ns for c in rep.per_core)
        vector = sum(c.vector_busy_ns for c in rep.per_core)
        assert matrix >= (b["mvm_issue_ns"] + b["mvm_write_ns"]) * slots
        assert vector >= b["partial_sum_ns"] * slots
        assert b["latency_lb_machine_ns"] <= rep.latency_ns
    tb = compute_bounds(model, tiny)
    assert tb["latency_lb_machine_ns"] == tb["core_work_ns"]


def test_benchmark_joins_both_bounds(tmp_path):
    """benchmarks/run.py puts every case beside its ideal and machine bounds: the ratios are the
    measured figures over `raptor bounds`' own, and a case a compiler did not run stays empty."""
    import importlib.util
    import sys
    from pathlib import Path

    import onnx

    sys.path.insert(0, str(Path(__file__).resolve().parent / "pim"))
    from toy import toy_resnet

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("bench_run", root / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    model = toy_resnet(hw=16, c=48)
    (tmp_path / "toy").mkdir()
    onnx.save(model, tmp_path / "toy" / "model.onnx")
    rows = [
        {"model": "toy", "arch": "arch-a", "mode": "latency", "raptor_latency_ms": "0.5",
         "raptor_throughput_ips": "2000", "pimcomp_latency_ms": "", "pimcomp_throughput_ips": ""},
    ]  # fmt: skip
    run.join_bounds(rows, tmp_path)
    b = compute_bounds(tmp_path / "toy" / "model.onnx", load_arch("arch-a"))
    r = rows[0]
    assert float(r["machine_lb_ms"]) == pytest.approx(b["latency_lb_machine_ns"] / 1e6, rel=1e-5)
    assert float(r["raptor_latency_vs_machine"]) == pytest.approx(
        0.5 / (b["latency_lb_machine_ns"] / 1e6), rel=1e-3
    )
    assert float(r["raptor_throughput_vs_machine"]) == pytest.approx(
        2000 / b["throughput_ub_machine_per_s"], rel=1e-3
    )
    assert float(r["raptor_latency_vs_bound"]) == pytest.approx(
        0.5 / (b["latency_lb_budget_ns"] / 1e6), rel=1e-3
    )
    assert r["pimcomp_latency_vs_machine"] == r["pimcomp_throughput_vs_machine"] == ""
    assert r["raptor_mvm_vs_machine_min"] == ""  # no compile report in this out dir
    # with the case's compile report (the suite's layout), the program's mvmuls over the minimum
    from raptor.compiler import compile_to_dir
    from raptor.options import CompileOptions

    case = tmp_path / "toy" / "artifacts" / "arch-a" / "latency" / "raptor"
    report = compile_to_dir(model, load_arch("arch-a"), CompileOptions(), case)
    run.join_bounds(rows, tmp_path)
    ratio = report["mvm_vs_machine_min"]
    assert ratio >= 1 and rows[0]["raptor_mvm_vs_machine_min"] == f"{ratio:.4g}"


def test_bounds_command_prints_a_summary_or_json(tmp_path, capsys):
    """`raptor bounds` prints what sets each bound; --json prints every figure of compute_bounds."""
    import json
    import sys
    from pathlib import Path

    import onnx

    from raptor.cli import main

    sys.path.insert(0, str(Path(__file__).resolve().parent / "pim"))
    from toy import toy_resnet

    path = tmp_path / "toy.onnx"
    onnx.save(toy_resnet(hw=16, c=48), path)
    tiny = str(Path(__file__).resolve().parent / "fixtures" / "arch-tiny.json")
    b = compute_bounds(path, load_arch(tiny))
    assert main(["bounds", str(path), "--arch", tiny, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(b))
    assert main(["bounds", str(path), "--arch", tiny]) == 0
    out = capsys.readouterr().out
    # on 8 cores the core work sets the machine bound (test_machine_work_terms_hold_...)
    assert f"latency    >= {b['latency_lb_machine_ns'] / 1e6:.4f} ms, set by the core work" in out
    assert f"output writes {b['mvm_write_ns'] / 1e6:.4f}" in out
    assert f"partial sums {b['partial_sum_ns'] / 1e6:.4f}" in out
    assert out.startswith(f"bounds of {b['model']} on {b['arch']}")
