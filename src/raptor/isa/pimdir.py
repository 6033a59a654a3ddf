"""The `pim/` artifact directory: config.json, core_<i>.pim|json, memory.bin, weights.bin.

`config.json` holds what pimsim-nn reads (`core_cnt`, `array_group_map`: crossbars per array
group per core) plus a `raptor` section that only our tools read:

* `element_bytes`: bytes per activation element (2 for 16-bit activations). Program addresses
  are byte addresses; element k of a memory lives at byte address k * element_bytes.
* `memory`: the host (global) memory image `memory.bin`, float32 little-endian, one float32
  value per element slot, so memory.bin holds `size_bytes / element_bytes` values.
* `weights`: `weights.bin` (float32) with `matrices` = [[offset, rows, cols], ...] (offset in
  values) and `array_groups` = {"core<i>": [matrix index per array group]}. An mvmul on group g
  multiplies the `rows` input elements at rs1 by matrix g (rows x cols) and writes `cols` elements.
* `inputs` / `outputs`: host buffers of the network's inputs and outputs (byte address, shape,
  layout), and `mode` / `pipeline` the program was compiled for.

`target.json` (`raptor.isa.target`) records what the program was compiled for (architecture name,
parameters and their hash, mode, pipeline, compiler and options); a directory another tool wrote
may lack it. Nothing else in the directory may start with `core_` (pimsim-nn rejects such names).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from raptor.errors import PimFormatError
from raptor.isa import pim_binary, pim_json
from raptor.isa.opcodes import Opcode
from raptor.isa.target_record import TARGET_FILE, TargetRecord, parse_record

CORE_FILE = re.compile(r"^core_([0-9]+)\.(json|pim)$")


@dataclass
class PimProgram:
    """Everything a pim/ directory holds, in memory."""

    cores: list[np.ndarray]
    array_group_map: list[list[int]]
    weight_matrices: list[np.ndarray] = field(default_factory=list)
    array_group_weights: list[list[int]] = field(default_factory=list)
    memory: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    meta: dict[str, Any] = field(default_factory=dict)
    target: TargetRecord | None = None  # target.json: what the program was compiled for

    @property
    def core_cnt(self) -> int:
        return len(self.cores)

    @property
    def element_bytes(self) -> int:
        return int(self.meta.get("element_bytes", 2))

    def verify(self) -> None:
        """Check the cross-references pimsim-nn and our simulator rely on."""
        if len(self.array_group_map) != self.core_cnt:
            raise PimFormatError(
                f"array_group_map has {len(self.array_group_map)} cores, program has {self.core_cnt}"
            )
        for i, stream in enumerate(self.cores):
            mv = stream["opcode"] == Opcode.MVMUL
            if mv.any():
                groups = stream["generic2"][mv]
                n = len(self.array_group_map[i])
                if groups.min() < 0 or groups.max() >= n:
                    bad = int(groups[(groups < 0) | (groups >= n)][0])
                    raise PimFormatError(
                        f"core {i}: mvmul uses array group {bad}, core has {n} array groups"
                    )
        if self.array_group_weights:
            for i, (ags, mats) in enumerate(zip(self.array_group_map, self.array_group_weights)):
                if len(ags) != len(mats):
                    raise PimFormatError(
                        f"core {i}: {len(ags)} array groups but {len(mats)} weight entries"
                    )
                for m in mats:
                    if not 0 <= m < len(self.weight_matrices):
                        raise PimFormatError(f"core {i}: weight matrix {m} does not exist")


def config_dict(prog: PimProgram) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "core_cnt": prog.core_cnt,
        "array_group_map": {
            f"core{i}": [int(x) for x in ags] for i, ags in enumerate(prog.array_group_map)
        },
    }
    raptor = dict(prog.meta)
    raptor.setdefault("format_version", 1)
    raptor.setdefault("element_bytes", 2)
    raptor["memory"] = {"file": "memory.bin", "dtype": "float32", "values": int(prog.memory.size)}
    offsets = []
    off = 0
    for m in prog.weight_matrices:
        offsets.append([off, int(m.shape[0]), int(m.shape[1])])
        off += m.size
    raptor["weights"] = {
        "file": "weights.bin",
        "dtype": "float32",
        "matrices": offsets,
        "array_groups": {
            f"core{i}": [int(x) for x in mats] for i, mats in enumerate(prog.array_group_weights)
        },
    }
    cfg["raptor"] = raptor
    return cfg


def write_pimdir(prog: PimProgram, out: str | Path, emit_json: bool = False) -> Path:
    """Write prog to directory `out` atomically: build in a temporary sibling, then rename."""
    prog.verify()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for i, stream in enumerate(prog.cores):
            if emit_json:
                pim_json.write(tmp / f"core_{i}.json", stream)
            else:
                pim_binary.write(tmp / f"core_{i}.pim", stream)
        prog.memory.astype("<f4", copy=False).tofile(tmp / "memory.bin")
        with open(tmp / "weights.bin", "wb") as f:
            for m in prog.weight_matrices:
                f.write(np.ascontiguousarray(m, dtype="<f4").tobytes())
        (tmp / "config.json").write_text(json.dumps(config_dict(prog), indent=1) + "\n")
        if prog.target is not None:
            (tmp / TARGET_FILE).write_text(json.dumps(prog.target.to_dict(), indent=1) + "\n")
        if out.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, trash / "old")
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def read_config(pimdir: str | Path) -> dict[str, Any]:
    pimdir = Path(pimdir)
    path = pimdir / "config.json"
    if not path.is_file():
        raise PimFormatError(f"{pimdir}: not a pim directory (no config.json)")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PimFormatError(f"{path}: malformed JSON ({e.msg} at line {e.lineno})") from None
    core_cnt = cfg.get("core_cnt")
    if not isinstance(core_cnt, int) or core_cnt < 1:
        raise PimFormatError(f"{path}: core_cnt must be a positive integer, got {core_cnt!r}")
    agm = cfg.get("array_group_map")
    if not isinstance(agm, dict):
        raise PimFormatError(f"{path}: missing or malformed array_group_map")
    for key, val in agm.items():
        if not isinstance(val, list) or any(not isinstance(x, int) or x < 1 for x in val):
            raise PimFormatError(
                f"{path}: array_group_map[{key!r}] must be a list of positive integers"
            )
    return cfg


def read_streams(pimdir: str | Path, core_cnt: int) -> list[np.ndarray]:
    """Read core_0..core_{n-1}, preferring .pim over .json as pimsim-nn does."""
    pimdir = Path(pimdir)
    found: dict[int, Path] = {}
    for entry in pimdir.iterdir():
        if not entry.name.startswith("core_"):
            continue
        m = CORE_FILE.match(entry.name)
        if not m:
            raise PimFormatError(f"{entry}: malformed per-core instruction filename")
        idx = int(m.group(1))
        if idx not in found or entry.suffix == ".pim":
            found[idx] = entry
    for i in range(core_cnt):
        if i not in found:
            raise PimFormatError(f"{pimdir}: missing core_{i}.pim or core_{i}.json")
    paths = [found[i] for i in range(core_cnt)]
    if all(p.suffix == ".pim" for p in paths):  # one array, no copies (pim_binary.read_many)
        return pim_binary.read_many(paths)
    return [pim_binary.read(p) if p.suffix == ".pim" else pim_json.read(p) for p in paths]


def read_pimdir(pimdir: str | Path, load_data: bool = True) -> PimProgram:
    """Load a pim/ directory (either instruction format); data files only with load_data."""
    pimdir = Path(pimdir)
    cfg = read_config(pimdir)
    n = cfg["core_cnt"]
    agm = [cfg["array_group_map"].get(f"core{i}", []) for i in range(n)]
    meta = dict(cfg.get("raptor", {}))
    prog = PimProgram(
        cores=read_streams(pimdir, n), array_group_map=agm, meta=meta, target=read_target(pimdir)
    )
    if load_data and "weights" in meta:
        w = meta["weights"]
        raw = _load_f32(pimdir / w.get("file", "weights.bin"))
        for off, rows, cols in w["matrices"]:
            if off + rows * cols > raw.size:
                raise PimFormatError(f"{pimdir}: weights.bin is shorter than its matrix table")
            prog.weight_matrices.append(raw[off : off + rows * cols].reshape(rows, cols))
        prog.array_group_weights = [w["array_groups"].get(f"core{i}", []) for i in range(n)]
    if load_data and "memory" in meta:
        mem = _load_f32(pimdir / meta["memory"].get("file", "memory.bin"))
        if mem.size != meta["memory"].get("values", mem.size):
            raise PimFormatError(
                f"{pimdir}: memory.bin holds {mem.size} values, config says {meta['memory']['values']}"
            )
        prog.memory = mem
    prog.verify()
    return prog


def read_target(pimdir: str | Path) -> TargetRecord | None:
    """The directory's target record, None when it has none (written by another tool)."""
    path = Path(pimdir) / TARGET_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PimFormatError(f"{path}: malformed JSON ({e.msg} at line {e.lineno})") from None
    return parse_record(data, str(path))


def _load_f32(path: Path) -> np.ndarray:
    """A float32 data file's values, mapped copy-on-write rather than read (the pages are read as
    they are touched, changes stay private); an empty or ragged file is read."""
    if not path.is_file():
        raise PimFormatError(f"{path}: missing data file")
    size = path.stat().st_size
    if size == 0 or size % 4:
        return np.fromfile(path, dtype="<f4").astype(np.float32, copy=False)
    return np.memmap(path, dtype="<f4", mode="c").view(np.ndarray).astype(np.float32, copy=False)
