"""Export an Arch as the arch config pimsim-nn's `ChipTest` reads, plus its NoC table.

`export_pimsim(arch, out_dir)` writes two files into `out_dir`:

* `config.json`: `{"chip_config": {...}, "sim_config": {...}}` with pimsim-nn's `Config.hpp`
  key names (`core_config`, `matrix_config`, `local_memory_config`, `global_memory_config`,
  `network_config`, `core_cnt`, `global_memory_switch_id`).
* `network.json`: `{"latency": {src: {dst: ns}}, "energy": {src: {dst: pJ}}}` per flit, for every
  ordered pair of distinct cores and every core <-> global-memory switch pair. pimsim-nn charges
  a missing pair 0 ns and 0 pJ silently, so the table must be complete. The values come from
  `raptor.arch.timing.link_latency_ns` / `link_energy_pj`, so arch-c's inter-chip links are
  ordinary table entries. Self pairs are left out, as in the fork's example tables.

`network_config.net_config_file_path` is relative to the config's folder, as pimsim-nn resolves
it. Facts used: pimsim-nn.md §6-§7 and the fork's `src/config/Config.hpp`.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from raptor.arch.loader import Arch, MemoryConfig
from raptor.arch.timing import link_energy_pj, link_latency_ns
from raptor.errors import ArchConfigError

CONFIG_FILE = "config.json"
NETWORK_FILE = "network.json"

# A short latency-mode timeout: pimsim-nn's default (60000 ms) turns a deadlock into hours of
# wall time (~0.125 s of wall per simulated ms).
DEFAULT_LATENCY_TIMEOUT_MS = 5.0
DEFAULT_SIM_TIME_MS = 1.0

# our CoreConfig field name -> pimsim-nn CoreConfig key, where they differ
_CORE_RENAMES = {
    "vector_reg_read_energy": "vector_reg_read_dynamic_energy",
    "vector_reg_write_energy": "vector_reg_write_dynamic_energy",
}


def _num(x: float | int | bool) -> float | int | bool:
    """Integral floats as ints, so the JSON reads like a hand-written pimsim config."""
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def _memory(mem: MemoryConfig) -> dict[str, Any]:
    return {k: _num(v) for k, v in asdict(mem).items()}


def mesh_layout(arch: Arch) -> tuple[int, int]:
    """The whole system as one mesh of (rows, cols) cores (chips tiled by chip_layout).

    pimsim-nn only checks that both are positive; the latencies come from the table."""
    return (
        arch.chip_layout[0] * arch.core_layout[0],
        arch.chip_layout[1] * arch.core_layout[1],
    )


def chip_config(arch: Arch, network_file: str = NETWORK_FILE) -> dict[str, Any]:
    core = arch.core
    matrix = {k: _num(v) for k, v in asdict(core.matrix).items()}
    matrix["xbar_size"] = list(core.matrix.xbar_size)
    core_cfg: dict[str, Any] = {}
    for key, value in asdict(core).items():
        if key in ("matrix", "local_memory"):
            continue
        core_cfg[_CORE_RENAMES.get(key, key)] = _num(value)
    core_cfg["matrix_config"] = matrix
    core_cfg["local_memory_config"] = _memory(core.local_memory)
    core_cfg["global_memory_switch_id"] = arch.noc.global_memory_switch_id
    return {
        "core_config": core_cfg,
        "global_memory_config": _memory(arch.global_memory),
        "network_config": {
            "bus_topology": arch.noc.topology,
            "bus_width": arch.noc.bus_width,
            "layout": list(mesh_layout(arch)),
            "net_config_file_path": network_file,
        },
        "core_cnt": arch.core_count,
        "global_memory_switch_id": arch.noc.global_memory_switch_id,
    }


def sim_config(
    mode: str,
    sim_time_ms: float = DEFAULT_SIM_TIME_MS,
    latency_timeout_ms: float = DEFAULT_LATENCY_TIMEOUT_MS,
    report_verbose_level: int = 0,
) -> dict[str, Any]:
    if mode not in ("latency", "throughput"):
        raise ArchConfigError(f"unknown pimsim-nn mode {mode!r} (latency or throughput)")
    if not sim_time_ms > 0 or not latency_timeout_ms > 0:
        raise ArchConfigError("sim_time_ms and latency_timeout_ms must be positive")
    if report_verbose_level not in (0, 1):
        # level 2 crashes ChipTest after the run ("invalid format string", pimsim-nn.md §9.7)
        raise ArchConfigError("report_verbose_level must be 0 or 1 (2 crashes pimsim-nn)")
    return {
        "sim_mode": 1 if mode == "latency" else 0,
        "sim_time": _num(float(sim_time_ms)),
        "latency_timeout_ms": _num(float(latency_timeout_ms)),
        "report_verbose_level": report_verbose_level,
    }


def network_table(arch: Arch) -> dict[str, dict[str, dict[str, float]]]:
    """Per-flit latency (ns) and energy (pJ) for every ordered pair of distinct endpoints
    (cores 0..core_count-1 and the global memory switch)."""
    gm = arch.noc.global_memory_switch_id
    ids = [gm, *range(arch.core_count)]
    latency: dict[str, dict[str, float]] = {}
    energy: dict[str, dict[str, float]] = {}
    for src in ids:
        lat_row: dict[str, float] = {}
        en_row: dict[str, float] = {}
        for dst in ids:
            if dst == src or (src == gm and dst == gm):
                continue
            lat_row[str(dst)] = _num(float(link_latency_ns(arch, src, dst)))
            en_row[str(dst)] = _num(float(link_energy_pj(arch, src, dst)))
        latency[str(src)] = lat_row
        energy[str(src)] = en_row
    return {"latency": latency, "energy": energy}


def export_pimsim(
    arch: Arch,
    out_dir: str | Path,
    mode: str = "latency",
    sim_time_ms: float = DEFAULT_SIM_TIME_MS,
    latency_timeout_ms: float = DEFAULT_LATENCY_TIMEOUT_MS,
    report_verbose_level: int = 0,
) -> Path:
    """Write `config.json` and `network.json` for pimsim-nn into out_dir; return the config path.

    mode "latency" -> sim_mode 1 (run until every core finishes, fail after latency_timeout_ms);
    "throughput" -> sim_mode 0 (loop every non-empty core for sim_time_ms)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {
        "chip_config": chip_config(arch, NETWORK_FILE),
        "sim_config": sim_config(mode, sim_time_ms, latency_timeout_ms, report_verbose_level),
    }
    (out / NETWORK_FILE).write_text(json.dumps(network_table(arch), separators=(",", ":")) + "\n")
    path = out / CONFIG_FILE
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    return path
