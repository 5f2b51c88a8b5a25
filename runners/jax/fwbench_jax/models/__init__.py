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
from fwbench_core.registry import ModelRegistry
from fwbench_core.spec import ModelSpec


@dataclass(frozen=True)
class FlaxModel:
    build: Callable[[ModelSpec, dict[str, str], jnp.dtype], nn.Module]
    # Initial weights: every matrix and embedding normal(0, init_std) (BERT, GPT-2); None: PyTorch's defaults.
    init_std: float | None = None


MODELS: ModelRegistry = ModelRegistry("jax")

from . import speech, text, vision  # noqa: E402,F401  (each registers its models)
