"""Format rules pimsim-nn imposes on emitted programs."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from toy import ARCH_TINY, max_rel_err, reference, toy_inception, toy_resnet  # noqa: E402

from raptor.arch import load_arch
from raptor.compiler import compile_model
from raptor.isa.opcodes import OPCODE_CLASS, InstClass, Opcode
from raptor.options import CompileOptions
from raptor.pim.emit import FIRST_LOCAL, LAST_LOCAL, TEMPS, Block, Regs
from raptor.sim import simulate


@pytest.mark.parametrize("plan", [True, False])
@pytest.mark.parametrize("model", [toy_resnet, toy_inception])
def test_program_rules(model, plan):
    arch = load_arch(str(ARCH_TINY))
    opts = CompileOptions(mode="throughput", pipeline=3, disable_spatial_planning=not plan)
    prog = compile_model(model(), arch, opts).program
    prog.verify()
    assert prog.meta["compiler"] == "raptor" and prog.meta["pipeline"] == 3
    nonempty = [s for s in prog.cores if len(s)]
    assert nonempty
    for s in nonempty:
        assert s[0]["opcode"] == Opcode.SETBW and s[0]["generic1"] == arch.activation_bits
        assert (s["opcode"] != Opcode.NOP).all()
        assert (s["rd"] < 32).all() and (s["r1"] < 32).all()
        last = Opcode(int(s[-1]["opcode"]))
        assert OPCODE_CLASS[last] not in (InstClass.SCALAR, InstClass.SETBW, InstClass.NOP)
        mv = s[s["opcode"] == Opcode.MVMUL]
        assert (mv["r2_or_imm"] == arch.weight_bits).all()
        vec = np.isin(s["opcode"], [op for op, c in OPCODE_CLASS.items() if c == InstClass.VECTOR])
        assert (s["r2_or_imm"][vec] < 32).all() and (s["generic3"][vec] > 0).all()
    for ags in prog.array_group_map:
        assert sum(ags) <= arch.crossbars_per_core
    assert (
        prog.meta["inputs"][0]["layout"] == "NHWC" and prog.meta["outputs"][0]["layout"] == "flat"
    )


def test_replicas_share_weight_matrices():
    arch = load_arch(str(ARCH_TINY))
    prog = compile_model(toy_resnet(hw=16), arch, CompileOptions()).program
    used = [m for mats in prog.array_group_weights for m in mats]
    assert len(set(used)) == len(prog.weight_matrices) < len(used)


def test_line_buffer_cuts_host_loads():
    """Line-buffer input rows: each input row a node needs is loaded once (no per-pixel window
    loads), the report counts host bytes per layer, and values still match onnxruntime."""
    import numpy as np
    from toy import ARCH_TINY, max_rel_err, reference, toy_convnet

    from raptor.arch import load_arch
    from raptor.compiler import compile_model
    from raptor.options import CompileOptions
    from raptor.sim import simulate

    arch = load_arch(str(ARCH_TINY))
    model = toy_convnet(hw=16, c=8)
    opts = CompileOptions(disable_spatial_planning=True)
    rng = np.random.default_rng(3)
    ins = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}]
    ref = reference(model, ins)
    res = compile_model(model, arch, opts)
    out = simulate(res.program, arch, "latency", 1, ins).outputs
    assert max_rel_err(next(iter(out[0].values())), next(iter(ref[0].values()))) < 1e-3
    lines = res.report["host_load_bytes_per_layer"]
    no_lines = CompileOptions(disable_spatial_planning=True, disable_line_buffer=True)
    per_pixel = compile_model(model, arch, no_lines).report["host_load_bytes_per_layer"]
    # 3x3 stride 1: 16x16x3 input rows once (+ bias) vs 3 kernel rows per sliding pixel (~3x);
    # 3x3 stride 2: each row once vs 3 of every 2 rows per output row (~1.5x)
    assert lines["conv3_n"] * 2.5 < per_pixel["conv3_n"]
    assert lines["conv7_n"] * 1.4 < per_pixel["conv7_n"]
    assert res.report["host_load_bytes"] == sum(lines.values())


@pytest.mark.parametrize(
    "op,k,s,p,hw,ceil",
    [("MaxPool", 3, 1, 1, 8, 0), ("AveragePool", 3, 1, 1, 8, 0), ("MaxPool", 3, 2, 0, 15, 1)],
)
def test_pool_line_buffer_values_and_loads(op, k, s, p, hw, ceil):
    """Pools over a line buffer: values match onnxruntime (padding excluded from max/avg counts,
    ceil-mode edges) and a stride-1 3x3 pool loads its input once (not 9 times)."""
    import math

    from toy import ARCH_TINY, OnnxBuilder, max_rel_err, reference

    from raptor.sim import simulate

    arch = load_arch(str(ARCH_TINY))
    b = OnnxBuilder(0)
    x = b.conv("x", 3, 8)
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
    if ceil:
        attrs["ceil_mode"] = 1
    o = (math.ceil if ceil else math.floor)((hw + 2 * p - k) / s) + 1
    model = b.model([1, 3, hw, hw], b.node(op, [x], **attrs), [1, 8, o, o])
    res = compile_model(model, arch, CompileOptions(disable_spatial_planning=True))
    rng = np.random.default_rng(1)
    ins = [{"x": rng.standard_normal((1, 3, hw, hw)).astype(np.float32)}]
    out = simulate(res.program, arch, "latency", 1, ins).outputs[0]
    ref = reference(model, ins)[0]
    assert max_rel_err(next(iter(out.values())), next(iter(ref.values()))) < 1e-3
    loads = {k2: v for k2, v in res.report["host_load_bytes_per_layer"].items() if "pool" in k2}
    if s == 1:
        (v,) = loads.values()
        assert v <= hw * hw * 8 * 2 + 8 * 2 * 16  # input once (+ the avg reciprocals)


def test_address_temporaries_never_overwrite_an_operand_the_block_set():
    """Once a node's preset address registers run out, Regs.loc loads an address into a
    temporary right before the instruction. A block that set a temporary itself (a pool's row
    operands, a producer's T_DST) keeps it: loc takes another one, and never one that an earlier
    operand of the same instruction holds; with none left it raises instead of miscompiling."""
    regs = Regs([])
    for i in range(LAST_LOCAL - FIRST_LOCAL + 1):
        regs.loc(1000 + i)  # every preset register taken
    b = Block(1)
    b.add(Opcode.SLDI, rd=TEMPS[2], r2_or_imm=64)
    b.add(Opcode.SLDI, rd=TEMPS[3], r2_or_imm=128)
    got = [regs.loc(addr, b) for addr in (4096, 8192)]  # rd and r1 of one instruction
    assert set(got) == {TEMPS[0], TEMPS[1]}
    b.add(Opcode.VVMAX, rd=got[0], r1=got[1], r2_or_imm=TEMPS[3], generic3=8)
    # the instruction's operands are loaded as asked: replay the block's sldis
    values = {}
    for op, f in b.slots:
        if op == Opcode.SLDI:
            values[f["rd"]] = f["r2_or_imm"]
        else:
            assert (values[f["rd"]], values[f["r1"]], values[f["r2_or_imm"]]) == (4096, 8192, 128)
    assert values[TEMPS[2]] == 64
    regs.loc(1, b)
    regs.loc(2, b)
    with pytest.raises(RuntimeError, match="no free temporary register"):
        regs.loc(3, b)  # a third operand: both free temporaries hold this instruction's operands


def test_pool_rows_cut_finely_keep_their_values():
    """A NoC max pool over 96-pixel rows cut into 24 segments of two pixels has more distinct
    row addresses than preset registers, so its row operands share the temporaries with the
    addresses Regs.loc loads (this miscompiled until loc kept the block's own temporaries)."""
    model = toy_resnet(hw=96, c=8)
    arch = load_arch("arch-a")
    res = compile_model(model, arch, CompileOptions(row_segments=32))
    assert any(name.startswith("maxpool") for name in res.report["noc_dataflow"]["producer_layers"])
    rng = np.random.default_rng(1)
    ins = [{model.graph.input[0].name: rng.standard_normal((1, 3, 96, 96)).astype(np.float32)}]
    rep = simulate(res.program, arch, "latency", 1, ins)
    ref = reference(model, ins)[0]
    assert all(
        max_rel_err(np.asarray(rep.outputs[0][k]).reshape(v.shape), v) <= 1e-3
        for k, v in ref.items()
    )


def test_message_slot_records_alternate_address_and_transfer():
    """A message slot (spatial.message_order.COMM_DTYPE rows) becomes, per message, an sldi of
    its local address into the node's register and a send or recv through that register, peer
    and size as given; an empty or absent slot gives no records."""
    from types import SimpleNamespace

    from raptor.isa.opcodes import Opcode
    from raptor.pim.lowering_noc import message_records
    from raptor.spatial.message_order import COMM_DTYPE

    msgs = np.array([(True, 3, 4096, 64), (False, 7, 128, 32)], COMM_DTYPE)
    comm = {(5, 0): msgs, (5, 1): msgs[:0]}
    ctx = SimpleNamespace(sg=SimpleNamespace(noc=SimpleNamespace(comm=comm)))
    records = message_records(ctx, SimpleNamespace(id=5), 9)
    (out,) = records(0)
    assert out["opcode"].tolist() == [Opcode.SLDI, Opcode.SEND, Opcode.SLDI, Opcode.RECV]
    assert out["rd"].tolist() == [9, 9, 9, 9] and out["r1"].tolist() == [0, 0, 0, 0]
    assert out["r2_or_imm"].tolist() == [4096, 3, 128, 7]
    assert out["generic3"].tolist() == [0, 64, 0, 32]
    assert records(1) == [] and records(2) == [] and records(None) == []


@pytest.mark.parametrize("fold", [False, True])
def test_global_pool_reduces_its_rows_as_they_arrive(fold):
    """A whole-row pool step whose rows come in its message slot (a global average pool fed
    over the NoC) adds each received piece into its row sum right after the recv, after first
    taking in what came earlier in the core's program: run on a local memory, the records leave
    the sum of the rows (with `fold`, of every pixel of them, per channel), and after the last
    recv only that message's elements remain to add."""
    from types import SimpleNamespace

    from raptor.pim.lowering_lines import reduce_on_arrival
    from raptor.pim.lowering_noc import message_records, message_rows
    from raptor.spatial.message_order import COMM_DTYPE

    eb, width, c = 2, 3, 4  # 3 pixels of 4 channels per row, 2-byte elements
    row_bytes = width * c * eb
    row_at = {0: 1000, 1: 1100, 2: 1200}
    dst = 2000
    px = c * eb
    # pixel 0 of every row came earlier (another node's slot); pixels 1-2 come here, rows
    # interleaved, one message of two pixels for row 2; one send in between
    msgs = np.array(
        [
            (False, 7, 1000 + px, px),
            (False, 8, 1100 + px, px),
            (True, 9, 5000, 16),
            (False, 7, 1000 + 2 * px, px),
            (False, 6, 1200 + px, 2 * px),
            (False, 8, 1100 + 2 * px, px),
        ],
        COMM_DTYPE,
    )
    ctx = SimpleNamespace(eb=eb, sg=SimpleNamespace(noc=SimpleNamespace(comm={(5, 0): msgs})))
    node = SimpleNamespace(id=5)
    rows = message_rows(ctx, node, 0, row_at, row_bytes)
    assert rows.tolist() == [0, 1, -1, 0, 2, 1]
    assert message_rows(ctx, node, 0, {3: 3000}, row_bytes) is None  # no message of its rows
    recs = np.concatenate(
        reduce_on_arrival(
            ctx,
            node,
            0,
            message_records(ctx, node, TEMPS[3])(0),
            rows,
            row_at,
            row_bytes,
            dst,
            Opcode.VVADD,
            c if fold else 0,
        )
    )
    rng = np.random.default_rng(0)
    data = {iy: rng.standard_normal(width * c) for iy in row_at}
    mem: dict[int, float] = {}  # element address -> value
    for iy, base in row_at.items():  # what came before the slot: pixel 0 of each row
        for e in range(c):
            mem[base + e * eb] = data[iy][e]
    regs: dict[int, int] = {}
    work_after_last_recv = 0
    last_recv = int(np.flatnonzero(recs["opcode"] == Opcode.RECV)[-1])
    for i, r in enumerate(recs):
        op, rd, r1, imm, g3 = (int(r[k]) for k in ("opcode", "rd", "r1", "r2_or_imm", "generic3"))
        if op == Opcode.SLDI:
            regs[rd] = imm
        elif op == Opcode.RECV:
            m = msgs[(msgs["addr"] == regs[rd]) & ~msgs["send"]][0]
            iy = max(y for y, b in row_at.items() if b <= m["addr"])
            e0 = (int(m["addr"]) - row_at[iy]) // eb
            for e in range(int(m["size"]) // eb):
                mem[int(m["addr"]) + e * eb] = data[iy][e0 + e]
        elif op == Opcode.LMV:
            for e in range(g3 // eb):
                mem[regs[rd] + e * eb] = mem[regs[r1] + e * eb]
        elif op == Opcode.VVADD:
            for e in range(g3):
                mem[regs[rd] + e * eb] = mem[regs[r1] + e * eb] + mem[regs[imm] + e * eb]
            work_after_last_recv += g3 if i > last_recv else 0
    want = sum(data.values())
    want = want.reshape(width, c).sum(axis=0) if fold else want
    got = np.array([mem[dst + e * eb] for e in range(len(want))])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert work_after_last_recv == c  # the last message's one pixel of row 1


def test_constants_load_once_per_core_between_nodes():
    """A core loads each constant slice its nodes read (bias slices, an average pool's 1/count
    vectors) once per round into its constant area (raptor.pim.constants): never inside a node
    or again per band, always in a run of constant loads that ends where a node begins, some of
    them before a later node than the core's first; values still match onnxruntime."""
    from raptor.pim.emit import R_CONST

    arch = load_arch(str(ARCH_TINY))
    model = toy_inception(hw=8)
    res = compile_model(model, arch, CompileOptions())
    prog = res.program
    spans = prog.meta["layer_spans"]["cores"]
    hoisted = 0
    for core, s in enumerate(prog.cores):
        if f"core{core}" not in spans:
            continue
        starts = [pc for pc, layer in spans[f"core{core}"] if layer >= 0]
        op = s["opcode"]
        loads = np.flatnonzero((op == Opcode.LD) & (s["r1"] == R_CONST))
        keys = [
            (int(s["r2_or_imm"][p - 2]) + int(s["generic2"][p]), int(s["generic3"][p]))
            for p in loads
        ]
        assert len(set(keys)) == len(keys), f"core {core} loads a constant slice twice"
        for p in loads:
            assert op[p - 2] == Opcode.SLDI and s["rd"][p - 2] == R_CONST
            nxt = min(q for q in starts if q > p)  # the node the run of loads precedes
            run = s[p + 1 : nxt]
            assert ((run["opcode"] == Opcode.LD) & (run["r1"] == R_CONST)).sum() * 3 == len(run)
            hoisted += nxt != starts[0]
    assert hoisted > 0
    rng = np.random.default_rng(5)
    ins = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}]
    ref = reference(model, ins)
    out = simulate(prog, arch, "latency", 1, ins).outputs
    assert max_rel_err(next(iter(out[0].values())), next(iter(ref[0].values()))) < 1e-3


def test_core_whose_nodes_do_not_fit_beside_its_constant_area_loads_in_prologues(monkeypatch):
    """A core whose nodes overflow local memory beside its constant area is lowered again
    without one: the program is the one every core gets when no core has an area (each node
    loads its constants in its prologue), and it still computes the model."""
    import raptor.pim.codegen as codegen
    from raptor.pim import constants
    from raptor.pim.emit import R_CONST

    arch = load_arch(str(ARCH_TINY))
    model = toy_inception(hw=8)
    real = constants.const_area

    def no_room(ctx, core, nodes):  # the area takes all of local memory
        return dict.fromkeys(real(ctx, core, nodes), 0)

    monkeypatch.setattr(codegen, "const_area", no_room)
    squeezed = compile_model(model, arch, CompileOptions()).program
    monkeypatch.setattr(codegen, "const_area", lambda ctx, core, nodes: {})
    plain = compile_model(model, arch, CompileOptions()).program
    assert len(squeezed.cores) == len(plain.cores)
    for a, b in zip(squeezed.cores, plain.cores):
        assert a.tobytes() == b.tobytes()
    in_prologue = sum(
        int(((s["opcode"] == Opcode.LD) & (s["r1"] == R_CONST)).sum()) for s in plain.cores
    )
    assert in_prologue > 0
    rng = np.random.default_rng(6)
    ins = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}]
    out = simulate(squeezed, arch, "latency", 1, ins).outputs
    ref = reference(model, ins)
    assert max_rel_err(next(iter(out[0].values())), next(iter(ref[0].values()))) < 1e-3
