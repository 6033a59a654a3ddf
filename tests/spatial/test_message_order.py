"""The NoC message order (spatial/message_order.py, its compiled event loop in
message_order_kernel.py): every message made is exchanged exactly once, the order is the same
however often it runs and whether or not its event arrays had to grow, and an execution that
cannot finish raises OrderStuck naming core pairs."""

import dataclasses
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))
from toy import ARCH_TINY, toy_resnet  # noqa: E402

from raptor.arch import load_arch
from raptor.compiler import compile_model
from raptor.models import build_model
from raptor.options import CompileOptions
from raptor.spatial import message_order
from raptor.spatial import message_order_kernel as K
from raptor.spatial.ir import SyncToken, TokenKind


def _ordered_graph(monkeypatch, model, arch, opts):
    """The compile's last ordered graph and what its order returned."""
    seen = []
    order = message_order.order_messages

    def spy(a, sg):
        out = order(a, sg)
        seen.append((sg, out))
        return out

    monkeypatch.setattr(message_order, "order_messages", spy)
    res = compile_model(model, arch, opts)
    monkeypatch.setattr(message_order, "order_messages", order)
    sg, comm = seen[-1]
    return res, sg, comm


CASES = [
    ("vgg8-16-arch-a", lambda: build_model("vgg8", input_size=16), "arch-a"),
    ("toy-resnet-tiny", lambda: toy_resnet(hw=16, c=48), str(ARCH_TINY)),
]


@pytest.mark.parametrize("label,model,arch", CASES, ids=[c[0] for c in CASES])
def test_every_message_is_exchanged_once_and_the_order_repeats(monkeypatch, label, model, arch):
    """Sends and recvs pair up per core pair (count and bytes), and running the order again, also with event arrays too small at first
    (the FULL retry), gives the same messages, slots, estimate and layer windows."""
    arch = load_arch(arch)
    res, sg, comm = _ordered_graph(monkeypatch, model(), arch, CompileOptions())
    core = {n.id: n.core for n in sg.nodes}
    sends, recvs = Counter(), Counter()
    for (nid, _), msgs in comm.items():
        assert msgs.dtype == message_order.COMM_DTYPE
        for send, peer, _, size in msgs.tolist():
            if send:
                sends[core[nid], peer] += size
            else:
                recvs[peer, core[nid]] += size
    assert sends and sends == recvs
    # (the report's NoC bytes also count reduction trees' partial sums)
    assert 0 < sum(sends.values()) <= res.report["noc_bytes_per_inference"]
    est, timeline = sg.noc.estimated_ns, dict(sg.noc.timeline)
    assert est > 0 and all(a < b <= est for a, b in timeline.values())

    calls = []
    fresh = K.new_state

    def small_first(tb, cap):
        calls.append(cap)
        return fresh(tb, 4 if len(calls) == 1 else cap)

    monkeypatch.setattr(K, "new_state", small_first)
    again = message_order.order_messages(arch, sg)
    assert len(calls) == 2  # the first run filled its 4 events and ran again
    assert list(again) == list(comm)
    assert all(np.array_equal(again[key], comm[key]) for key in comm)
    assert sg.noc.estimated_ns == est and sg.noc.timeline == timeline


def test_a_wait_nobody_syncs_gets_the_order_stuck(monkeypatch):
    """A wait no sync ever satisfies blocks its core for good: the execution ends with cores
    unfinished and order_messages raises OrderStuck with the core pairs left waiting."""
    arch = load_arch("arch-a")
    opts = CompileOptions()
    _, sg, _ = _ordered_graph(monkeypatch, build_model("vgg8", input_size=16), arch, opts)
    first = sg.nodes_by_core()[min(n.core for n in sg.nodes)][0]
    token = SyncToken(first.core, TokenKind.WAIT, 10_000, 1, "never")
    before = dict(sg.tokens_before)
    before[first.id] = [*before.get(first.id, []), token]
    blocked = dataclasses.replace(sg, tokens_before=before)
    with pytest.raises(message_order.OrderStuck) as e:
        message_order.order_messages(arch, blocked)
    cores = {n.core for n in sg.nodes}
    assert e.value.pairs and all(p in cores and d in cores for p, d in e.value.pairs)
    assert any(first.core in pair for pair in e.value.pairs)


def test_one_flit_latency_for_every_pair(monkeypatch):
    """`flit_ns` replaces the mesh's link latencies in the estimate: free links end no later than
    the mesh's, slow links later, and every message is still exchanged once."""
    arch = load_arch("arch-a")
    _, sg, comm = _ordered_graph(
        monkeypatch, build_model("vgg8", input_size=16), arch, CompileOptions()
    )
    mesh = sg.noc.estimated_ns

    def sizes(c):
        return sorted(int(m["size"]) for msgs in c.values() for m in msgs)

    free = message_order.order_messages(arch, sg, 0.0)
    assert sg.noc.estimated_ns <= mesh and sizes(free) == sizes(comm)
    slow = message_order.order_messages(arch, sg, 1000.0)
    assert sg.noc.estimated_ns > mesh and sizes(slow) == sizes(comm)


def test_unshared_puts_every_unit_on_its_own_core(monkeypatch):
    """benchmarks/unshared.py: every replica's row group (with its pixel chunks) and every vector
    node on a core of its own, a NoC plan for those cores, and an estimate on one flit latency."""
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("unshared", root / "benchmarks" / "unshared.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    arch = load_arch("arch-a")
    _, sg, _ = _ordered_graph(
        monkeypatch, build_model("vgg8", input_size=16), arch, CompileOptions()
    )
    alone, units = mod.unshared(arch, sg)
    by_core = alone.nodes_by_core()
    assert len(by_core) == units > len(sg.nodes_by_core())
    for nodes in by_core.values():  # one unit per core: a row group's chunks, or one vector node
        assert len({(n.layer, n.replica, n.row_group, n.c0, n.r0) for n in nodes}) == 1
    flit = mod.mean_flit_ns(arch)
    assert arch.noc.base_latency_ns < flit < arch.noc.base_latency_ns + 26 * arch.noc.hop_latency_ns
    message_order.order_messages(arch, alone, flit)
    assert alone.noc.estimated_ns > 0
