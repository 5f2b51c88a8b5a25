"""Flax builders for the catalog's models, registered by name; no weights are downloaded.

Written with flax.linen rather than flax.nnx: a linen module is a pure description, and its parameters
and BatchNorm statistics are plain arrays passed in and returned, so one function of (state, batch) can
be jitted, differentiated and given its buffers to reuse (donated) with nothing hidden in objects;
nnx's mutable modules need lifting (nnx.jit, nnx.split) for the same.

Every builder takes (spec, options, dtype) and returns a module whose __call__(inputs, train) gives logits
in `dtype` from float32 parameters: (batch, classes), (batch, seq, vocab), or for CTC (batch, frames,
alphabet); images come NHWC. Submodules are named as PyTorch's modules (the variable
"layer1.0/conv1/kernel" is layer1.0.conv1.weight), which is how PyTorch's weights load by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import flax.linen as nn
import jax.numpy as jnp

from fwbench_core.models import ModelSpec
from fwbench_core.plugin_modules import PluginError, builder_attribute
from fwbench_core.registry import ModelRegistry


@dataclass(frozen=True)
class FlaxModel:
    build: Callable[[ModelSpec, dict[str, str], jnp.dtype], nn.Module]
    # Initial weights: every matrix and embedding normal(0, init_std) (BERT, GPT-2); None: PyTorch's defaults.
    init_std: float | None = None


def plugin_builder(module, folder) -> FlaxModel:
    """A plug-in's build_jax.py: build(spec, options, dtype) -> flax.linen.Module, submodules named as
    PyTorch's (how parity loads PyTorch's weights); optionally init_std, as FlaxModel's."""
    build = builder_attribute(module, folder, "jax", "build", "spec, options, dtype")
    init_std = getattr(module, "init_std", None)
    if init_std is not None and (isinstance(init_std, bool) or not isinstance(init_std, (int, float)) or init_std <= 0):
        raise PluginError(f"{folder}/build_jax.py: init_std must be a positive number or None, not {init_std!r}")
    return FlaxModel(build, init_std)


MODELS: ModelRegistry = ModelRegistry("jax", plugin_builder)

from . import inception, llama, speech, text, vision, vit  # noqa: E402,F401  (each registers its models)
