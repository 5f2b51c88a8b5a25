"""planted_conv in PyTorch: one block's weights applied several times, so that the work per step can be changed
by a known amount without changing the model's parameters (see model.toml)."""

from __future__ import annotations

import os

import torch
from torch import nn

WIDTH = 64
BASE_PASSES = 8
EXTRA_PASSES_ENV = "FWBENCH_PLANTED_EXTRA_PASSES"


class PlantedConv(nn.Module):
    def __init__(self, in_channels: int, classes: int, passes: int) -> None:
        super().__init__()
        self.passes = passes
        self.stem = nn.Conv2d(in_channels, WIDTH, 3, padding=1, bias=False)
        self.conv = nn.Conv2d(WIDTH, WIDTH, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(WIDTH)
        self.classifier = nn.Linear(WIDTH, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for _ in range(self.passes):
            x = torch.relu(self.bn(self.conv(x)))
        return self.classifier(x.mean(dim=(2, 3)))


def build(spec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
    passes = BASE_PASSES + int(os.environ.get(EXTRA_PASSES_ENV, "0"))
    return PlantedConv(input_shape[0], spec.head(options).outputs, passes)
