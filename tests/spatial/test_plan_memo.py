"""The plan memo (raptor.spatial.plan_memo): a compile that finds its plan there writes the
program and report a full comparison writes, without comparing candidates again; the key leaves
out synchronization only."""

import json
import sys
from pathlib import Path

import onnx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pim"))
from toy import ARCH_TINY, toy_inception, toy_resnet  # noqa: E402

import raptor.compiler as compiler
from raptor.arch import load_arch
from raptor.frontend.cache import CachedModel
from raptor.options import CompileOptions
from raptor.spatial.plan_memo import PlanMemo, PlanRecipe, plan_memo

ARCH = load_arch(str(ARCH_TINY))


def _cached(tmp_path: Path, model, name: str) -> CachedModel:
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return CachedModel(path, tmp_path / "common", "code-v1")


def _program_bytes(res) -> list[bytes]:
    return [s.tobytes() for s in res.program.cores]


def _compile(model, opts):
    res = compiler.compile_model(model, ARCH, opts)
    return _program_bytes(res), res.report["plan_estimates_ns"]


@pytest.mark.parametrize(
    "toy,mode,pipeline", [(toy_resnet, "latency", 1), (toy_inception, "throughput", 2)]
)
def test_memo_hit_gives_the_program_of_a_full_comparison(
    tmp_path, monkeypatch, toy, mode, pipeline
):
    """Both toys at 8x8 keep a repacked plan: the hit replays its windows (and toy_resnet's
    latency plan, bought with 85 % of the crossbars and the rest on its slowest layer, its crossbar
    share and fill)."""
    model = _cached(tmp_path, toy(hw=8), toy.__name__)
    # the plans the docstring describes (no packed remainders, conv1 in one chunk per replica)
    one = {"pack_pixels": 1, "host_chunks": (1,)}
    base = CompileOptions(mode=mode, pipeline=pipeline, **one)
    nosync = CompileOptions(mode=mode, pipeline=pipeline, disable_synchronization=True, **one)
    fresh_nosync = _compile(model.path, nosync)  # a plain path: no memo
    _compile(model, base)  # compares the candidates, stores the choice
    memo = plan_memo(model, ARCH, nosync)
    recipe = memo.get()
    assert recipe is not None and memo.path.parent == tmp_path / "common" / "plans"
    assert recipe.windows is not None
    latency = mode == "latency"
    assert (recipe.crossbar_share, recipe.fill_slowest) == (
        (0.85, True) if latency else (1.0, False)
    )
    assert recipe.estimates == fresh_nosync[1]
    trials = []
    monkeypatch.setattr(compiler, "_trial", lambda *a: trials.append(a) or (0.0, None))
    hit = _compile(model, nosync)
    assert not trials  # no candidate compared again
    assert hit == fresh_nosync  # same program bytes, same report estimates


def test_the_key_leaves_out_synchronization_only(tmp_path):
    model = _cached(tmp_path, toy_resnet(), "r")
    keys = {
        plan_memo(model, ARCH, o).path.name
        for o in (CompileOptions(), CompileOptions(disable_synchronization=True))
    }
    assert len(keys) == 1
    others = [
        CompileOptions(mode="throughput", pipeline=2),
        CompileOptions(disable_window_packing=True),
        CompileOptions(disable_pixel_chunks=True),
        CompileOptions(disable_row_chunks=True),
    ]
    keys |= {plan_memo(model, ARCH, o).path.name for o in others}
    keys.add(plan_memo(model, load_arch("arch-a"), CompileOptions()).path.name)
    keys.add(plan_memo(CachedModel(model.path, model.cache_dir, "code-v2"), ARCH, CompileOptions()).path.name)  # fmt: skip
    assert len(keys) == 7
    assert plan_memo(model.path, ARCH, CompileOptions()) is None  # no frontend cache, no memo


def test_recipe_round_trip_and_unreadable_memo(tmp_path):
    windows = {0: (0.0, 1234.5), 7: (1e-3, 2.0 / 3.0)}
    est = {"chunked": 5.0, "chunked@0.85+fill/small2_repacked1": 4.25}
    r = PlanRecipe(True, windows, est, 0.85, True, 2, "chunked@0.85+fill/small2_repacked1")
    memo = PlanMemo(tmp_path / "plans" / "k.json")
    memo.put(r)
    assert memo.get() == r  # floats and layer keys come back exactly
    rows = PlanRecipe(True, None, est, 0.9, False, 0, "rows@0.9_repacked3", 0, True)
    memo.put(rows)
    assert memo.get() == rows and memo.get().row_chunks
    delay = PlanRecipe(True, windows, est, 0.9, False, 0, "rows@0.9_delay2", 0, True, True)
    memo.put(delay)
    assert memo.get() == delay and memo.get().order_delay
    split = PlanRecipe(True, windows, est, 0.9, False, 0, "rows@0.9/split32_repacked3", 0, True, False, 32)  # fmt: skip
    memo.put(split)
    assert memo.get() == split and memo.get().vector_split == 32
    host = PlanRecipe(True, windows, est, 0.9, False, 0, "rows@0.9/host2_repacked3", 0, True, False, 32, 2)  # fmt: skip
    memo.put(host)
    assert memo.get() == host and memo.get().host_chunks == 2
    memo.path.write_text("{not json")
    assert memo.get() is None
    memo.path.write_text(json.dumps({**r.to_json(), "format": 0}))
    assert memo.get() is None  # another format: compared again, never misread


@pytest.mark.parametrize(
    "toy,hw,mode,pipeline,extra",
    [(toy_resnet, 16, "latency", 1, 0), (toy_inception, 8, "throughput", 2, 1)],
)
def test_the_chosen_plan_is_ordered_again_only_for_tokens(
    monkeypatch, toy, hw, mode, pipeline, extra
):
    """Candidates are ordered without tokens; the choice runs its message order again only when
    synchronization added tokens (toy_inception p2: its concat slots), not for row bands alone."""
    from raptor.spatial import message_order

    calls = []
    order = message_order.order_messages
    monkeypatch.setattr(
        message_order, "order_messages", lambda a, sg: calls.append(1) or order(a, sg)
    )
    counts = []
    for nosync in (False, True):
        calls.clear()
        opts = CompileOptions(mode=mode, pipeline=pipeline, disable_synchronization=nosync)
        res = compiler.compile_model(toy(hw=hw), ARCH, opts)
        counts.append(len(calls))
        if not nosync:
            assert (res.report["instructions_by_opcode"].get("sync", 0) > 0) == bool(extra)
    assert counts[0] == counts[1] + extra


def test_a_repacking_round_that_places_alike_is_not_ordered(monkeypatch):
    """toy_resnet 16: window packing places every node where the first plan did, by the load in
    the windows and by layer-order delays alike (compiler._delay_repack), so neither round is
    ordered (the same placement runs the same execution) and both record the same estimate."""
    from raptor.spatial import message_order

    calls = []
    order = message_order.order_messages
    monkeypatch.setattr(
        message_order, "order_messages", lambda a, sg: calls.append(1) or order(a, sg)
    )
    # (the smaller crossbar shares buy the same replicas here; no fill share, finer vector split
    # or conv1 in chunks: one more plan each)
    opts = CompileOptions(fill_shares=(), vector_splits=(), host_chunks=(1,))
    res = compiler.compile_model(toy_resnet(hw=16), ARCH, opts)
    est = res.report["plan_estimates_ns"]
    same = est["contiguous"]
    assert est == {"contiguous": same, "contiguous_repacked1": same, "contiguous_delay1": same}
    assert len(calls) == 1


def test_a_cached_compile_reads_the_model_file_once(tmp_path, monkeypatch):
    """The frontend cache's key and the plan memo's key share one digest of the model file."""
    import raptor.frontend.cache as cache

    reads = []
    digest = cache.sha256_file
    monkeypatch.setattr(cache, "sha256_file", lambda p: reads.append(p) or digest(p))
    model = _cached(tmp_path, toy_resnet(), "r")
    compiler.compile_model(model, ARCH, CompileOptions())
    assert reads == [model.path]
    assert plan_memo(model, ARCH, CompileOptions()).get() is not None
