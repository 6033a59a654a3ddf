"""Run a pim/ directory on the reference simulator, pimsim-nn's `ChipTest`, and return its figures
in our report shape (`raptor.sim.report.SimReport`).

`run_pimsim(pim_dir, arch, mode, pipeline)`:

1. stages the directory (symlinks to `config.json` and the `core_<i>.pim|json` files only) and
   exports the arch with `raptor.arch.pimsim_export.export_pimsim` into a temporary folder;
2. runs `ChipTest <staged dir> <arch config> --instruction-mode=directory` under a wall-clock
   limit, with a short `latency_timeout_ms` (pimsim-nn's default of 60 s simulated costs hours
   of wall time on a deadlock; ours is 1000 ms and the wall limit stops the run sooner);
3. parses the report (pimsim-nn.md §8). Latency mode: latency (ms, 10 digits), average power (mW),
   total energy (pJ). Throughput mode: pimsim-nn loops every non-empty core for `sim_time` ms and
   counts completed rounds (the minimum over non-empty cores); "output count" and "throughput"
   are printed with 3 significant digits, so the throughput is taken as 1000 / "average latency"
   (sim_time / rounds, 10 digits) and the rounds as round(sim_time / average latency).

Throughput mode picks `sim_time` so that at least `max(pipeline, min_rounds)` rounds complete:
a first guess from a latency run of the same directory (when it finishes), else 1 ms, then
reruns with a longer `sim_time` while too few rounds complete.

The binary is `binary`, else `$PIMSIM_NN_BIN`. Every failure is one `SimulationError` line: a
missing binary, ChipTest's own `Simulation error:` line, a crash signal, or the wall limit.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raptor.arch.loader import Arch
from raptor.arch.pimsim_export import export_pimsim
from raptor.errors import SimulationError
from raptor.sim.energy import EnergyCounter
from raptor.sim.report import CoreStats, SimReport

ENV_VAR = "PIMSIM_NN_BIN"
DEFAULT_WALL_LIMIT_S = 600.0
# above any suite latency (vgg8 on arch-a runs 30 ms simulated); the wall limit bounds a deadlock
DEFAULT_LATENCY_TIMEOUT_MS = 1000.0
DEFAULT_MIN_ROUNDS = 16
CORE_FILE = re.compile(r"^core_([0-9]+)\.(json|pim)$")

_NUM = r"([-+0-9.eE]+|inf|nan)"
_PATTERNS = {
    "latency_ms": re.compile(r"^\s*- latency:\s+" + _NUM + r" ms\s*$", re.M),
    "power_mw": re.compile(r"^\s*- average power:\s+" + _NUM + r" mW\s*$", re.M),
    "energy_pj": re.compile(r"^\s*- average energy:\s+" + _NUM + r" pJ\s*$", re.M),
    "energy_per_round_pj": re.compile(r"^\s*- average energy:\s+" + _NUM + r" pJ/it\s*$", re.M),
    "output_count": re.compile(r"^\s*- output count:\s+" + _NUM + r" samples\s*$", re.M),
    "throughput_printed": re.compile(r"^\s*- throughput:\s+" + _NUM + r" samples/s\s*$", re.M),
    "average_latency_ms": re.compile(r"^\s*- average latency:\s+" + _NUM + r" ms\s*$", re.M),
    "sim_wall_s": re.compile(r"simulator execution time:\s*" + _NUM + r"s"),
}
_CORE_BLOCK = re.compile(r"^Core (\d+) Information\n((?:  - .*\n?)*)", re.M)
_CORE_FINISH = re.compile(r"- finish time:\s+" + _NUM + r" ms")
_CORE_ROUNDS = re.compile(r"- rounds:\s+(\d+) samples")


@dataclass
class PimsimReport(SimReport):
    """A SimReport filled from a ChipTest run; `pimsim` keeps the parsed raw fields."""

    pimsim: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["engine"] = "pimsim-nn"
        d["pimsim"] = dict(self.pimsim)
        return d

    def format(self) -> str:
        p = self.pimsim
        head = f"pimsim-nn ({self.mode}"
        if self.mode == "throughput":
            head += f", sim_time {p.get('sim_time_ms')} ms, {p.get('rounds')} rounds"
        head += f", {p.get('wall_s', 0.0):.2f} s wall)"
        lines = [
            *self.target_override,
            head,
            f"  latency              {self.latency_ns / 1e3:14.3f} us"
            + ("  (sim_time / rounds)" if self.mode == "throughput" else ""),
            f"  throughput           {self.throughput_per_s:14.2f} inferences/s",
            f"  energy               {self.energy_pj / 1e6:14.3f} uJ total, "
            f"{self.energy_per_inference_uj:.3f} uJ/inference",
            f"  power                {self.power_mw:14.3f} mW",
        ]
        return "\n".join(lines)


def find_binary(binary: str | Path | None = None) -> Path:
    """The ChipTest executable: `binary`, else $PIMSIM_NN_BIN; a clear error when absent."""
    raw = str(binary) if binary else os.environ.get(ENV_VAR, "")
    if not raw:
        raise SimulationError(
            f"pimsim-nn binary not given: pass --pimsim-bin PATH or set {ENV_VAR} "
            "(build it with shared/tools/build-pimsim-nn.sh DEST)"
        )
    path = Path(raw).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise SimulationError(f"pimsim-nn binary {path} does not exist or is not executable")
    return path


def stage_pimdir(pim_dir: str | Path, dest: str | Path) -> Path:
    """Symlink config.json and the per-core instruction files of pim_dir into dest."""
    src = Path(pim_dir).resolve()
    if not (src / "config.json").is_file():
        if (src / "pim" / "config.json").is_file():
            src = src / "pim"
        else:
            raise SimulationError(f"{pim_dir}: not a pim directory (no config.json)")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    os.symlink(src / "config.json", dest / "config.json")
    for entry in src.iterdir():
        if CORE_FILE.match(entry.name):
            os.symlink(entry, dest / entry.name)
    return dest


def parse_report(text: str) -> dict[str, Any]:
    """The numeric fields of a ChipTest report (pimsim-nn.md §8); missing fields are absent."""
    out: dict[str, Any] = {}
    for key, pat in _PATTERNS.items():
        m = pat.search(text)
        if m:
            out[key] = float(m.group(1))
    cores: dict[int, dict[str, float]] = {}
    for m in _CORE_BLOCK.finditer(text):
        info: dict[str, float] = {}
        f = _CORE_FINISH.search(m.group(2))
        if f:
            info["finish_ms"] = float(f.group(1))
        r = _CORE_ROUNDS.search(m.group(2))
        if r:
            info["rounds"] = int(r.group(1))
        cores[int(m.group(1))] = info
    if cores:
        out["cores"] = cores
    return out


def _error_line(stdout: str, stderr: str) -> str | None:
    for line in (stderr + "\n" + stdout).splitlines():
        if line.startswith("Simulation error:"):
            return line.strip()
    return None


def run_chiptest(
    binary: Path,
    inst_dir: Path,
    config: Path,
    wall_limit_s: float,
    reported_limit_s: float | None = None,
) -> tuple[str, float]:
    """Run ChipTest once; return (stdout, wall seconds) or raise a one-line SimulationError.

    The run is killed after wall_limit_s; the message names reported_limit_s (the caller's
    overall limit) when given."""
    cmd = [str(binary), str(inst_dir), str(config), "--instruction-mode=directory"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as e:
        raise SimulationError(f"cannot run pimsim-nn {binary}: {e.strerror}") from None
    try:
        stdout, stderr = proc.communicate(timeout=wall_limit_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        limit = reported_limit_s if reported_limit_s is not None else wall_limit_s
        raise SimulationError(
            f"pimsim-nn did not finish within the wall-clock limit of {limit:g} s"
        ) from None
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        raise
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        line = _error_line(stdout, stderr)
        if line:
            raise SimulationError(f"pimsim-nn failed: {line}")
        if proc.returncode < 0:
            try:
                name = signal.Signals(-proc.returncode).name
            except ValueError:
                name = f"signal {-proc.returncode}"
            raise SimulationError(f"pimsim-nn crashed with {name} (no error message)")
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        raise SimulationError(f"pimsim-nn exited with status {proc.returncode}: {tail}")
    return stdout, wall


def _instantiated_cores(pim_dir: Path) -> int:
    import json

    try:
        return int(json.loads((pim_dir / "config.json").read_text())["core_cnt"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def run_pimsim(
    pim_dir: str | Path,
    arch: Arch | None = None,
    mode: str | None = None,
    pipeline: int | None = None,
    binary: str | Path | None = None,
    wall_limit_s: float = DEFAULT_WALL_LIMIT_S,
    latency_timeout_ms: float = DEFAULT_LATENCY_TIMEOUT_MS,
    sim_time_ms: float | None = None,
    min_rounds: int = DEFAULT_MIN_ROUNDS,
    keep_dir: str | Path | None = None,
    force_target: bool = False,
) -> PimsimReport:
    """Simulate pim_dir with pimsim-nn and return a SimReport-shaped result (see module doc).

    arch, mode and pipeline default to the directory's target record and must not contradict it
    (raptor.isa.target.resolve_target; force_target overrides, and the report says so).
    Throughput mode: `sim_time_ms` fixes pimsim's simulated time; None chooses it so that at
    least max(pipeline, min_rounds) rounds complete. keep_dir keeps the staged files there."""
    if mode not in (None, "latency", "throughput"):
        raise SimulationError(f"unknown simulation mode {mode!r}")
    from raptor.isa.pimdir import read_pimdir
    from raptor.isa.target import resolve_target
    from raptor.sim import find_pimdir

    rt = resolve_target(
        read_pimdir(find_pimdir(pim_dir), load_data=False),
        arch,
        mode,
        pipeline,
        force=force_target,
    )
    arch, mode, pipeline = rt.arch, rt.mode, rt.pipeline
    checked = {"target": rt.to_dict(), "target_override": rt.override_lines()}
    exe = find_binary(binary)
    deadline = time.monotonic() + wall_limit_s
    work = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="raptor-pimsim-"))
    try:
        if keep_dir and work.exists():
            shutil.rmtree(work)
        inst = stage_pimdir(pim_dir, work / "pim")
        cores = _instantiated_cores(inst)

        def remaining() -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SimulationError(
                    f"pimsim-nn did not finish within the wall-clock limit of {wall_limit_s:g} s"
                )
            return left

        def run(run_mode: str, sim_ms: float) -> tuple[dict[str, Any], float]:
            cfg = export_pimsim(
                arch,
                work / f"arch_{run_mode}",
                mode=run_mode,
                sim_time_ms=sim_ms,
                latency_timeout_ms=latency_timeout_ms,
                report_verbose_level=1,
            )
            out, wall = run_chiptest(exe, inst, cfg, remaining(), wall_limit_s)
            fields = parse_report(out)
            fields["wall_s"] = wall
            return fields, wall

        if mode == "latency":
            f, wall = run("latency", 1.0)
            if "latency_ms" not in f or "energy_pj" not in f:
                raise SimulationError("pimsim-nn report has no latency/energy line")
            lat_ns = f["latency_ms"] * 1e6
            energy = f["energy_pj"]
            per_core = [
                CoreStats(core=i, finish_ns=[info["finish_ms"] * 1e6])
                for i, info in sorted(f.get("cores", {}).items())
                if "finish_ms" in info
            ]
            f["instantiated_cores"] = cores
            return PimsimReport(
                mode="latency",
                pipeline=1,
                latency_ns=lat_ns,
                deadlines_ns=[lat_ns],
                throughput_per_s=1e9 / lat_ns if lat_ns > 0 else 0.0,
                energy_pj=energy,
                energy_per_inference_uj=energy / 1e6,
                power_mw=f.get("power_mw", energy / lat_ns if lat_ns > 0 else 0.0),
                energy=EnergyCounter(),
                outputs=[],
                per_core=per_core,
                instructions_executed=0,
                wall_time_s=wall,
                cores_used=len(per_core),
                pimsim=f,
                **checked,
            )

        target = max(int(pipeline or 1), int(min_rounds), 1)
        walls = 0.0
        if sim_time_ms is None:
            guess = 1.0
            try:
                lf, w = run("latency", 1.0)
                walls += w
                if lf.get("latency_ms", 0) > 0:
                    # rounds overlap across cores, so latency x target over-provisions
                    guess = lf["latency_ms"] * (target + 1)
            except SimulationError:
                pass  # e.g. a pipelined program that only completes when looped
            sim_ms = max(guess, 1e-3)
            adaptive = True
        else:
            sim_ms = float(sim_time_ms)
            adaptive = False
        while True:
            f, w = run("throughput", sim_ms)
            walls += w
            avg = f.get("average_latency_ms", 0.0)
            rounds = round(sim_ms / avg) if avg > 0 else 0
            if not adaptive or rounds >= target:
                break
            grow = 4.0 if rounds == 0 else min(4.0, 1.25 * target / rounds)
            if rounds == 0 and sim_ms > 1000.0 * max(latency_timeout_ms, 1.0):
                raise SimulationError(
                    f"pimsim-nn completed no round in {sim_ms:g} ms of throughput simulation "
                    "(deadlock or a core that never loops)"
                )
            sim_ms *= grow
        f["sim_time_ms"] = sim_ms
        f["rounds"] = rounds
        f["instantiated_cores"] = cores
        per_round = f.get("energy_per_round_pj", 0.0)
        tput = 1000.0 / avg if avg > 0 else 0.0
        per_core = [
            CoreStats(core=i, instructions=0)
            for i, info in sorted(f.get("cores", {}).items())
            if info.get("rounds", 0) > 0
        ]
        return PimsimReport(
            mode="throughput",
            pipeline=rounds,
            latency_ns=avg * 1e6,
            deadlines_ns=[],
            throughput_per_s=tput,
            energy_pj=per_round * rounds,
            energy_per_inference_uj=per_round / 1e6,
            power_mw=f.get("power_mw", 0.0),
            energy=EnergyCounter(),
            outputs=[],
            per_core=per_core,
            instructions_executed=0,
            wall_time_s=walls,
            cores_used=len(per_core),
            pimsim=f,
            **checked,
        )
    finally:
        if not keep_dir:
            shutil.rmtree(work, ignore_errors=True)


def pimsim_available(binary: str | Path | None = None) -> bool:
    try:
        find_binary(binary)
    except SimulationError:
        return False
    return True


__all__ = [
    "PimsimReport",
    "find_binary",
    "parse_report",
    "mid_interval_sim_time_ms",
    "pimsim_available",
    "rounds_within",
    "run_chiptest",
    "run_pimsim",
    "stage_pimdir",
    "throughput_comparison",
]


def rounds_within(deadlines_ns: list[float], sim_time_ms: float) -> int:
    """How many of our rounds complete within pimsim-nn's `sim_time` (deadlines are sorted)."""
    import bisect

    return bisect.bisect_right(sorted(deadlines_ns), sim_time_ms * 1e6)


def mid_interval_sim_time_ms(deadlines_ns: list[float], rounds: int) -> float:
    """A sim_time halfway between our deadline(rounds-1) and deadline(rounds): pimsim-nn then
    completes `rounds` rounds when the two engines agree within half a round interval."""
    d = sorted(deadlines_ns)
    if len(d) <= rounds:
        raise ValueError(f"need more than {rounds} deadlines, got {len(d)}")
    return (d[rounds - 1] + 0.5 * (d[rounds] - d[rounds - 1])) / 1e6


def throughput_comparison(ours: SimReport, ref: PimsimReport) -> dict[str, float]:
    """Our throughput-mode figures next to pimsim-nn's, as the same quantities.

    pimsim-nn loops every core for `sim_time` and reports rounds/sim_time (1000 / "average
    latency") and energy(sim_time)/rounds. `ours` must run more rounds than pimsim-nn completed.
    Same quantities from our run: rounds completed by sim_time (from our deadlines) / sim_time,
    our energy spent up to sim_time (the report's energy timeline) / those rounds, and that
    energy / sim_time as power. Also returned for information: our average power over the whole
    run (`ours_run_power_mw`), N/deadline(N-1) and the steady-state rate
    (N-1)/(deadline(N-1)-deadline(0)) over N = pimsim-nn's rounds."""
    t_ms = float(ref.pimsim["sim_time_ms"])
    cnt = rounds_within(ours.deadlines_ns, t_ms)
    d = sorted(ours.deadlines_ns)
    n = int(ref.pimsim["rounds"])
    e_pj = ours.energy_until_pj(t_ms * 1e6)
    out = {
        "sim_time_ms": t_ms,
        "pimsim_rounds": n,
        "ours_rounds": cnt,
        "pimsim_tput": ref.throughput_per_s,
        "ours_tput": cnt / (t_ms * 1e-3),
        "pimsim_energy_uj": ref.energy_per_inference_uj,
        "ours_energy_uj": e_pj / cnt / 1e6 if cnt else float("inf"),
        "pimsim_power_mw": ref.power_mw,
        "ours_power_mw": e_pj / (t_ms * 1e6),
        "ours_run_power_mw": ours.power_mw,
    }
    if 1 <= n <= len(d):
        out["ours_n_over_deadline"] = n / (d[n - 1] * 1e-9)
    if 2 <= n <= len(d):
        out["ours_steady_state"] = (n - 1) / ((d[n - 1] - d[0]) * 1e-9)
    return out
