"""Summaries of a pim/ directory for `raptor inspect`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from raptor.isa.pimdir import read_pimdir
from raptor.isa.table import opcode_counts
from raptor.isa.target import fit_figures, resolve_target


def inspect_pimdir(path: str | Path, arch=None, force_target: bool = False) -> dict[str, Any]:
    """Summary of a pim/ directory, with its target record and how it fits the chip (the
    recorded one, or `arch`, which must not contradict the record unless force_target)."""
    path = Path(path)
    if (path / "pim" / "config.json").is_file():
        path = path / "pim"
    prog = read_pimdir(path, load_data=False)
    fit = None
    if arch is not None or prog.target is not None:
        rt = resolve_target(prog, arch, force=force_target)
        fit = {**fit_figures(prog, rt.arch, rt.record), "target_override": rt.override_lines()}
    per_core = []
    total: dict[str, int] = {}
    for i, stream in enumerate(prog.cores):
        counts = opcode_counts(stream)
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
        per_core.append(
            {
                "core": i,
                "instructions": len(stream),
                "array_groups": len(prog.array_group_map[i]),
                "crossbars": int(sum(prog.array_group_map[i])),
            }
        )
    files = {p.name: p.stat().st_size for p in sorted(path.iterdir()) if p.is_file()}
    return {
        "plan": _plan_summary(path.parent / "compile_report.json"),
        "dir": str(path),
        "core_cnt": prog.core_cnt,
        "active_cores": sum(1 for s in prog.cores if len(s)),
        "instructions": int(sum(len(s) for s in prog.cores)),
        "by_opcode": dict(sorted(total.items(), key=lambda kv: -kv[1])),
        "array_groups": int(sum(len(a) for a in prog.array_group_map)),
        "crossbars": int(sum(sum(a) for a in prog.array_group_map)),
        "max_core_instructions": int(max((len(s) for s in prog.cores), default=0)),
        "bytes": files,
        "total_bytes": int(sum(files.values())),
        "meta": {
            k: v
            for k, v in prog.meta.items()
            if k in ("compiler", "arch", "mode", "pipeline", "element_bytes")
        },
        "target": None if prog.target is None else prog.target.to_dict(),
        "fit": fit,
        "per_core": per_core,
    }


def _plan_summary(report_path: Path) -> dict[str, Any] | None:
    """The plan choice of a compile, from the compile_report.json beside pim/ (None without
    one): the kept plan's name, its estimate, the candidates compared, the finalists' simulated
    latencies, and the fewest mvmuls any program needs (raptor.bounds) with the program's ratio
    to it."""
    import json

    try:
        rep = json.loads(report_path.read_text())
    except (OSError, ValueError):
        return None
    est = rep.get("plan_estimates_ns") or {}
    kept = rep.get("plan_kept")
    return {
        "kept": kept,
        "estimate_ns": est.get(kept) if kept else None,
        "candidates": len(est),
        "finalists_ns": rep.get("plan_finalists_ns") or {},
        "mvm_instructions_min": (rep.get("bounds") or {}).get("mvm_instructions_min"),
        "mvm_vs_machine_min": rep.get("mvm_vs_machine_min"),
        "remainder_packs": rep.get("remainder_packs") or {},
        "mesh_placement": rep.get("mesh_placement"),
    }


def format_summary(s: dict[str, Any]) -> str:
    lines = [
        f"pim directory  {s['dir']}",
        f"cores          {s['core_cnt']} ({s['active_cores']} with instructions)",
        f"instructions   {s['instructions']} (largest core {s['max_core_instructions']})",
        f"array groups   {s['array_groups']} over {s['crossbars']} crossbars",
        f"bytes          {s['total_bytes']} ({', '.join(f'{k} {v}' for k, v in s['bytes'].items() if not k.startswith('core_'))})",
    ]
    fit = s.get("fit")
    if fit:
        lines[:0] = fit["target_override"]
    t = s.get("target")
    if t:
        lines.append(
            f"compiled for   {t['arch']} (parameters sha256 {t['arch_sha256'][:12]}), "
            f"{t['mode']} mode, pipeline {t['pipeline']}, {t['compiler']} {t['compiler_version']}"
        )
    else:
        lines.append("compiled for   unknown (no target.json): simulate/validate need --arch")
        if s["meta"]:
            lines.append("config meta    " + ", ".join(f"{k}={v}" for k, v in s["meta"].items()))
    if fit:
        peak = fit["local_memory_peak_bytes"]
        lines.append(
            f"fits           {fit['arch']}: {fit['cores']} of {fit['chip_cores']} cores "
            f"({fit['cores_with_instructions']} with instructions), at most "
            f"{fit['crossbars_per_core_max']} of {fit['chip_crossbars_per_core']} crossbars "
            "per core, local memory peak "
            + ("unknown" if peak is None else f"{peak}")
            + f" of {fit['chip_local_memory_bytes']} bytes"
        )
    plan = s.get("plan")
    if plan and plan["kept"]:
        line = f"plan           {plan['kept']}, the kept one of {plan['candidates']} candidates"
        if plan["estimate_ns"] is not None:
            line += f" (estimated {plan['estimate_ns'] / 1e6:.3f} ms)"
        lines.append(line)
        if plan["finalists_ns"]:
            sims = ", ".join(f"{k} {v / 1e6:.3f}" for k, v in plan["finalists_ns"].items())
            lines.append(f"finalists      simulated ms: {sims}")
    if plan and plan["mvm_vs_machine_min"] is not None:
        lines.append(
            f"mvmuls         {s['by_opcode'].get('mvmul', 0)} = {plan['mvm_vs_machine_min']:.3f}x the "
            f"fewest any program needs ({plan['mvm_instructions_min']}, raptor bounds)"
        )
    if plan and plan["remainder_packs"]:
        packs = plan["remainder_packs"]
        ks = sorted(set(packs.values()))
        lines.append(
            f"packed tiles   {len(packs)} layers' short last row tiles serve "
            f"{'/'.join(map(str, ks))} pixels per mvmul ({', '.join(list(packs)[:3])}"
            + (", ...)" if len(packs) > 3 else ")")
        )
    mp = plan.get("mesh_placement") if plan else None
    if mp:
        lines.append(
            f"mesh placement flits {mp['flit_latency_ns_before']:.1f} -> {mp['flit_latency_ns']:.1f} ns "
            f"each on average, switches busy {mp['switch_busy_ns_before'] / 1e6:.2f} -> "
            f"{mp['switch_busy_ns'] / 1e6:.2f} ms in all (cores renumbered by traffic)"
        )
    lines.append("by opcode:")
    width = max((len(k) for k in s["by_opcode"]), default=4)
    for k, v in s["by_opcode"].items():
        lines.append(f"  {k:<{width}}  {v:>10}  {100.0 * v / max(s['instructions'], 1):5.1f}%")
    return "\n".join(lines)


def stream_bytes(stream: np.ndarray) -> int:
    return int(stream.nbytes)
