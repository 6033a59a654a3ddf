"""Local-memory allocation: a bump allocator per node (every node starts from address 0, so local
memory is reused node after node); overflow is a PassFailedError naming core, node and bytes."""

from __future__ import annotations

from raptor.errors import PassFailedError

ALIGN_BYTES = 32


def aligned(size_bytes: int) -> int:
    """`size_bytes` rounded up to the allocation alignment."""
    return -(-size_bytes // ALIGN_BYTES) * ALIGN_BYTES


class LocalAllocator:
    """Allocate byte ranges of one core's local memory for one node."""

    def __init__(self, capacity_bytes: int, core: int, what: str):
        self.capacity_bytes = capacity_bytes
        self.core = core
        self.what = what
        self.top = 0
        self.requests: list[tuple[str, int]] = []

    def alloc(self, size_bytes: int, label: str = "") -> int:
        addr = self.top
        self.top = addr + aligned(size_bytes)
        self.requests.append((label, size_bytes))
        if self.top > self.capacity_bytes:
            parts = ", ".join(f"{lbl or '?'} {b}" for lbl, b in self.requests)
            raise PassFailedError(
                f"local memory overflow on core {self.core}: {self.what} needs {self.top} bytes "
                f"({parts}), core has {self.capacity_bytes}"
            )
        return addr

    def free_bytes(self) -> int:
        return self.capacity_bytes - self.top
