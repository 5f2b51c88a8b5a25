"""Vision models: torchvision's own builders, no weights."""

from __future__ import annotations

import torchvision
from fwbench_core.spec import ModelSpec
from torch import nn

from . import MODELS


def _torchvision(name: str, **kwargs):
    def build(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
        return getattr(torchvision.models, name)(weights=None, num_classes=spec.head(options).outputs, **kwargs)

    MODELS.register(name)(build)


_torchvision("resnet18")
_torchvision("resnet50")
_torchvision("resnet152")
_torchvision("mobilenet_v2")
