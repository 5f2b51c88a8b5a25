"""tiny_cnn in Flax, layer for layer as build_torch.py; images arrive NHWC.

Submodules are named as PyTorch's modules (the Flax variable blocks.0/conv/kernel is PyTorch's
blocks.0.conv.weight), which is how the JAX runner loads PyTorch's weights. Convolutions pad 1 on every side as
PyTorch does ("SAME" would pad a stride-2 convolution of an even size by (0, 1)).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

# (out channels, stride) per block, as in build_torch.py.
BLOCKS = ((32, 1), (64, 2), (128, 2))
# No init_std: the runner draws PyTorch's default initialisation (He normal over fan-out for convolutions).
init_std = None


class ConvBlock(nn.Module):
    features: int
    stride: int
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.Conv(
            self.features,
            (3, 3),
            strides=self.stride,
            padding=((1, 1), (1, 1)),
            use_bias=False,
            dtype=self.dtype,
            name="conv",
        )(x)
        # PyTorch's BatchNorm: eps 1e-5, running statistics updated with 0.1 of the new value (Flax: 0.9 of the old).
        x = nn.BatchNorm(use_running_average=not train, epsilon=1e-5, momentum=0.9, dtype=self.dtype, name="bn")(x)
        return nn.relu(x)


class TinyCnn(nn.Module):
    classes: int
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        for index, (features, stride) in enumerate(BLOCKS):
            x = ConvBlock(features, stride, self.dtype, name=f"blocks.{index}")(x, train)
        x = jnp.mean(x, axis=(1, 2))  # global average pool
        return nn.Dense(self.classes, dtype=self.dtype, name="classifier")(x)


def build(spec, options: dict[str, str], dtype: Any) -> nn.Module:
    return TinyCnn(spec.head(options).outputs, dtype)
