"""The compiled engine (raptor.sim.compiled) against the Python reference engine
(raptor.sim.engine), field by field: latency, deadlines, energy, per-core statistics, NoC and
host counters, and output values bit for bit; on compiled models, throughput mode, hand-written
programs for the corner cases of the value semantics, and the errors and deadlock reports of bad
programs (same message text)."""

import numpy as np
import pytest
from simprog import arch_with, ld, mvmul, program, recv, send, setbw, sldi, st, sync, vop, wait

from raptor.arch import load_arch
from raptor.compiler import compile_to_dir
from raptor.errors import SimulationError
from raptor.isa.opcodes import Opcode
from raptor.isa.pimdir import read_pimdir
from raptor.isa.table import make
from raptor.models import save_model
from raptor.options import CompileOptions
from raptor.sim import simulate
from raptor.sim.compiled import LOCAL_POOL, CompiledEngine

FIELDS = (
    "mode",
    "pipeline",
    "latency_ns",
    "deadlines_ns",
    "throughput_per_s",
    "energy_pj",
    "energy_per_inference_uj",
    "power_mw",
    "instructions_executed",
    "cores_used",
    "inter_chip_bytes",
    "inter_chip_energy_pj",
    "host_bytes_per_inference",
    "noc_bytes_per_inference",
)


def assert_same(a, b):
    for f in FIELDS:
        assert getattr(a, f) == getattr(b, f), f
    assert a.energy.to_dict() == b.energy.to_dict()
    ta, tb = a.energy_timeline, b.energy_timeline
    assert (ta.width_ns, ta.static_mw, ta.bins) == (tb.width_ns, tb.static_mw, tb.bins)
    assert [c.to_dict() for c in a.per_core] == [c.to_dict() for c in b.per_core]
    assert len(a.outputs) == len(b.outputs)
    for oa, ob in zip(a.outputs, b.outputs):
        assert oa.keys() == ob.keys()
        for k in oa:
            assert oa[k].dtype == ob[k].dtype == np.float32
            np.testing.assert_array_equal(oa[k].view(np.uint32), ob[k].view(np.uint32))


def both(prog, arch=None, **kw):
    """The compiled engine (value pass, and values in the event loop) against the Python one."""
    a = simulate(prog, arch, engine="compiled", **kw)
    b = simulate(prog, arch, engine="python", **kw)
    assert_same(a, b)
    CompiledEngine.value_pass = False
    try:
        assert_same(simulate(prog, arch, engine="compiled", **kw), b)
    finally:
        CompiledEngine.value_pass = True
    return a


@pytest.fixture(scope="module")
def resnet18_small(tmp_path_factory):
    d = tmp_path_factory.mktemp("r18")
    model = save_model("resnet18", d / "r18.onnx", input_size=32)
    arch = load_arch("arch-b")
    compile_to_dir(model, arch, CompileOptions(mode="latency"), d / "out")
    return read_pimdir(d / "out" / "pim"), arch


def test_compiled_model_throughput(vgg8_tp):
    """vgg8 (send/recv, sync/wait, ld/st), two rounds streaming two inputs."""
    _, arch, prog, traced = vgg8_tp
    r = both(prog, arch, mode="throughput", pipeline=2)
    assert r.deadlines_ns == traced.deadlines_ns  # the traced Python run agrees too
    assert r.noc_bytes_per_inference > 0 and r.host_bytes_per_inference > 0


def test_compiled_model_latency_and_tensors(resnet18_small):
    prog, arch = resnet18_small
    a = simulate(prog, arch, engine="compiled", tensors=True)
    b = simulate(prog, arch, engine="python", tensors=True)
    assert_same(a, b)
    assert a.tensors.keys() == b.tensors.keys()
    for k in a.tensors:
        np.testing.assert_array_equal(a.tensors[k], b.tensors[k])


def test_value_pass_arena_compacts_and_grows(resnet18_small, monkeypatch):
    """With room for 64 elements of send payload, the value pass compacts its arena and grows it
    as payloads not yet received fill it: same results."""
    prog, arch = resnet18_small
    b = simulate(prog, arch, engine="python")
    monkeypatch.setattr(CompiledEngine, "arena_start", 64)
    assert_same(simulate(prog, arch, engine="compiled"), b)


def test_auto_picks_python_for_rob_and_trace(vgg8_tp):
    _, arch, prog, _ = vgg8_tp
    with pytest.raises(SimulationError, match="rob_size 1"):
        simulate(prog, arch, mode="throughput", pipeline=2, trace=True, engine="compiled")
    rob = arch_with(rob_size=4)
    p = program([[setbw(), sldi(1, 0), vop(Opcode.VRELU, 1, 1, 1, 8)]])
    with pytest.raises(SimulationError, match="rob_size 1"):
        simulate(p, rob, engine="compiled")
    assert simulate(p, rob).latency_ns == simulate(p, rob, engine="python").latency_ns


def _valued(cores, n_host=512, seed=0, out=(256, 128), **kw):
    """A program over random host memory whose output is host[out[0]:out[0]+out[1]]."""
    rng = np.random.default_rng(seed)
    mem = rng.standard_normal(n_host).astype(np.float32)
    mem[:4] = [-0.0, np.nan, 0.0, -1.0]
    meta = {"outputs": [{"name": "y", "shape": [out[1]], "address": out[0]}]}
    return program(cores, memory=mem, meta=meta, **kw)


def test_vector_values_and_overlaps(arch):
    """Every float vector op, in place and on overlapping ranges (numpy's copy semantics), relu
    and max of -0.0 and NaN, lmv/vmv overlaps, and the ops numpy computes (vsigm, vtanh, vavg,
    vvdmul, vsoftmax)."""
    body = [setbw(), sldi(1, 0), sldi(2, 0), ld(2, 1, 256)]  # local[0:256] = host[0:256]
    for op in (Opcode.VVADD, Opcode.VVSUB, Opcode.VVMUL, Opcode.VVMAX):
        body += [sldi(3, 8), sldi(4, 0), vop(op, 3, 4, 3, 40)]  # out overlaps both inputs
        body += [sldi(3, 100), vop(op, 3, 3, 3, 20)]  # in place
    body += [sldi(3, 0), sldi(4, 2), vop(Opcode.VRELU, 4, 3, 3, 30)]  # shifted relu
    body += [sldi(5, 3), vop(Opcode.VMV, 3, 4, 5, 20)]  # strided move onto its source
    body += [make(Opcode.LMV, rd=4, r1=3, generic3=50)]  # overlapping local move
    body += [sldi(6, 150), vop(Opcode.VSIGM, 6, 6, 6, 16), vop(Opcode.VTANH, 6, 6, 6, 16)]
    body += [vop(Opcode.VSOFTMAX, 6, 3, 3, 16), sldi(7, 2), vop(Opcode.VAVG, 6, 3, 7, 10)]
    body += [vop(Opcode.VVDMUL, 6, 3, 4, 33)]
    body += [make(Opcode.LLDI, rd=3, r2_or_imm=-7, generic3=4)]
    body += [sldi(8, 256), st(8, 2, 128)]  # host[256:384] = local[0:128]
    both(_valued([body]), arch)


def test_vector_operand_aliasing(arch):
    """Vector ops whose destination is exactly one operand, both or neither, relu in place and
    apart, vmv with stride 1 and 0 onto and off its source, and lmv both ways: the compiled
    loops pick a form for each case, numpy gives the reference."""
    body = [setbw(), sldi(1, 0), sldi(2, 0), ld(2, 1, 256)]  # local[0:256] = host[0:256]
    body += [sldi(3, 20), sldi(4, 120), sldi(5, 200), sldi(6, 1), sldi(7, 40), sldi(9, 0)]
    body += [vop(Opcode.VVADD, 3, 3, 4, 30), vop(Opcode.VVSUB, 4, 3, 4, 30)]  # d = a, d = b
    body += [vop(Opcode.VVMUL, 5, 3, 4, 30), vop(Opcode.VVMAX, 3, 4, 3, 30)]  # apart, d = b
    body += [vop(Opcode.VVMAX, 5, 5, 4, 30), vop(Opcode.VVMUL, 4, 4, 4, 30)]  # d = a, all
    body += [vop(Opcode.VRELU, 3, 3, 3, 30), vop(Opcode.VRELU, 5, 4, 4, 30)]  # in place, apart
    body += [vop(Opcode.VMV, 3, 7, 6, 30), vop(Opcode.VMV, 7, 3, 6, 30)]  # stride 1, d < a, d > a
    body += [vop(Opcode.VMV, 5, 3, 9, 20), vop(Opcode.VMV, 3, 7, 9, 20)]  # stride 0
    body += [make(Opcode.LMV, rd=3, r1=7, generic3=40), make(Opcode.LMV, rd=7, r1=3, generic3=40)]
    body += [sldi(8, 256), st(8, 2, 256)]  # host[256:512] = local[0:256]
    both(_valued([body], out=(256, 256)), arch)


@pytest.mark.parametrize("rows,cols", [(16, 8), (1, 8), (16, 1), (128, 64)])
def test_mvm_values(arch, rows, cols):
    """MVM with and without relu, output overlapping its input; shapes with numpy's special
    cases (one row: no BLAS, one column: a dot product)."""
    rng = np.random.default_rng(rows * 100 + cols)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    body = [setbw(), sldi(1, 0), sldi(2, 0), ld(2, 1, 256)]
    body += [sldi(3, 4), mvmul(3, 2, group=0, relu=1), sldi(4, 130), mvmul(4, 3, group=1)]
    body += [sldi(8, 256), st(8, 2, 128)]
    prog = _valued([body], agm=[[1, 1]], weights=[w, w], agw=[[0, 1]])
    both(prog, arch)


def test_dataflow_rounds_and_events(arch):
    """Two cores exchanging data by send/recv and sync/wait over three rounds."""
    c0 = [setbw(), sldi(1, 0), sldi(2, 0), ld(2, 1, 64), send(2, 1, 64), sync(3, 1), wait(2, 1)]
    c1 = [setbw(), sldi(1, 64), recv(1, 0, 64), wait(3, 1), vop(Opcode.VRELU, 1, 1, 1, 64)]
    c1 += [sldi(8, 256), st(8, 1, 64), sync(2, 0)]
    both(_valued([c0, c1], out=(256, 64)), arch, mode="throughput", pipeline=3, force_target=True)


def test_racing_host_accesses_keep_their_simulated_order(arch):
    """Two cores race on host memory with no sync. Core 0 stores 5s late, after which core 1
    loads them; core 1 stores 7s early, which core 0 loads later. Core 1's early load must see
    the host memory from before core 0's store, and core 0's load must see core 1's store:
    the value pass runs core 0 first, so it has to follow the order of simulated time rather
    than the order of the cores."""
    delay = [sldi(9, 400), *[vop(Opcode.VVADD, 9, 9, 9, 64) for _ in range(20)]]
    c0 = [setbw(), sldi(1, 0), make(Opcode.LLDI, rd=1, r2_or_imm=5, generic3=64), *delay]
    c0 += [sldi(3, 256), st(3, 1, 64)]  # late: host[256:320] = 5
    c0 += [sldi(2, 64), sldi(3, 320), ld(2, 3, 16), sldi(4, 512), st(4, 2, 16)]  # host[320:336]
    c1 = [setbw(), sldi(1, 0), sldi(3, 256), ld(1, 3, 64)]  # early: host[256:320] before 5s
    c1 += [sldi(5, 200), make(Opcode.LLDI, rd=5, r2_or_imm=7, generic3=16), sldi(6, 320)]
    c1 += [st(6, 5, 16), *delay, *delay, *delay]  # early: host[320:336] = 7
    c1 += [sldi(2, 64), ld(2, 3, 64), sldi(4, 384), st(4, 1, 128)]  # late: the 5s
    prog = _valued([c0, c1], n_host=600, out=(384, 144))
    r = both(prog, arch)
    y = r.outputs[0]["y"]
    np.testing.assert_array_equal(y[:64], prog.memory[256:320])  # before core 0's store
    assert (y[64:128] == 5).all() and (y[128:] == 7).all()


BAD = [
    [[setbw(0, 8), mvmul(1, 1)]],  # mvmul before setbw
    [[setbw(), mvmul(1, 1, group=5)]],  # no weight matrix
    [[setbw(), mvmul(1, 1, mbiw=0)]],  # mbiw 0
    [[setbw(), sldi(1, 2 * 10**6), mvmul(1, 1)]],  # local range of an MVM
    [[setbw(), vop(Opcode.VRELU, 1, 1, 1, 0)]],  # vector length 0
    [[setbw(), vop(Opcode.VVSLL, 1, 1, 1, 4)]],  # no float meaning
    [[setbw(), sldi(1, -8), vop(Opcode.VVADD, 1, 1, 1, 4)]],  # local range of a vector op
    [[setbw(), sync(1, 7)]],  # sync to a core that does not exist
    [[setbw(), sldi(1, -4), ld(1, 1, 8)]],  # local range of an ld
    [[setbw(), sldi(2, 2 * 10**6), ld(1, 2, 8)]],  # host range
    [[setbw(), send(1, 0, 8)]],  # send to itself
    [[setbw(), recv(1, 1, 8)], []],  # recv from a core without a program
    [[setbw(), send(1, 1, 8)], [setbw(), recv(1, 0, 16)]],  # sizes differ
    [[setbw(), wait(0, 1)], [setbw(), sync(1, 0), sync(1, 0)]],  # deadlock: wrong event
    [[setbw(), recv(1, 1, 8)], [setbw(), wait(0, 1)]],  # deadlock: recv unmatched
    [[setbw(), sldi(40, 0)]],  # register number
]


@pytest.mark.parametrize("cores", BAD)
def test_errors_are_the_same(arch, cores):
    w = [np.ones((4, 4), np.float32)]
    n = len(cores)
    prog = _valued(cores, agm=[[1]] * n, weights=w, agw=[[0]] * n)
    msgs = []
    for engine in ("compiled", "python"):
        with pytest.raises(SimulationError) as e:
            simulate(prog, arch, engine=engine)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]
    assert msgs[0].startswith(("core ", "deadlock at "))


def test_deadlock_report_names_the_blocked_instructions(arch):
    prog = _valued([[setbw(), wait(0, 1)], [setbw(), sync(1, 0), sync(1, 0)]])
    with pytest.raises(SimulationError) as e:
        simulate(prog, arch, engine="compiled")
    msg = str(e.value)
    assert msg.startswith("deadlock at ")
    assert "core 0 pc 1 round 0 waits on wait " in msg
    assert msg.endswith("[event register 0 = 0 < 1]")


def test_setbw_state_carries_into_the_next_round(arch):
    """A vector op before the stream's first setbw runs at width 0 (1 byte) in round 0 and at
    the previous round's last setbw in later rounds: different costs, same in both engines."""
    body = [
        sldi(1, 0),
        vop(Opcode.VRELU, 1, 1, 1, 64),
        setbw(16, 16),
        vop(Opcode.VRELU, 1, 1, 1, 64),
    ]
    r = both(_valued([body]), arch, mode="throughput", pipeline=3, force_target=True)
    f = r.per_core[0].finish_ns
    assert f[1] - f[0] > f[0]  # round 1's first relu reads and writes 2-byte elements


def test_local_moves_before_the_first_setbw_keep_their_cost(arch):
    """lldi and lmv before the first setbw cost by their size alone in every round (setbw
    changes only the mvmul and vector costs): the same in both engines."""
    body = [
        sldi(1, 0),
        sldi(2, 256),
        make(Opcode.LLDI, rd=1, r2_or_imm=3, generic3=128),
        make(Opcode.LMV, rd=2, r1=1, generic3=128),
        setbw(16, 16),
        vop(Opcode.VRELU, 1, 1, 1, 64),
    ]
    r = both(_valued([body]), arch, mode="throughput", pipeline=3, force_target=True)
    f = r.per_core[0].finish_ns
    assert f[2] - f[1] == f[1] - f[0]  # rounds 1 and 2 cost the same


def test_reused_local_memory_starts_zero(arch):
    """Local memories are kept between runs (compiled.LOCAL_POOL), zeroed where each core's
    instructions reached: a second program of the same shape that reads memory it never wrote reads
    zeros, wherever the first one wrote (ld, mvmul, vector op, lldi, lmv, recv; two cores; at
    both ends of local memory)."""
    w = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)
    c0 = [setbw(), sldi(1, 0), sldi(2, 0), ld(2, 1, 256), sldi(3, 300), mvmul(3, 2, group=0)]
    c0 += [sldi(4, 400), vop(Opcode.VVADD, 4, 2, 2, 64), sldi(5, 900)]
    c0 += [make(Opcode.LLDI, rd=5, r2_or_imm=3, generic3=40), sldi(6, 2000)]
    c0 += [make(Opcode.LMV, rd=6, r1=2, generic3=100), send(2, 1, 64)]
    top = arch.core.local_memory.memory_size - 48  # element_bytes 1: the last 48 elements
    c0 += [sldi(7, top), make(Opcode.LLDI, rd=7, r2_or_imm=2, generic3=48)]
    c1 = [setbw(), sldi(1, 5000), recv(1, 0, 64)]
    dirty = _valued([c0, c1], agm=[[1], []], weights=[w], agw=[[0], []])
    LOCAL_POOL._free.clear()
    simulate(dirty, arch, engine="compiled")
    assert len(LOCAL_POOL._free) == 1  # kept for the next run of this shape
    reads = [setbw(), sldi(8, 256), sldi(2, 0), st(8, 2, 128)]  # host[256:384] = local[0:128]
    reads += [sldi(8, 240), sldi(2, top + 32), st(8, 2, 16)]  # host[240:256]: the top 16
    for at, local in ((320, 300), (336, 400), (352, 900), (368, 2000)):
        reads += [sldi(8, at), sldi(2, local), st(8, 2, 16)]
    probe = [setbw(), sldi(8, 384), sldi(2, 5000), st(8, 2, 64)]  # host[384:448]
    clean = _valued([reads, probe], out=(240, 208))
    out = simulate(clean, arch, engine="compiled").outputs[0]["y"]
    np.testing.assert_array_equal(out, np.zeros(208, np.float32))
    assert_same(simulate(clean, arch, engine="compiled"), simulate(clean, arch, engine="python"))
    simulate(dirty, arch, engine="compiled")
    one = _valued([reads], out=(240, 144))  # one core: a view of the kept array's first row
    np.testing.assert_array_equal(
        simulate(one, arch, engine="compiled").outputs[0]["y"], np.zeros(144, np.float32)
    )
