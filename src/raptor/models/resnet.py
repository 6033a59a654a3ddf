"""ResNet-18/34 with the torchvision topology: 7x7/2 conv + BN + Relu, 3x3/2 pad-1 MaxPool,
four stages of basic blocks (64, 128, 256, 512; the first block of stages 2-4 has stride 2 and
a 1x1/2 conv + BN downsample), GlobalAveragePool, Flatten, FC 512 -> 1000.

Every conv is bias-free and followed by a BatchNormalization with probe-calibrated running
statistics; the second BN of each residual branch has a smaller gamma so the residual stream
grows slowly (like the small-gamma init of well-trained ResNets)."""

from __future__ import annotations

from raptor.models.common import Builder

BLOCKS = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}


def _basic_block(b: Builder, x: str, cout: int, stride: int, name: str) -> str:
    cin = b.shape(x)[1]
    y = b.conv(x, cout, 3, stride, 1, bn=True, bias=False, act="relu", name=name + ".conv1")
    y = b.conv(y, cout, 3, 1, 1, bn=True, bias=False, gamma=(0.3, 0.6), name=name + ".conv2")
    if stride != 1 or cin != cout:
        x = b.conv(x, cout, 1, stride, 0, bn=True, bias=False, name=name + ".downsample")
    return b.relu(b.add(y, x, name=name + ".add"))


def build_resnet(name: str, input_size: int = 224, seed: int = 0, num_classes: int = 1000):
    b = Builder(name, input_size, seed)
    x = b.conv(b.input_name, 64, 7, 2, 3, bn=True, bias=False, act="relu", name="conv1")
    x = b.maxpool(x, 3, 2, 1, name="maxpool")
    for stage, (n, c) in enumerate(zip(BLOCKS[name], (64, 128, 256, 512))):
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            x = _basic_block(b, x, c, stride, f"layer{stage + 1}.{i}")
    x = b.flatten(b.gap(x))
    y = b.gemm(x, num_classes, name="fc")
    return b.finish([y]), b
