import pytest

from raptor.errors import PassFailedError
from raptor.pim.memalloc import LocalAllocator


def test_alloc_aligns_and_reuses_nothing_within_a_node():
    a = LocalAllocator(1024, 3, "node 7")
    assert a.alloc(10, "x") == 0
    assert a.alloc(10, "y") == 32
    assert a.free_bytes() == 1024 - 64


def test_overflow_names_core_and_bytes():
    a = LocalAllocator(1024, 3, "node 7 (conv1)")
    a.alloc(1000, "window")
    with pytest.raises(
        PassFailedError, match=r"core 3: node 7 \(conv1\) needs 1056 bytes .* core has 1024"
    ):
        a.alloc(20, "psum")
