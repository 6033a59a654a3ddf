"""The target record `pim/target.json`: what a pim/ directory was compiled for (the checks that
use it: raptor.isa.target).

Both compilers attach a `TargetRecord` to the program they emit and `write_pimdir` writes it as
`target.json` (pimsim-nn reads only `config.json` and `core_<i>.*`, so it never sees this file):

* `arch`: the architecture's name; `arch_params`: its full parameters (the architecture file's
  JSON object, so a custom file need not be at hand later); `arch_sha256`: sha256 of those
  parameters without `name` and `description` (two files with the same chip hash the same);
* `mode`, `pipeline`: what the program was compiled for;
* `compiler` (`raptor` | `pimcomp`), `compiler_version`, `options` (every `CompileOptions` field);
* `local_memory_peak_bytes` and `local_memory_peak_core`: the largest local-memory footprint of
  any core, which the loader cannot recover from the instructions.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from raptor.arch.loader import Arch, parse_arch
from raptor.errors import PimFormatError

if TYPE_CHECKING:
    from raptor.options import CompileOptions


TARGET_FILE = "target.json"
RECORD_VERSION = 1
OVERRIDE_HINT = "recompile for the requested target or pass --force-target"


def arch_params(arch: Arch) -> dict[str, Any]:
    """The architecture as its JSON object (what `parse_arch` reads back), without `source`."""
    d = asdict(arch)
    d.pop("source", None)
    if d.get("inter_chip") is None:
        d.pop("inter_chip", None)
    return json.loads(json.dumps(d))  # tuples -> lists, exactly the file's form


def arch_sha256(arch: Arch) -> str:
    """sha256 of the chip's parameters: everything but `name`, `description` and `source`."""
    d = {k: v for k, v in arch_params(arch).items() if k not in ("name", "description")}
    return hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class TargetRecord:
    """Contents of target.json (see the module docstring)."""

    arch: str
    arch_sha256: str
    arch_params: dict[str, Any]
    mode: str
    pipeline: int
    compiler: str
    compiler_version: str
    options: dict[str, Any] = field(default_factory=dict)
    local_memory_peak_bytes: int | None = None
    local_memory_peak_core: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"version": RECORD_VERSION, **asdict(self)}

    def load_arch(self) -> Arch:
        """The recorded architecture, rebuilt from its parameters (and checked against its hash)."""
        arch = parse_arch(self.arch_params, f"{self.arch} (recorded in {TARGET_FILE})")
        if arch_sha256(arch) != self.arch_sha256:
            raise PimFormatError(
                f"{TARGET_FILE}: the recorded parameters of {self.arch} do not match their "
                f"sha256 {self.arch_sha256[:12]}"
            )
        return arch

    @property
    def summary(self) -> str:
        """One line: arch (hash), mode, pipeline, compiler."""
        return (
            f"{self.arch} (parameters sha256 {self.arch_sha256[:12]}), {self.mode} mode, "
            f"pipeline {self.pipeline}, {self.compiler} {self.compiler_version}"
        )


def make_record(
    arch: Arch, opts: CompileOptions, local_memory_peak_bytes: list[int] | int | None
) -> TargetRecord:
    """The record of a program compiled for `arch` under `opts`."""
    import raptor

    peak = core = None
    if isinstance(local_memory_peak_bytes, list) and local_memory_peak_bytes:
        peak = int(max(local_memory_peak_bytes))
        core = int(local_memory_peak_bytes.index(max(local_memory_peak_bytes)))
    elif isinstance(local_memory_peak_bytes, int):
        peak = local_memory_peak_bytes
    return TargetRecord(
        arch=arch.name,
        arch_sha256=arch_sha256(arch),
        arch_params=arch_params(arch),
        mode=opts.mode,
        pipeline=int(opts.pipeline),
        compiler=opts.compiler,
        compiler_version=raptor.__version__,
        options={k: list(v) if isinstance(v, tuple) else v for k, v in asdict(opts).items()},
        local_memory_peak_bytes=peak,
        local_memory_peak_core=core,
    )


def parse_record(data: Any, where: str) -> TargetRecord:
    """A TargetRecord from target.json's object; a malformed record is a PimFormatError."""

    def bad(msg: str) -> PimFormatError:
        return PimFormatError(f"{where}: {msg}")

    if not isinstance(data, dict):
        raise bad("must hold a JSON object")
    if data.get("version") != RECORD_VERSION:
        raise bad(f"unsupported version {data.get('version')!r} (expected {RECORD_VERSION})")
    for key, typ in (
        ("arch", str),
        ("arch_sha256", str),
        ("arch_params", dict),
        ("mode", str),
        ("pipeline", int),
        ("compiler", str),
        ("compiler_version", str),
    ):
        if not isinstance(data.get(key), typ) or isinstance(data.get(key), bool):
            raise bad(f"{key} missing or not a {typ.__name__}")
    if data["mode"] not in ("latency", "throughput"):
        raise bad(f"mode must be latency or throughput, got {data['mode']!r}")
    if data["pipeline"] < 1:
        raise bad(f"pipeline must be >= 1, got {data['pipeline']}")
    for key in ("local_memory_peak_bytes", "local_memory_peak_core"):
        if data.get(key) is not None and not isinstance(data[key], int):
            raise bad(f"{key} must be an integer or null")
    return TargetRecord(
        arch=data["arch"],
        arch_sha256=data["arch_sha256"],
        arch_params=data["arch_params"],
        mode=data["mode"],
        pipeline=data["pipeline"],
        compiler=data["compiler"],
        compiler_version=data["compiler_version"],
        options=dict(data.get("options") or {}),
        local_memory_peak_bytes=data.get("local_memory_peak_bytes"),
        local_memory_peak_core=data.get("local_memory_peak_core"),
    )
