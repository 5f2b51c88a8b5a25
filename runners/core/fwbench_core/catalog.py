"""The models every runner serves, by name, with the inputs they accept.

One entry here plus one builder per framework adds a model.
"""

from __future__ import annotations

from .errors import NotFound
from .spec import ModelSpec, Task

_IMAGE_CHW = "CxHxW"


def _vision(name: str, side: int = 224, min_side: int = 32) -> ModelSpec:
    return ModelSpec(
        name=name,
        task=Task.VISION,
        input_convention=_IMAGE_CHW,
        default_input_shape=(3, side, side),
        min_input_shape=(3, min_side, min_side),
        fixed_dims=(0,),
    )


MODEL_SPECS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _vision("resnet18"),
        _vision("mobilenet_v2"),
    )
}


def get_spec(name: str) -> ModelSpec:
    try:
        return MODEL_SPECS[name]
    except KeyError:
        known = ", ".join(sorted(MODEL_SPECS))
        raise NotFound(f"unknown model {name!r}; known models: {known}") from None
