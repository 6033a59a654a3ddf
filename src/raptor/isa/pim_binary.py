"""The binary `.pim` format of the HEAPLab pimsim-nn fork.

Header (12 bytes, little-endian): magic b"PIMB", u32 version (1), u32 record count; then `count`
records of 20 bytes laid out exactly as `INST_DTYPE`. Bytes after the last record are ignored, as
pimsim-nn ignores them.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from raptor.errors import PimFormatError
from raptor.isa.opcodes import Opcode
from raptor.isa.table import INST_DTYPE

MAGIC = b"PIMB"
VERSION = 1
HEADER = struct.Struct("<4sII")
MAX_OPCODE = max(int(op) for op in Opcode)


def encode(stream: np.ndarray) -> bytes:
    """Serialize a stream to `.pim` bytes."""
    stream = np.ascontiguousarray(stream, dtype=INST_DTYPE)
    check_opcodes(stream, "stream")
    return HEADER.pack(MAGIC, VERSION, len(stream)) + stream.tobytes()


def record_count(header: bytes, size: int, source: str = "<bytes>") -> int:
    """The record count a `.pim` header announces, checked against the byte size of the whole
    file; raises PimFormatError naming the defect."""
    if len(header) < HEADER.size:
        raise PimFormatError(
            f"{source}: truncated PIM binary header ({len(header)} bytes, need 12)"
        )
    magic, version, count = HEADER.unpack_from(header)
    if magic != MAGIC:
        raise PimFormatError(f"{source}: invalid PIM binary magic {magic!r} (expected b'PIMB')")
    if version != VERSION:
        raise PimFormatError(f"{source}: unsupported PIM binary version {version} (expected 1)")
    if size < HEADER.size + count * INST_DTYPE.itemsize:
        have = (size - HEADER.size) // INST_DTYPE.itemsize
        raise PimFormatError(
            f"{source}: truncated PIM binary: header announces {count} records, file holds {have}"
        )
    return count


def decode(data: bytes, source: str = "<bytes>") -> np.ndarray:
    """Parse `.pim` bytes into a stream; raises PimFormatError naming the defect."""
    count = record_count(data[: HEADER.size], len(data), source)
    stream = np.frombuffer(data, dtype=INST_DTYPE, count=count, offset=HEADER.size).copy()
    check_opcodes(stream, source)
    return stream


def check_opcodes(stream: np.ndarray, source: str) -> None:
    bad = stream["opcode"] > MAX_OPCODE
    if bad.any():
        i = int(np.argmax(bad))
        raise PimFormatError(f"{source}: unknown opcode {int(stream['opcode'][i])} at record {i}")


def write(path: str | Path, stream: np.ndarray) -> None:
    """Write a `.pim` file atomically (temporary name, then rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(encode(stream))
    os.replace(tmp, path)


def read(path: str | Path) -> np.ndarray:
    path = Path(path)
    return decode(path.read_bytes(), str(path))


def read_many(paths: list[Path]) -> list[np.ndarray]:
    """Read `.pim` files into consecutive views of one array, each file's records read straight
    into their place (no copy of the bytes), as `read` would read each."""
    sizes = [os.stat(p).st_size for p in paths]
    room = sum(max(0, sz - HEADER.size) // INST_DTYPE.itemsize for sz in sizes)
    whole = np.empty(room, INST_DTYPE)
    streams, at = [], 0
    for path, size in zip(paths, sizes):
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            count = record_count(f.read(HEADER.size), size, str(path))
            if at + count > room:  # the file grew since it was listed: read it on its own
                streams.append(read(path))
                continue
            stream = whole[at : at + count]
            got = f.readinto(memoryview(stream.view(np.uint8)))
            if got != stream.nbytes:
                raise PimFormatError(f"{path}: changed while read")
        check_opcodes(stream, str(path))
        streams.append(stream)
        at += count
    return streams
