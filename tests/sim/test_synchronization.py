"""THE key semantics: host memory is shared and values change at simulated time, so a consumer
that is not ordered after its producer (sync/wait) reads a stale or overwritten buffer."""

import numpy as np
from simprog import ld, mvmul, program, setbw, sldi, st, sync, wait

from raptor.sim import simulate
from raptor.validation.compare import compare_outputs

N = 64
IN, BUF, OUT = 0, 256, 512  # host element (= byte, element_bytes 1) addresses
rng = np.random.default_rng(5)
W0 = rng.standard_normal((N, N)).astype(np.float32)
W1 = rng.standard_normal((N, N)).astype(np.float32)
META = {
    "inputs": [{"name": "x", "address": IN, "shape": [1, N], "layout": "flat"}],
    "outputs": [{"name": "y", "address": OUT, "shape": [1, N], "layout": "flat"}],
}


def regs():
    return [sldi(1, IN), sldi(2, BUF), sldi(3, OUT), sldi(4, 1024), sldi(5, 2048)]


def two_core(tokens: bool, lifetime: bool = False, slow_reader: bool = False):
    # core 0: x -> x @ W0 -> BUF ; core 1: BUF -> (. @ W1) -> OUT
    c0 = [setbw(), *regs(), ld(0, 1, N), mvmul(4, 0, group=0)]
    if lifetime:
        c0.append(wait(1, 1))  # BUF free again (its reader of the previous round is done)
    c0.append(st(2, 4, N))
    if tokens:
        c0.append(sync(0, 1))
    c1 = [setbw(), *regs()]
    if lifetime:
        c1.append(sync(1, 0))
    if tokens:
        c1.append(wait(0, 1))
    if slow_reader:
        c1 += [mvmul(5, 4, group=0)] * 3
    c1 += [ld(0, 2, N), mvmul(4, 0, group=0), st(3, 4, N)]
    return program(
        [c0, c1],
        agm=[[1], [1]],
        weights=[W0, W1],
        agw=[[0], [1]],
        memory=np.zeros(1024),
        meta=META,
    )


def inputs(n):
    r = np.random.default_rng(9)
    return [{"x": r.standard_normal((1, N)).astype(np.float32)} for _ in range(n)]


def reference(xs):
    return [{"y": x["x"] @ W0 @ W1} for x in xs]


def test_synchronised_program_validates(arch):
    xs = inputs(1)
    r = simulate(two_core(tokens=True), arch, inputs=xs)
    v = compare_outputs(r.outputs, reference(xs))
    assert v.passed and v.status == "PASS", v.format()
    assert r.per_core[1].stall_sync_ns > 1000  # core 1 really waited for core 0


def test_unsynchronised_program_reads_stale_buffer(arch):
    xs = inputs(1)
    r = simulate(two_core(tokens=False), arch, inputs=xs)
    np.testing.assert_array_equal(r.outputs[0]["y"], 0)  # BUF still held its initial zeros
    v = compare_outputs(r.outputs, reference(xs))
    assert not v.passed and v.status == "FAIL"


def test_throughput_rounds_and_deadlines(arch):
    xs = inputs(3)
    r = simulate(
        two_core(tokens=True, lifetime=True), arch, mode="throughput", pipeline=3, inputs=xs
    )
    assert len(r.deadlines_ns) == 3 and r.deadlines_ns == sorted(r.deadlines_ns)
    assert r.latency_ns == r.deadlines_ns[0]
    assert r.throughput_per_s == 3 / (r.deadlines_ns[-1] * 1e-9)
    assert r.energy_per_inference_uj * 3e6 == r.energy_pj
    assert r.instructions_executed == 3 * sum(len(c) for c in two_core(True, True).cores)
    assert compare_outputs(r.outputs, reference(xs)).passed


def test_missing_lifetime_token_lets_next_round_overwrite(arch):
    xs = inputs(3)
    good = simulate(
        two_core(True, lifetime=True, slow_reader=True),
        arch,
        mode="throughput",
        pipeline=3,
        inputs=xs,
    )
    assert compare_outputs(good.outputs, reference(xs)).passed
    bad = simulate(
        two_core(True, lifetime=False, slow_reader=True),
        arch,
        mode="throughput",
        pipeline=3,
        inputs=xs,
    )
    v = compare_outputs(bad.outputs, reference(xs))
    assert not v.passed
    # round 0's output was computed from a later round's buffer
    assert not v.errors[0].passed
    assert bad.deadlines_ns[-1] <= good.deadlines_ns[-1]
