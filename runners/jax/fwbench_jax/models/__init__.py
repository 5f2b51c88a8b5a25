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

import logging
from collections.abc import Callable
from dataclasses import dataclass

import flax.linen as nn
import jax.numpy as jnp

from fwbench_core.model_resolution import resolve_options
from fwbench_core.models import ModelSpec
from fwbench_core.plugin_modules import PluginError, builder_attribute
from fwbench_core.registry import ModelRegistry

from ..generation import CACHE_INTERFACE, can_generate

log = logging.getLogger("fwbench.runner")


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


def check_plugin_decoder(builder: FlaxModel, spec: ModelSpec) -> None:
    """A plug-in that declares it generates must build a module with the cache interface: refused at load, not at
    its first run. A Flax module holds no weights, so building it costs nothing; one whose build() raises is
    checked at its first generate run instead, which reports what it raises."""
    try:
        module = builder.build(spec, resolve_options(spec, {}), jnp.float32)
    except Exception as error:  # the plug-in's own code: what it raises is its run's to report
        log.info("plug-in %s: build() raised %r; its decoder is checked when it generates", spec.name, error)
        return
    if not can_generate(module):
        raise PluginError(
            f"{spec.source.folder}/build_jax.py: model.toml declares generates = true, but build()'s module "
            f"({type(module).__name__}) has no {CACHE_INTERFACE}, which generation needs (docs/your-model.md, A "
            "decoder that generates)"
        )


MODELS: ModelRegistry = ModelRegistry("jax", plugin_builder, check_plugin_decoder)

from . import inception, llama, speech, text, vision, vit  # noqa: E402,F401  (each registers its models)
