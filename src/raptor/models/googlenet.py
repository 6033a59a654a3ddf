"""GoogLeNet with the torchvision topology (aux heads off, transform_input off).

BasicConv2d = bias-free conv + BatchNormalization(eps 1e-3) + Relu. Stem: 7x7/2 conv 64,
MaxPool 3/2 ceil, 1x1 conv 64, 3x3 conv 192, MaxPool 3/2 ceil; inception 3a 3b, MaxPool 3/2
ceil, 4a-4e, MaxPool 2/2 ceil, 5a 5b; GlobalAveragePool, Flatten, (dropout), FC 1024 -> 1000.
Inception branches: 1x1; 1x1 -> 3x3; 1x1 -> 3x3 (torchvision's "5x5" branch is really 3x3);
MaxPool 3/1 pad 1 ceil -> 1x1. 6.62 M params."""

from __future__ import annotations

from raptor.models.common import Builder

INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32),
    "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64),
    "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64),
    "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128),
    "5b": (384, 192, 384, 48, 128, 128),
}


def _bc(
    b: Builder, x: str, cout: int, k: int, stride: int = 1, pad: int = 0, name: str = ""
) -> str:
    return b.conv(x, cout, k, stride, pad, bn=True, bias=False, act="relu", eps=1e-3, name=name)


def _inception(b: Builder, x: str, name: str) -> str:
    c1, c3r, c3, c5r, c5, cp = INCEPTION[name]
    n = f"inception{name}"
    b1 = _bc(b, x, c1, 1, name=n + ".branch1")
    b2 = _bc(b, _bc(b, x, c3r, 1, name=n + ".branch2.0"), c3, 3, 1, 1, name=n + ".branch2.1")
    b3 = _bc(b, _bc(b, x, c5r, 1, name=n + ".branch3.0"), c5, 3, 1, 1, name=n + ".branch3.1")
    p = b.maxpool(x, 3, 1, 1, ceil=True, name=n + ".branch4.pool")
    b4 = _bc(b, p, cp, 1, name=n + ".branch4.1")
    return b.concat([b1, b2, b3, b4], 1, name=n + ".concat")


def build_googlenet(input_size: int = 224, seed: int = 0, num_classes: int = 1000):
    b = Builder("googlenet", input_size, seed)
    x = _bc(b, b.input_name, 64, 7, 2, 3, name="conv1")
    x = b.maxpool(x, 3, 2, 0, ceil=True, name="maxpool1")
    x = _bc(b, x, 64, 1, name="conv2")
    x = _bc(b, x, 192, 3, 1, 1, name="conv3")
    x = b.maxpool(x, 3, 2, 0, ceil=True, name="maxpool2")
    x = _inception(b, x, "3a")
    x = _inception(b, x, "3b")
    x = b.maxpool(x, 3, 2, 0, ceil=True, name="maxpool3")
    for k in ("4a", "4b", "4c", "4d", "4e"):
        x = _inception(b, x, k)
    x = b.maxpool(x, 2, 2, 0, ceil=True, name="maxpool4")
    x = _inception(b, x, "5a")
    x = _inception(b, x, "5b")
    x = b.flatten(b.gap(x))
    y = b.gemm(x, num_classes, name="fc")
    return b.finish([y]), b
