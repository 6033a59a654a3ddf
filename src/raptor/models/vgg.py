"""VGG-8 as in DNN_NeuroSim (CIFAR-10): six 3x3 pad-1 convs 128,128,M,256,256,M,512,512,M,
then Flatten, FC 512*(S/8)^2 -> 1024 (Relu), FC 1024 -> 10. 13.0 M params at 32x32."""

from __future__ import annotations

import onnx

from raptor.models.common import Builder

LAYERS = (128, 128, "M", 256, 256, "M", 512, 512, "M")


def build_vgg8(input_size: int = 32, seed: int = 0, num_classes: int = 10) -> onnx.ModelProto:
    if input_size % 8:
        raise ValueError(f"vgg8 needs an input size divisible by 8, got {input_size}")
    b = Builder("vgg8", input_size, seed)
    x = b.input_name
    i = 0
    for v in LAYERS:
        if v == "M":
            x = b.maxpool(x, 2, 2, name=f"features.pool{i}")
        else:
            x = b.conv(x, v, 3, 1, 1, act="relu", beta_mean=0.1, name=f"features.conv{i}")
        i += 1
    x = b.flatten(x)
    x = b.gemm(x, 1024, act="relu", name="classifier.fc0")
    y = b.gemm(x, num_classes, name="classifier.fc1")
    b.bn_channels = 0
    return b.finish([y]), b
