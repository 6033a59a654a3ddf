"""The simulator: one event-driven run computes a program's values and its pimsim-nn timing,
energy and power. `simulate` runs a PimProgram; `simulate_dir` a pim/ directory."""

from __future__ import annotations

import gc
import time
import zipfile
from pathlib import Path

import numpy as np

import raptor.sim.numba_cache  # noqa: F401  (first: drops stale compiled kernels)
from raptor.arch.loader import Arch
from raptor.errors import SimulationError
from raptor.isa.pimdir import PimProgram, read_pimdir
from raptor.sim.engine import Engine
from raptor.sim.memory import HostMemory
from raptor.sim.report import CoreStats, SimReport
from raptor.sim.trace import TraceRecorder, layer_bounds

__all__ = [
    "SimReport",
    "CoreStats",
    "simulate",
    "simulate_dir",
    "to_host",
    "from_host",
    "random_inputs",
]


def to_host(x: np.ndarray, layout: str) -> np.ndarray:
    """ONNX-shaped tensor -> flat host layout (NHWC for 4-D tensors with N=1, else row-major)."""
    x = np.asarray(x, dtype=np.float32)
    if layout == "NHWC" and x.ndim == 4:
        x = x.transpose(0, 2, 3, 1)
    return np.ascontiguousarray(x).ravel()


def from_host(flat: np.ndarray, shape: list[int], layout: str) -> np.ndarray:
    """Flat host layout -> ONNX-shaped tensor."""
    shape = [int(s) for s in shape]
    if layout == "NHWC" and len(shape) == 4:
        n, c, h, w = shape
        return flat.reshape(n, h, w, c).transpose(0, 3, 1, 2).copy()
    return flat.reshape(shape).copy()


def random_inputs(meta: dict, n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """n seeded standard-normal inputs of the shapes in config.json's `inputs`."""
    rng = np.random.default_rng(seed)
    return [
        {
            i["name"]: rng.standard_normal([int(s) for s in i["shape"]]).astype(np.float32)
            for i in meta.get("inputs", [])
        }
        for _ in range(n)
    ]


def _regions(specs: list[dict], eb: int, host_size: int, what: str) -> list[tuple]:
    out = []
    for spec in specs:
        size = int(np.prod(spec["shape"]))
        start = int(spec["address"]) // eb
        if start < 0 or start + size > host_size:
            raise SimulationError(
                f"{what} {spec['name']!r} [{start}, {start + size}) lies outside host memory ({host_size} elements)"
            )
        out.append((start, start + size, spec["name"], spec))
    return out


def read_tensors(
    data: np.ndarray, written: np.ndarray, specs: list[dict], eb: int
) -> dict[str, np.ndarray]:
    """The intermediates of config.json's `tensors` (byte address, ONNX shape, element strides)
    gathered from a host-memory image; only tensors whose every element the run stored (a
    program may keep a tensor in local memory or forward it core to core instead)."""
    out = {}
    for spec in specs:
        idx = np.full((), int(spec["address"]) // eb, dtype=np.int64)
        for n, st in zip(spec["shape"], spec["strides"]):
            idx = idx[..., None] + np.arange(int(n), dtype=np.int64) * int(st)
        if idx.size and (idx.min() < 0 or idx.max() >= data.size):
            raise SimulationError(f"tensor {spec['name']!r} lies outside host memory")
        if written[idx].all():
            out[spec["name"]] = data[idx].astype(np.float32)
    return out


def simulate(
    prog: PimProgram,
    arch: Arch | None = None,
    mode: str | None = None,
    pipeline: int | None = None,
    inputs: list[dict[str, np.ndarray]] | None = None,
    force_target: bool = False,
    trace: bool = False,
    tensors: bool = False,
    engine: str = "auto",
) -> SimReport:
    """Run prog on arch. Latency mode runs every core once; throughput mode runs every non-empty
    core's program `pipeline` times, streaming input r to round r (docs/pim-format.md). With
    trace, the report's `trace` holds the run's TraceRecorder (raptor.sim.trace).

    arch, mode and pipeline default to the program's target record; one that contradicts it is
    refused unless force_target (then the report carries the override), and a program that does
    not fit the chip is never run (raptor.isa.target.resolve_target).
    tensors: also read every intermediate the program records back from host memory (the values
    of the last round) into `report.tensors`.
    engine: "compiled" (raptor.sim.compiled: rob_size 1, untraced), "python" (raptor.sim.engine:
    every arch, traces) or "auto" (compiled where it applies, else python); both give the same
    report bit for bit."""
    from raptor.isa.target import resolve_target

    target = resolve_target(prog, arch, mode, pipeline, force=force_target)
    arch, mode = target.arch, target.mode
    rounds = target.pipeline if mode == "throughput" else 1
    meta = prog.meta
    eb = prog.element_bytes
    if inputs is None:
        inputs = random_inputs(meta, rounds)
    host_size = int(prog.memory.size)
    in_regions = []
    for start, end, name, spec in _regions(meta.get("inputs", []), eb, host_size, "input"):
        arrs = []
        for r in range(rounds):
            src = inputs[r % len(inputs)] if inputs else {}
            if name not in src:
                raise SimulationError(f"no value for network input {name!r} (round {r})")
            flat = to_host(src[name], spec.get("layout", "flat"))
            if flat.size != end - start:
                raise SimulationError(
                    f"input {name!r} has {flat.size} values, the program expects {end - start}"
                )
            arrs.append(flat)
        in_regions.append((start, end, name, arrs))
    out_specs = _regions(meta.get("outputs", []), eb, host_size, "output")
    out_regions = [
        (s, e, name, [prog.memory[s:e].astype(np.float32) for _ in range(rounds)])
        for s, e, name, _ in out_specs
    ]
    host = HostMemory(prog.memory, eb, in_regions, out_regions, rounds)
    if tensors:
        host.written = np.zeros(host.size, dtype=bool)

    t0 = time.perf_counter()
    recorder = TraceRecorder(layer_bounds(meta, prog.core_cnt)) if trace else None
    if engine not in ("auto", "compiled", "python"):
        raise ValueError(f"engine {engine!r}: auto, compiled or python")
    compiled_ok = not trace and arch.core.rob_size == 1
    if engine == "compiled" and not compiled_ok:
        raise SimulationError("the compiled engine covers untraced runs with rob_size 1")
    gc_on = gc.isenabled()
    gc.disable()  # the run allocates few cyclic objects; collections would only scan the heap
    try:
        if engine != "python" and compiled_ok:
            from raptor.sim.compiled import CompiledEngine

            eng = CompiledEngine(prog, arch, rounds, host)
        else:
            eng = Engine(prog, arch, rounds, host, trace=recorder)
        eng.run()
    finally:
        if gc_on:
            gc.enable()
    wall = time.perf_counter() - t0

    used = [c for c in eng.cores if c.n]
    deadlines = [max((c.stats.finish_ns[r] for c in used), default=0.0) for r in range(rounds)]
    run_ns = deadlines[-1] if deadlines else 0.0
    energy = eng.energy_total(run_ns)
    total = energy.total_pj
    for c in eng.cores:
        c.stats.instructions = c.n * rounds
    outputs = [
        {
            name: from_host(arrs[r], spec["shape"], spec.get("layout", "flat"))
            for (_, _, name, arrs), (_, _, _, spec) in zip(out_regions, out_specs)
        }
        for r in range(rounds)
    ]
    report = SimReport(
        mode=mode,
        pipeline=rounds,
        latency_ns=deadlines[0] if deadlines else 0.0,
        deadlines_ns=deadlines,
        throughput_per_s=rounds / (run_ns * 1e-9) if run_ns > 0 else 0.0,
        energy_pj=total,
        energy_per_inference_uj=total / rounds / 1e6,
        power_mw=total / run_ns if run_ns > 0 else 0.0,
        energy=energy,
        outputs=outputs,
        per_core=[c.stats for c in eng.cores],
        instructions_executed=sum(c.n for c in eng.cores) * rounds,
        wall_time_s=wall,
        cores_used=len(used),
        inter_chip_bytes=int(eng.noc.inter_chip_bytes),
        inter_chip_energy_pj=float(eng.noc.inter_chip_energy_pj),
        host_bytes_per_inference=eng.gmem.bytes / rounds,
        noc_bytes_per_inference=eng.noc_bytes / rounds,
        target=target.to_dict(),
        target_override=target.override_lines(),
        trace=recorder,
        energy_timeline=eng.timeline,
    )
    if tensors:
        report.tensors = read_tensors(host.data, host.written, meta.get("tensors", []), eb)
    return report


def find_pimdir(path: str | Path) -> Path:
    """`path` itself if it holds config.json, else its `pim/` child."""
    p = Path(path)
    if (p / "config.json").is_file():
        return p
    if (p / "pim" / "config.json").is_file():
        return p / "pim"
    raise SimulationError(f"{p}: neither a pim directory nor the parent of one")


def load_inputs(path: str | Path) -> list[dict[str, np.ndarray]]:
    """Inputs from an .npz: keys `<name>` (one input) or `<i>/<name>` / `<name>_<i>` per round."""
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, zipfile.BadZipFile):
        raise SimulationError(f"{path}: not an .npz file of input arrays") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise SimulationError(f"{path}: a single .npy array, not an .npz file of named inputs")
    per: dict[int, dict[str, np.ndarray]] = {}
    for key in data.files:
        if "/" in key:
            i, name = key.split("/", 1)
            if not i.isdigit():
                raise SimulationError(f"{path}: key {key!r} is not <round>/<input name>")
            per.setdefault(int(i), {})[name] = data[key]
        else:
            per.setdefault(0, {})[key] = data[key]
    return [per[i] for i in sorted(per)]


def simulate_dir(
    path: str | Path,
    arch: Arch | None = None,
    mode: str | None = None,
    pipeline: int | None = None,
    inputs: list[dict[str, np.ndarray]] | str | Path | None = None,
    force_target: bool = False,
    trace: bool = False,
) -> SimReport:
    """Simulate a pim/ directory (or its parent). arch, mode and pipeline None: the program's own
    (pim/target.json; without one, arch is required, mode is latency and a throughput pipeline is
    config.json's `raptor.pipeline`, else 4); inputs None: seeded random inputs; a path: .npz."""
    prog = read_pimdir(find_pimdir(path))
    if isinstance(inputs, (str, Path)):
        inputs = load_inputs(inputs)
    return simulate(
        prog,
        arch,
        mode=mode,
        pipeline=pipeline,
        inputs=inputs,
        force_target=force_target,
        trace=trace,
    )
