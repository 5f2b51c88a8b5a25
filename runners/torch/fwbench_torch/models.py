"""PyTorch builders for the catalog's models, registered by name; no weights are downloaded.

Every builder takes (spec, input_shape, options) and returns a module whose
output is logits: (batch, classes), (batch, seq, vocab), or for CTC
(batch, frames, alphabet). Vision models come from torchvision; the rest are
defined in this package, once.
"""

from __future__ import annotations

import torchvision
from fwbench_core.registry import ModelRegistry
from fwbench_core.spec import ModelSpec
from torch import nn

MODELS: ModelRegistry = ModelRegistry("torch")


def _torchvision(name: str, **kwargs):
    def build(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
        return getattr(torchvision.models, name)(weights=None, num_classes=spec.head(options).outputs, **kwargs)

    MODELS.register(name)(build)


_torchvision("resnet18")
_torchvision("resnet50")
_torchvision("resnet152")
_torchvision("mobilenet_v2")
