"""Fuzzing the import gate: mutated copies of a small valid model (bit flips, truncations,
attribute changes), each compiled by `raptor compile` (Raptor and pimcomp in turn) on the tiny
architecture. Every run must end, within a time limit, in either a program the simulator runs
or one `raptor: error:` line naming the file, with no output directory; never an internal error
or a traceback. Seeded, so a failure names a run that can be replayed."""

from __future__ import annotations

import contextlib
import io
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper
from tiny_models import tiny_model

from raptor.arch import load_arch
from raptor.cli import main
from raptor.isa.pimdir import read_pimdir
from raptor.sim import simulate

ARCH = str(Path(__file__).resolve().parents[1] / "fixtures" / "arch-tiny.json")
RUNS = 600
SEED = 2026
RUN_LIMIT_S = 20
BASE = tiny_model().SerializeToString()

# attributes each op of the tiny model lowers, and a few it does not know
OWN = {
    "Conv": ["kernel_shape", "strides", "pads", "dilations", "group", "auto_pad"],
    "Relu": ["alpha"],
    "MaxPool": ["kernel_shape", "strides", "pads", "dilations", "ceil_mode", "storage_order"],
    "Flatten": ["axis"],
    "Gemm": ["transA", "transB", "alpha", "beta"],
}
FOREIGN = ["axis", "group", "transB", "count_include_pad", "epsilon"]


def _value(rng: np.random.Generator, name: str):
    if name == "auto_pad":
        return str(rng.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "BOGUS"]))
    if name in ("alpha", "beta", "epsilon"):
        return float(rng.choice([0.0, -1.0, 0.5, 2.5, np.inf, np.nan]))
    if name in ("kernel_shape", "strides", "pads", "dilations"):
        return [int(v) for v in rng.integers(-2, 6, int(rng.choice([1, 2, 2, 2, 3, 4, 4])))]
    return int(rng.integers(-2, 6))


def mutate(rng: np.random.Generator, k: int) -> tuple[bytes, str]:
    """Run k's model bytes and a description of the mutation."""
    kind = k % 3
    if kind == 0:
        b = bytearray(BASE)
        flips = []
        for _ in range(int(rng.integers(1, 9))):
            i = int(rng.integers(len(b)))
            b[i] ^= 1 << int(rng.integers(8))
            flips.append(i)
        return bytes(b), f"bit flips at bytes {flips}"
    if kind == 1:
        n = int(rng.integers(1, len(BASE)))
        return BASE[:n], f"truncated to {n} bytes"
    m = onnx.ModelProto()
    m.ParseFromString(BASE)
    node = m.graph.node[int(rng.integers(len(m.graph.node)))]
    names = OWN[node.op_type] if rng.random() < 0.85 else FOREIGN
    name = names[int(rng.integers(len(names)))]
    value = _value(rng, name)
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.append(helper.make_attribute(name, value))
    return m.SerializeToString(), f"{node.name}.{name} = {value!r}"


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


def test_mutated_models_end_in_a_program_or_one_line(tmp_path):
    rng = np.random.default_rng(SEED)
    arch = load_arch(ARCH)
    outcomes = {"program": 0, "error": 0}
    old = signal.signal(signal.SIGALRM, _alarm)
    t0 = time.perf_counter()
    try:
        for k in range(RUNS):
            data, what = mutate(rng, k)
            run = tmp_path / f"run{k}"
            run.mkdir()
            model, out = run / "m.onnx", run / "out"
            model.write_bytes(data)
            compiler = ("raptor", "pimcomp")[k % 2]
            argv = ["compile", str(model), "--arch", ARCH, "--out", str(out)]
            err = io.StringIO()
            label = f"run {k} ({what}, {compiler})"
            signal.alarm(RUN_LIMIT_S)
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    rc = main([*argv, "--compiler", compiler])
                if rc == 0:
                    prog = read_pimdir(out / "pim")
                    report = simulate(prog, arch)
                    assert report.outputs and all(o for o in report.outputs), label
            except _Timeout:
                raise AssertionError(f"{label} took more than {RUN_LIMIT_S} s") from None
            finally:
                signal.alarm(0)
            lines = err.getvalue().splitlines()
            if rc == 0:
                outcomes["program"] += 1
                assert lines == [], f"{label}: {err.getvalue()}"
            else:
                outcomes["error"] += 1
                assert rc == 2, f"{label}: exit {rc}: {err.getvalue()}"
                assert len(lines) == 1, f"{label}: {err.getvalue()}"
                assert lines[0].startswith(f"raptor: error: {model}: "), f"{label}: {lines[0]}"
                assert not out.exists(), label
            shutil.rmtree(run)
    finally:
        signal.signal(signal.SIGALRM, old)
    # the mix exercised both outcomes (a mutation that always broke or never broke the model
    # would not test the gate)
    assert outcomes["program"] >= 20 and outcomes["error"] >= 400, outcomes
    print(f"{RUNS} runs in {time.perf_counter() - t0:.1f} s: {outcomes}")
