"""The on-disk frontend cache (raptor.frontend.cache): a cached graph is used only for the same
file bytes, the same frontend options and the same code, and compiling from it emits the same
program as compiling the file."""

import filecmp
import pickle

import numpy as np
import pytest

import raptor.frontend
from raptor.arch import load_arch
from raptor.compiler import compile_to_dir
from raptor.frontend import load_graph
from raptor.frontend.cache import CACHE_NAME, CachedModel
from raptor.models import save_model
from raptor.options import CompileOptions


def _same_graph(a, b) -> bool:
    return (
        a.dump() == b.dump()
        and list(a.constants) == list(b.constants)
        and all(np.array_equal(a.constants[k], b.constants[k]) for k in a.constants)
        and all(
            list(x.params) == list(y.params)
            and all(np.array_equal(x.params[k], y.params[k]) for k in x.params)
            for x, y in zip(a.nodes, b.nodes)
        )
    )


@pytest.fixture
def imports(monkeypatch):
    """Count the frontend imports the cache runs."""
    calls = []
    real = raptor.frontend.load_graph

    def counted(model, slim=False):
        calls.append((str(model), slim))
        return real(model, slim=slim)

    monkeypatch.setattr(raptor.frontend, "load_graph", counted)
    return calls


def test_cache_hit_only_for_same_bytes_options_and_code(tmp_path, imports):
    model = save_model("vgg8", tmp_path / "model.onnx", input_size=16)
    cache = tmp_path / "common"
    g = CachedModel(model, cache, "code-1").load()
    assert (cache / CACHE_NAME).is_file() and len(imports) == 1
    assert _same_graph(g, load_graph(model))
    assert _same_graph(CachedModel(model, cache, "code-1").load(), g)
    assert len(imports) == 1  # the second load is the cached graph
    CachedModel(model, cache, "code-2").load()  # other compiler sources
    assert len(imports) == 2
    CachedModel(model, cache, "code-2", slim=True).load()  # another frontend option
    assert imports[-1] == (str(model), True) and len(imports) == 3


def test_another_model_at_the_same_path_is_imported_again(tmp_path, imports):
    """The key is the file's content, not its name: a rebuilt model never gets the old graph."""
    path = tmp_path / "model.onnx"
    cache = tmp_path / "common"
    save_model("vgg8", path, input_size=16)
    vgg = CachedModel(path, cache, "c").load()
    save_model("resnet18", path, input_size=32)
    res = CachedModel(path, cache, "c").load()
    assert len(imports) == 2
    assert _same_graph(res, load_graph(path)) and not _same_graph(res, vgg)
    assert any(n.op == "Add" for n in res.nodes) and not any(n.op == "Add" for n in vgg.nodes)
    # same input size, another seed: same structure, other weights
    save_model("resnet18", path, input_size=32, seed=1)
    other = CachedModel(path, cache, "c").load()
    assert len(imports) == 3 and other.dump() == res.dump() and not _same_graph(other, res)


def test_a_graph_stored_under_another_key_is_not_used(tmp_path, imports):
    model = save_model("vgg8", tmp_path / "model.onnx", input_size=16)
    cache = tmp_path / "common"
    cached = CachedModel(model, cache, "c")
    g = cached.load()
    assert cached.holds_graph()
    with open(cache / CACHE_NAME, "wb") as f:  # a graph whose key is not this file's
        pickle.dump("another key", f)
        pickle.dump(g, f)
    assert not cached.holds_graph()
    cached.load()
    assert len(imports) == 2 and cached.holds_graph()
    (cache / CACHE_NAME).write_bytes(b"torn")  # unreadable: imported again, never an error
    assert not cached.holds_graph()
    assert _same_graph(cached.load(), g) and len(imports) == 3
    assert not CachedModel(model, cache, "other code").holds_graph()


@pytest.mark.parametrize(
    "opts",
    [
        CompileOptions(mode="latency", pipeline=1),
        CompileOptions(mode="throughput", pipeline=4, disable_spatial_planning=True),
        CompileOptions(mode="latency", pipeline=1, compiler="pimcomp"),
    ],
    ids=["raptor-latency", "raptor-no-plan-p4", "pimcomp"],
)
def test_program_from_cached_graph_is_byte_identical(tmp_path, opts):
    model = save_model("vgg8", tmp_path / "model.onnx", input_size=16)
    cached = CachedModel(model, tmp_path / "common", "c")
    arch = load_arch("arch-a")
    compile_to_dir(model, arch, opts, tmp_path / "plain")
    compile_to_dir(cached, arch, opts, tmp_path / "first")  # imports and stores
    compile_to_dir(cached, arch, opts, tmp_path / "cached")  # from the stored graph
    for out in ("first", "cached"):
        cmp = filecmp.dircmp(tmp_path / "plain" / "pim", tmp_path / out / "pim")
        assert cmp.left_list == cmp.right_list and not cmp.diff_files and not cmp.funny_files
        _, mismatch, errors = filecmp.cmpfiles(
            tmp_path / "plain" / "pim",
            tmp_path / out / "pim",
            cmp.common_files,
            shallow=False,
        )
        assert not mismatch and not errors
