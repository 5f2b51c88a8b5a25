"""tiny_cnn in PyTorch: the reference the other builders match.

The module names here (blocks.0.conv, blocks.0.bn, ..., classifier) are the contract with the others:
TensorFlow's layers carry the same names, and the Flax submodules too, so PyTorch's weights load by name.
"""

from __future__ import annotations

import torch
from torch import nn

# (out channels, stride) per block; every convolution is 3x3 with padding 1.
BLOCKS = ((32, 1), (64, 2), (128, 2))


class ConvBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        # No bias: the BatchNorm that follows has its own.
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class TinyCnn(nn.Module):
    def __init__(self, in_channels: int, classes: int) -> None:
        super().__init__()
        blocks = []
        for out_channels, stride in BLOCKS:
            blocks.append(ConvBlock(in_channels, out_channels, stride))
            in_channels = out_channels
        self.blocks = nn.Sequential(*blocks)
        self.classifier = nn.Linear(in_channels, classes)
        # The JAX runner's default initialisation, so that every framework starts from the same distributions:
        # convolutions He normal over fan-out (as torchvision's), linear weights PyTorch's default, biases zero.
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        nn.init.zeros_(self.classifier.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(x).mean(dim=(2, 3))  # global average pool
        return self.classifier(x)


def build(spec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
    channels = input_shape[0]  # CxHxW
    return TinyCnn(channels, spec.head(options).outputs)
