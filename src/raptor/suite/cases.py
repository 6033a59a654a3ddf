"""Cases of the model suite and where their artifacts live.

Layout under the out-dir (the seed's contract):
  <out>/<model>/model.onnx
  <out>/<model>/artifacts/common/                         reference inputs/outputs, shared
  <out>/<model>/artifacts/<arch>/<mode>[/pipelineN]/       a case ("raptor/", "pimcomp/")
  <out>/<model>/artifacts/<arch>/<mode>[/pipelineN]/ablation/<variant>/   an ablation case
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_MODELS = ("vgg8", "resnet18", "resnet34", "googlenet")
ALL_MODELS = DEFAULT_MODELS + ("yolo11n",)
DEFAULT_ARCHS = ("arch-a", "arch-b")
DEFAULT_OUT_DIR = "validation/networks/pimcomp_models"
DEFAULT_PIPELINE = 4
COMPILERS = ("raptor", "pimcomp")


@dataclass(frozen=True)
class CaseSpec:
    """One (model, arch, mode, pipeline) case, with everything a worker needs (picklable)."""

    model: str
    arch: str
    mode: str
    pipeline: int
    out_dir: str
    compilers: tuple[str, ...] = COMPILERS
    raptor_extra_args: tuple[str, ...] = ()
    artifact_subdir: str = ""
    fast: bool = True
    seed: int = 0
    input_size: int | None = None
    trace: bool = False  # also write trace.json, timeline.png and layers.json per compiler

    @property
    def key(self) -> str:
        return f"{self.model}/{self.arch}/{mode_dir(self.mode, self.pipeline)}"

    @property
    def model_dir(self) -> Path:
        return Path(self.out_dir) / self.model

    @property
    def model_path(self) -> Path:
        return self.model_dir / "model.onnx"

    @property
    def common_dir(self) -> Path:
        return self.model_dir / "artifacts" / "common"

    @property
    def case_dir(self) -> Path:
        d = self.model_dir / "artifacts" / self.arch / mode_dir(self.mode, self.pipeline)
        return d / self.artifact_subdir if self.artifact_subdir else d


def add_models_argument(parser) -> None:
    """The --models option, shared by the suite runner and the ablation wrapper."""
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(DEFAULT_MODELS),
        choices=ALL_MODELS,
        metavar="MODEL",
        help=f"models to run (default: {' '.join(DEFAULT_MODELS)}; include yolo11n explicitly)",
    )


def mode_dir(mode: str, pipeline: int) -> str:
    return "latency" if mode == "latency" else f"throughput/pipeline{pipeline}"


@dataclass
class CompilerResult:
    """Outcome of one compiler on one case: status is PASS, FAIL, ERROR or SKIPPED."""

    status: str = "SKIPPED"
    latency_ms: float | None = None
    throughput_ips: float | None = None
    power_mw: float | None = None
    energy_uj: float | None = None
    max_rel_error: float | None = None
    instructions: int | None = None
    cores_used: int | None = None
    crossbars_used: int | None = None
    compile_s: float | None = None
    simulate_s: float | None = None
    error: str = ""


@dataclass
class CaseResult:
    spec: CaseSpec
    results: dict[str, CompilerResult] = field(default_factory=dict)
    wall_s: float = 0.0
    log: str = ""

    @property
    def failed(self) -> bool:
        return any(r.status in ("FAIL", "ERROR") for r in self.results.values())


def expand_cases(
    models: list[str],
    archs: list[str],
    modes: list[tuple[str, int]],
    **common,
) -> list[CaseSpec]:
    return [
        CaseSpec(model=m, arch=a, mode=mode, pipeline=p, **common)
        for m in models
        for a in archs
        for mode, p in modes
    ]
