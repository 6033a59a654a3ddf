"""Synchronization tokens: present, balanced, and absent when disabled."""

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))
from toy import ARCH_TINY, toy_resnet  # noqa: E402

from raptor.arch import load_arch
from raptor.compiler import compile_model
from raptor.isa.opcodes import Opcode
from raptor.options import CompileOptions


def _ops(prog):
    return Counter(int(op) for s in prog.cores for op in s["opcode"])


def _balanced(prog):
    """Every (core, event) receives exactly as many syncs per round as its waits consume."""
    sent, waited = Counter(), Counter()
    for i, s in enumerate(prog.cores):
        for r in s[s["opcode"] == Opcode.SYNC]:
            sent[(int(r["r2_or_imm"]), int(r["generic1"]))] += 1
        for r in s[s["opcode"] == Opcode.WAIT]:
            waited[(i, int(r["generic1"]))] += int(r["generic2"])
    return sent == waited


def _credits(prog):
    """syncs a core sends before its first ld (credits at program start: none with end credits)."""
    n = 0
    for s in prog.cores:
        lds = (s["opcode"] == Opcode.LD).nonzero()[0]
        head = s[: lds[0]] if len(lds) else s
        n += int((head["opcode"] == Opcode.SYNC).sum())
    return n


def _end_waits(prog):
    """waits that close a core's round (end-of-round credit waits)."""
    return sum(1 for s in prog.cores if len(s) and int(s["opcode"][-1]) == Opcode.WAIT)


def test_tokens_latency_and_throughput():
    arch = load_arch(str(ARCH_TINY))
    # host-memory dataflow: with the NoC dataflow this model keeps no cross-core host edge
    host = {"disable_noc_dataflow": True}
    lat = compile_model(toy_resnet(), arch, CompileOptions(**host)).program
    thr = compile_model(
        toy_resnet(), arch, CompileOptions(mode="throughput", pipeline=3, **host)
    ).program
    assert _ops(lat)[Opcode.SYNC] > 0 and _ops(lat)[Opcode.WAIT] > 0
    # throughput: credits sent after the last read, waited for at the end of the writer's round
    assert _credits(thr) == 0 and _credits(lat) == 0
    assert _end_waits(thr) > 0 and _end_waits(lat) == 0
    assert _balanced(lat) and _balanced(thr)
    for s in thr.cores:
        ev = s["generic1"][(s["opcode"] == Opcode.SYNC) | (s["opcode"] == Opcode.WAIT)]
        assert (ev < 32).all()


def test_tokens_absent_when_disabled():
    arch = load_arch(str(ARCH_TINY))
    opts = CompileOptions(mode="throughput", pipeline=3, disable_synchronization=True)
    prog = compile_model(toy_resnet(), arch, opts).program
    ops = _ops(prog)
    assert ops[Opcode.SYNC] == 0 and ops[Opcode.WAIT] == 0


def test_band_tokens_overlap_layers():
    """Row-band tokens: values match onnxruntime, and the second conv's root core finishes sooner
    after the first conv's core than its own busy time: it started before its producer finished."""
    import numpy as np
    from toy import reference, toy_convnet

    from raptor.sim import simulate

    arch = load_arch(str(ARCH_TINY))
    model = toy_convnet(hw=16, c=48)
    res = compile_model(
        model, arch, CompileOptions(disable_spatial_planning=True, disable_noc_dataflow=True)
    )
    assert res.report["band_tokens"] is True
    (p,) = res.report["layer_cores"]["conv3_n"]
    c = res.report["layer_cores"]["conv7_n"][0]  # root row group: waits on conv3's bands
    rng = np.random.default_rng(0)
    ins = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}]
    rep = simulate(res.program, arch, "latency", 1, ins)
    ref = reference(model, ins)[0]
    y, r = next(iter(rep.outputs[0].values())), next(iter(ref.values()))
    assert np.abs(y.reshape(r.shape) - r).max() <= 1e-3 * np.abs(r).max()
    pc, cc = rep.per_core[p], rep.per_core[c]
    busy = cc.matrix_busy_ns + cc.vector_busy_ns + cc.transfer_busy_ns
    assert cc.finish_ns[0] - pc.finish_ns[0] < busy
    s = res.program.cores[c]
    assert int((s["opcode"] == Opcode.WAIT).sum()) > 1  # one wait per band, not one per buffer


def test_band_tokens_off_when_sync_disabled():
    arch = load_arch(str(ARCH_TINY))
    res = compile_model(toy_resnet(), arch, CompileOptions(disable_synchronization=True))
    assert not res.report["band_tokens"] and _ops(res.program)[Opcode.WAIT] == 0
