"""ViT-B/16: the PyTorch runner's network (fwbench_torch.models.vit, torchvision's vit_b_16 layer for layer),
named as its modules so that its state_dict loads by name. Patches are taken row by row, as PyTorch flattens
them; attention is text.py's two einsums.

The position embeddings are sized from the image the module is first called with (the variables' shapes come
from the run's input shape): one per patch and one for the class token; sides must be multiples of 16. The
backend draws the initial variables by name (fwbench_jax.weights.initial_variables): the class token and the
position embeddings start at zero there, where PyTorch draws the position embeddings normal(0, 0.02).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from fwbench_core.architectures import VIT_B16, VIT_EPS, vit_patch_grid
from fwbench_core.models import ModelSpec

from . import MODELS, FlaxModel
from .text import attention


class EncoderBlock(nn.Module):
    """Pre-LayerNorm: x + attention(norm(x)), then x + MLP(norm(x)); no dropout, as torchvision's vit_b_16."""

    dtype: Any

    @nn.compact
    def __call__(self, x):
        c = VIT_B16
        dense = lambda width, name: nn.Dense(width, dtype=self.dtype, name=name)
        norm = lambda name: nn.LayerNorm(epsilon=VIT_EPS, dtype=self.dtype, name=name)
        q, k, v = jnp.split(dense(3 * c["hidden"], "self_attention.qkv")(norm("ln_1")(x)), 3, axis=-1)
        no_dropout = nn.Dropout(0.0, deterministic=True)
        x = x + dense(c["hidden"], "self_attention.out_proj")(attention(q, k, v, c["heads"], no_dropout, causal=False))
        h = nn.gelu(dense(c["mlp"], "mlp.fc1")(norm("ln_2")(x)), approximate=False)
        return x + dense(c["hidden"], "mlp.fc2")(h)


class Encoder(nn.Module):
    dtype: Any

    @nn.compact
    def __call__(self, x):
        c = VIT_B16
        positions = self.param("pos_embedding", nn.initializers.zeros, (1, x.shape[1], c["hidden"]))
        x = x + positions.astype(self.dtype)
        for index in range(c["layers"]):
            x = EncoderBlock(self.dtype, name=f"layers.{index}")(x)
        return nn.LayerNorm(epsilon=VIT_EPS, dtype=self.dtype, name="ln")(x)


class VisionTransformer(nn.Module):
    classes: int
    dtype: Any

    @nn.compact
    def __call__(self, images, train: bool):
        c = VIT_B16
        batch, height, width, _ = images.shape
        rows, columns = vit_patch_grid(height, width)
        patch = (c["patch"], c["patch"])
        patches = nn.Conv(c["hidden"], patch, strides=patch, padding="VALID", dtype=self.dtype, name="conv_proj")(
            images
        )
        patches = patches.reshape(batch, rows * columns, c["hidden"])  # row by row, as PyTorch's flatten
        class_token = self.param("class_token", nn.initializers.zeros, (1, 1, c["hidden"])).astype(self.dtype)
        tokens = jnp.concatenate([jnp.broadcast_to(class_token, (batch, 1, c["hidden"])), patches], axis=1)
        return nn.Dense(self.classes, dtype=self.dtype, name="head")(Encoder(self.dtype, name="encoder")(tokens)[:, 0])


def _vit_b16(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
    return VisionTransformer(spec.head(options).outputs, dtype)


MODELS.register("vit_b16")(FlaxModel(_vit_b16))
