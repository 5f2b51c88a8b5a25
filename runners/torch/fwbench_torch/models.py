"""PyTorch builders for the catalog's models: torchvision's own where it defines them, no weights."""

from __future__ import annotations

import torchvision
from fwbench_core.registry import ModelRegistry
from torch import nn

MODELS: ModelRegistry = ModelRegistry("torch")


@MODELS.register("resnet18")
def resnet18(num_classes: int) -> nn.Module:
    return torchvision.models.resnet18(weights=None, num_classes=num_classes)


@MODELS.register("mobilenet_v2")
def mobilenet_v2(num_classes: int) -> nn.Module:
    return torchvision.models.mobilenet_v2(weights=None, num_classes=num_classes)
