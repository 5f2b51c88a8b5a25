"""Vision models: torchvision's own builders, no weights."""

from __future__ import annotations

import torchvision
from torch import nn

from fwbench_core.models import ModelSpec

from . import MODELS


def _torchvision(name: str, **kwargs):
    def build(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
        return getattr(torchvision.models, name)(weights=None, num_classes=spec.head(options).outputs, **kwargs)

    MODELS.register(name)(build)


_torchvision("resnet18")
_torchvision("resnet50")
_torchvision("resnet152")
_torchvision("vgg16")
_torchvision("mobilenet_v2")
_torchvision("efficientnet_b0")
_torchvision("efficientnet_b4")
# No auxiliary classifier (Keras' InceptionV3 has none); raw inputs, as for every other model (transform_input
# re-normalises ImageNet inputs and is only on by default with pretrained weights); torchvision's own init.
_torchvision("inception_v3", aux_logits=False, transform_input=False, init_weights=True)
