"""The per-core JSON instruction form read by pimsim-nn (`core_<i>.json`: an array of objects).

Keys per class follow `FIELD_MAP`; zero-valued optional keys are omitted on write (pimsim-nn
defaults missing keys to 0) except the ones pimsim-nn needs to see (e.g. mvmul's mbiw).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from raptor.errors import PimFormatError
from raptor.isa.opcodes import FIELD_MAP, OPCODE_CLASS, REGISTER_KEYS, InstClass, Opcode
from raptor.isa.table import INST_DTYPE

_ALWAYS = {
    "mbiw",
    "group",
    "relu",
    "ibiw",
    "obiw",
    "len",
    "size",
    "imm",
    "core",
    "event_register",
    "wait_value",
}


def to_objects(stream: np.ndarray) -> list[dict[str, Any]]:
    """Convert a stream to a list of JSON-ready instruction objects."""
    out: list[dict[str, Any]] = []
    cols = {name: stream[name].tolist() for name in INST_DTYPE.names}
    for i, code in enumerate(cols["opcode"]):
        op = Opcode(code)
        cls = OPCODE_CLASS[op]
        obj: dict[str, Any] = {"op": op.mnemonic}
        if "rd" in REGISTER_KEYS[cls]:
            obj["rd"] = cols["rd"][i]
        if "rs1" in REGISTER_KEYS[cls]:
            obj["rs1"] = cols["r1"][i]
        for slot, key in FIELD_MAP[cls].items():
            value = cols[slot][i]
            if key.startswith("offset."):
                obj.setdefault("offset", {"offset_select": 0, "offset_value": 0})[key[7:]] = value
            elif value != 0 or key in _ALWAYS:
                obj[key] = value
        if cls is InstClass.SYNC and obj.get("len") == 0:
            obj.pop("len")
        if cls is InstClass.WAIT and obj.get("len") == 0:
            obj.pop("len")
        out.append(obj)
    return out


def from_objects(objs: list[dict[str, Any]], source: str = "<json>") -> np.ndarray:
    """Convert JSON instruction objects to a stream; raises PimFormatError on bad input."""
    if not isinstance(objs, list):
        raise PimFormatError(f"{source}: per-core instruction file must be a JSON array")
    stream = np.zeros(len(objs), dtype=INST_DTYPE)
    for i, obj in enumerate(objs):
        if not isinstance(obj, dict) or "op" not in obj:
            raise PimFormatError(f"{source}: instruction {i} is not an object with an 'op' key")
        try:
            op = Opcode.from_mnemonic(str(obj["op"]))
        except KeyError:
            raise PimFormatError(
                f"{source}: unknown opcode {obj['op']!r} at instruction {i}"
            ) from None
        cls = OPCODE_CLASS[op]
        rec = stream[i]
        rec["opcode"] = int(op)
        rec["rd"] = _int(obj, "rd", i, source)
        rec["r1"] = _int(obj, "rs1", i, source)
        for slot, key in FIELD_MAP[cls].items():
            if key.startswith("offset."):
                rec[slot] = _int(obj.get("offset") or {}, key[7:], i, source)
            elif key == "len" and cls in (InstClass.SYNC, InstClass.WAIT):
                rec[slot] = _int(obj, "len", i, source) or _int(obj, "size", i, source)
            else:
                rec[slot] = _int(obj, key, i, source)
        if cls is InstClass.SCALAR and _int(obj, "rs2", i, source) != 0:
            raise PimFormatError(
                f"{source}: instruction {i} ({op.mnemonic}) uses rs2, which the binary .pim format cannot carry"
            )
    return stream


def _int(obj: dict[str, Any], key: str, i: int, source: str) -> int:
    value = obj.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PimFormatError(
            f"{source}: instruction {i}: field {key!r} must be an integer, got {value!r}"
        )
    if key in ("rd", "rs1") and not 0 <= value <= 255:
        raise PimFormatError(f"{source}: instruction {i}: register {key}={value} out of range")
    return value


def write(path: str | Path, stream: np.ndarray) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write("[\n")
        objs = to_objects(stream)
        f.write(",\n".join(json.dumps(o, separators=(",", ":")) for o in objs))
        f.write("\n]\n")
    os.replace(tmp, path)


def read(path: str | Path) -> np.ndarray:
    path = Path(path)
    try:
        objs = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PimFormatError(f"{path}: malformed JSON ({e.msg} at line {e.lineno})") from None
    return from_objects(objs, str(path))
