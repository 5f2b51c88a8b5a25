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
from functools import partial
from typing import Any

import keras
import numpy as np

from fwbench_core.models import ModelSpec
from fwbench_core.plugin_modules import PluginError, builder_attribute, builder_file
from fwbench_core.registry import ModelRegistry

TorchWeights = dict[str, np.ndarray]

# PyTorch's BatchNorm defaults: eps 1e-5, running stats updated with 0.1 of the new value.
TORCH_BN = dict(epsilon=1e-5, momentum=0.9)


@dataclass(frozen=True)
class KerasModel:
    build: Callable[[ModelSpec, tuple[int, ...], dict[str, str]], keras.Model]
    load_torch_weights: Callable[[keras.Model, TorchWeights], None] | None = None
    # A plug-in decoder's: the model's generation.Decoder (the built-ins' are generation.DECODERS).
    decoder: Callable[[keras.Model], Any] | None = None


def _optional_function(module, folder, file: str, name: str, signature: str) -> Callable | None:
    value = getattr(module, name, None)
    if value is not None and not callable(value):
        raise PluginError(f"{folder}/{file}: {name} must be a function ({signature})")
    return value


def plugin_builder(framework: str, module, folder) -> KerasModel:
    """How `framework`'s runner reads a plug-in's builder module, build_<framework>.py: build(spec, input_shape,
    options) -> keras.Model, input_shape in Keras' layout; optionally load_torch_weights(model, weights), which
    parity needs to compare outputs, and decoder(model), which a model that generates needs."""
    file = builder_file(framework)
    return KerasModel(
        builder_attribute(module, folder, framework, "build", "spec, input_shape, options"),
        _optional_function(module, folder, file, "load_torch_weights", "model, weights"),
        _optional_function(module, folder, file, "decoder", "model"),
    )


def plugin_builder_of(framework: str) -> Callable[[Any, Any], KerasModel]:
    """plugin_builder for `framework`'s runner, as the core takes it (module, folder); it pickles, as a plug-in's
    check in a process of its own needs."""
    return partial(plugin_builder, framework)


def check_plugin_decoder(builder: KerasModel, spec: ModelSpec) -> None:
    """A TensorFlow plug-in that declares it generates must give its decoder: refused at load, not at its first
    run."""
    if builder.decoder is None:
        raise PluginError(
            f"{spec.source.folder}/build_tensorflow.py: model.toml declares generates = true, but it defines no "
            "decoder(model), which generation needs (docs/your-model.md, A decoder that generates)"
        )


# The built-in models, defined once in Keras 3 (layers and keras.ops only): the TensorFlow runner serves them with
# plug-ins' build_tensorflow.py (fwbench_tensorflow.models), every Keras runner with plug-ins' build_keras.py.
MODELS: ModelRegistry = ModelRegistry("keras", plugin_builder_of("keras"))

from . import llama, speech, text, vision, vit  # noqa: E402,F401  (each registers its models)
