"""Instruction streams as numpy structured arrays whose fields are the 20-byte `.pim` record.

A stream is built in whole blocks (`make` broadcasts scalars and arrays), never one Python object
per instruction. `INST_DTYPE.itemsize == 20` and `stream.tobytes()` is exactly the record area of
a `.pim` file.
"""

from __future__ import annotations

import numpy as np

from raptor.isa.opcodes import Opcode

INST_DTYPE = np.dtype(
    [
        ("opcode", "u1"),
        ("rd", "u1"),
        ("r1", "u1"),
        ("flags", "u1"),
        ("r2_or_imm", "<i4"),
        ("generic1", "<i4"),
        ("generic2", "<i4"),
        ("generic3", "<i4"),
    ]
)
assert INST_DTYPE.itemsize == 20

FIELDS = INST_DTYPE.names
# one record as 20 opaque bytes: copies, joins and repeats of these skip the per-field dtype checks
RECORD = np.dtype((np.void, INST_DTYPE.itemsize))


def empty(n: int = 0) -> np.ndarray:
    """A zeroed stream of n records."""
    return np.zeros(n, dtype=INST_DTYPE)


def make(
    opcode: Opcode | int | np.ndarray,
    n: int | None = None,
    *,
    rd=0,
    r1=0,
    r2_or_imm=0,
    generic1=0,
    generic2=0,
    generic3=0,
) -> np.ndarray:
    """Build a block of records; every argument may be a scalar or an array of length n."""
    if (
        n is None
        and isinstance(opcode, int)
        and type(rd) is int
        and type(r1) is int
        and type(r2_or_imm) is int
        and type(generic1) is int
        and type(generic2) is int
        and type(generic3) is int
    ):  # one record of Python ints, built in one call (out-of-range values raise, as field
        # assignment below does)
        return np.array([(opcode, rd, r1, 0, r2_or_imm, generic1, generic2, generic3)], INST_DTYPE)
    values = (
        ("opcode", opcode),
        ("rd", rd),
        ("r1", r1),
        ("r2_or_imm", r2_or_imm),
        ("generic1", generic1),
        ("generic2", generic2),
        ("generic3", generic3),
    )
    if n is None:
        sizes = {np.size(v) for _, v in values if not _scalar(v) and np.ndim(v) > 0}
        if len(sizes) > 1:
            raise ValueError(f"inconsistent block lengths {sorted(sizes)}")
        n = sizes.pop() if sizes else 1
    out = np.zeros(n, dtype=INST_DTYPE)
    for key, value in values:
        if _scalar(value) and value == 0:
            continue  # the records already hold it
        out[key] = value
    return out


def _scalar(v) -> bool:
    return isinstance(v, (int, np.integer))


def concat(blocks: list[np.ndarray]) -> np.ndarray:
    """Concatenate blocks into one stream (an empty list gives an empty stream)."""
    if not blocks:
        return empty(0)
    # joined as opaque 20-byte records: np.concatenate (and slice assignment) of the structured
    # dtype compare and promote the field layout once per block, which cost more than the copy
    if all(b.dtype == INST_DTYPE for b in blocks):
        return np.concatenate([b.view(RECORD) for b in blocks]).view(INST_DTYPE)
    out = np.empty(sum(len(b) for b in blocks), dtype=INST_DTYPE)
    at = 0
    for b in blocks:
        out[at : at + len(b)] = b
        at += len(b)
    return out


def joined(streams: list[np.ndarray]) -> np.ndarray:
    """All streams back to back as one stream: a view, without a copy, when they are consecutive
    views of one array (as raptor.isa.pim_binary.read_many reads them), else `concat`."""
    parts = [s for s in streams if len(s)]
    whole = parts[0].base if parts else None
    if not isinstance(whole, np.ndarray) or whole.dtype != INST_DTYPE or whole.ndim != 1:
        return concat(streams)
    start = at = parts[0].ctypes.data
    for s in parts:
        if s.base is not whole or s.dtype != INST_DTYPE or not s.flags.c_contiguous:
            return concat(streams)
        if s.ctypes.data != at:
            return concat(streams)
        at += s.nbytes
    first = (start - whole.ctypes.data) // INST_DTYPE.itemsize
    return whole[first : first + (at - start) // INST_DTYPE.itemsize]


def interleave(blocks: list[np.ndarray]) -> np.ndarray:
    """Interleave equal-length blocks record by record: a0 b0 c0 a1 b1 c1 ...

    This is how per-lane instruction sequences (e.g. sldi, sldi, mvmul for every output pixel)
    are laid out without a Python loop over lanes.
    """
    if not blocks:
        return empty(0)
    n = len(blocks[0])
    if any(len(b) != n for b in blocks):
        raise ValueError("interleave needs blocks of equal length")
    out = np.empty(n * len(blocks), dtype=INST_DTYPE)
    for i, b in enumerate(blocks):  # strided copies: no per-block dtype promotion (see concat)
        out[i :: len(blocks)] = b
    return out


def opcode_counts(stream: np.ndarray) -> dict[str, int]:
    """Instruction count per mnemonic, for reports."""
    codes, counts = np.unique(stream["opcode"], return_counts=True)
    return {Opcode(int(c)).mnemonic: int(k) for c, k in zip(codes, counts)}
