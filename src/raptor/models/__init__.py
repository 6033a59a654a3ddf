"""The model suite: deterministic, seeded ONNX builders (onnx.helper + numpy, no downloads).

build_model(name, input_size=None, seed=0, activations="probe") -> onnx.ModelProto
save_model(name, out, input_size=None, seed=0, activations="probe") -> Path      (atomic write)
model_info(name) -> dict                                    (param counts, notes)
input_sensitivity(model, seed=0) -> float                   (output spread across inputs)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from raptor.errors import RaptorError
from raptor.validation.reference import input_sensitivity

if TYPE_CHECKING:  # the builders import onnx when they build: checking a name or size needs none
    import onnx

MODEL_NAMES = ("vgg8", "resnet18", "resnet34", "googlenet", "yolo11n")
DEFAULT_INPUT_SIZE = {
    "vgg8": 32,
    "resnet18": 224,
    "resnet34": 224,
    "googlenet": 224,
    "yolo11n": 640,
}

_NOTES = {
    "vgg8": "NeuroSim CIFAR VGG-8: 6 conv 3x3 (128,128,M,256,256,M,512,512,M) + FC 8192-1024-10",
    "resnet18": "torchvision ResNet-18 topology, Conv+BatchNormalization (calibrated stats), FC 1000",
    "resnet34": "torchvision ResNet-34 topology, Conv+BatchNormalization (calibrated stats), FC 1000",
    "googlenet": "torchvision GoogLeNet, no aux heads, ceil-mode MaxPools, '5x5' branch is 3x3",
    "yolo11n": "Ultralytics YOLO11n (BN fused, SiLU as Sigmoid*Mul, C3k2, SPPF, C2PSA, DFL decode)",
}
# Parameter counts in torch's convention (BN weight+bias counted, running stats not).
TORCH_PARAMS = {
    "vgg8": 12_976_266,
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "googlenet": 6_624_904,
    "yolo11n": 2_624_080,
}
# input sizes each builder accepts: (smallest, multiple of). vgg8 and yolo11n need whole
# feature maps after their 8x / 32x downsampling; googlenet below 15 leaves an empty map for the
# weight calibration (its ceil-mode pools), resnets build at any size.
INPUT_SIZE_RULE = {
    "vgg8": (8, 8),
    "resnet18": (1, 1),
    "resnet34": (1, 1),
    "googlenet": (15, 1),
    "yolo11n": (32, 32),
}
# smallest convenient size for building when only the structure matters
_SMALL = {"vgg8": 32, "resnet18": 32, "resnet34": 32, "googlenet": 32, "yolo11n": 64}


def check_input_size(name: str, input_size: int | None) -> int:
    """The input size `name` is built at (its default for None); RaptorError if it cannot be."""
    if name not in MODEL_NAMES:
        raise RaptorError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)}")
    size = DEFAULT_INPUT_SIZE[name] if input_size is None else int(input_size)
    least, step = INPUT_SIZE_RULE[name]
    if size < least or size % step:
        need = f"a positive multiple of {step}" if step > 1 else f"at least {least}"
        raise RaptorError(f"{name} needs an input size that is {need}, got {size}")
    return size


def _build(name: str, input_size: int | None, seed: int, activations: str = "probe"):
    from raptor.models.common import ACTIVATIONS

    size = check_input_size(name, input_size)
    if activations not in ACTIVATIONS:
        raise RaptorError(
            f"unknown activations {activations!r}; choose one of {', '.join(ACTIVATIONS)}"
        )
    if activations != "probe" and name != "yolo11n":
        raise RaptorError(f"--activations {activations} is only available for yolo11n, not {name}")
    if name == "vgg8":
        from raptor.models.vgg import build_vgg8

        return build_vgg8(size, seed)
    if name in ("resnet18", "resnet34"):
        from raptor.models.resnet import build_resnet

        return build_resnet(name, size, seed)
    if name == "googlenet":
        from raptor.models.googlenet import build_googlenet

        return build_googlenet(size, seed)
    from raptor.models.yolo import build_yolo11n

    return build_yolo11n(size, seed, activations)


def build_model(
    name: str, input_size: int | None = None, seed: int = 0, activations: str = "probe"
) -> onnx.ModelProto:
    """Build a suite model (opset 17, batch 1, NCHW float32 input named "input").

    activations "realistic" (yolo11n only): batch-calibrated BN with trained-detector magnitudes
    (raptor.models.common)."""
    model, _ = _build(name, input_size, seed, activations)
    return model


def save_model(
    name: str,
    out: str | Path,
    input_size: int | None = None,
    seed: int = 0,
    activations: str = "probe",
) -> Path:
    """Build and write a suite model atomically (temp file in the same directory + os.replace).

    `out` is a file path, or an existing directory (then `<name>.onnx` inside it)."""
    out = Path(out)
    data = build_model(name, input_size, seed, activations).SerializeToString()
    if out.is_dir():
        out = out / f"{name}.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def model_info(name: str) -> dict:
    """Parameter counts (independent of the input size, except vgg8's first FC) and notes."""
    from raptor.models.common import count_params

    model, b = _build(name, _SMALL[name], 0)
    counts = count_params(model)
    folded = counts["folded"]
    return {
        "name": name,
        "default_input_size": DEFAULT_INPUT_SIZE[name],
        "params": folded + b.bn_channels,  # torch convention (BN as weight+bias)
        "params_folded": folded,  # after BN folding: what the crossbars hold (+ biases)
        "params_reference": TORCH_PARAMS[name],
        "nodes": len(model.graph.node),
        "op_types": sorted({n.op_type for n in model.graph.node}),
        "notes": _NOTES[name],
    }


__all__ = [
    "MODEL_NAMES",
    "DEFAULT_INPUT_SIZE",
    "build_model",
    "save_model",
    "check_input_size",
    "model_info",
    "input_sensitivity",
]
