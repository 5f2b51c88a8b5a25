"""Keras builders for the catalog's models, registered by name; no weights are downloaded.

Every builder takes (spec, input_shape in Keras layout, options) and returns a
model whose output is logits: (batch, classes), (batch, seq, vocab), or for
CTC (batch, frames, alphabet). Where keras.applications has the same network
as the PyTorch runner it is used; otherwise the network is defined here to
match PyTorch's. A model in the numerical parity check also has a loader that
copies PyTorch's weights (NumPy arrays keyed by PyTorch parameter name) into it.
One module per task registers its models here.
"""

from collections.abc import Callable
from dataclasses import dataclass

import keras
import numpy as np

from fwbench_core.models import ModelSpec
from fwbench_core.plugin_modules import PluginError, builder_attribute
from fwbench_core.registry import ModelRegistry

TorchWeights = dict[str, np.ndarray]

# PyTorch's BatchNorm defaults: eps 1e-5, running stats updated with 0.1 of the new value.
TORCH_BN = dict(epsilon=1e-5, momentum=0.9)


@dataclass(frozen=True)
class KerasModel:
    build: Callable[[ModelSpec, tuple[int, ...], dict[str, str]], keras.Model]
    load_torch_weights: Callable[[keras.Model, TorchWeights], None] | None = None


def plugin_builder(module, folder) -> KerasModel:
    """A plug-in's build_tensorflow.py: build(spec, input_shape, options) -> keras.Model, input_shape in Keras'
    layout; optionally load_torch_weights(model, weights), which parity needs to compare outputs."""
    build = builder_attribute(module, folder, "tensorflow", "build", "spec, input_shape, options")
    load = getattr(module, "load_torch_weights", None)
    if load is not None and not callable(load):
        raise PluginError(f"{folder}/build_tensorflow.py: load_torch_weights must be a function (model, weights)")
    return KerasModel(build, load)


MODELS: ModelRegistry = ModelRegistry("tensorflow", plugin_builder)

from . import llama, speech, text, vision, vit  # noqa: E402,F401  (each registers its models)
