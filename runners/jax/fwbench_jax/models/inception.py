"""Inception v3 as torchvision defines it (without the auxiliary classifier, as the other runners build it), its
layers named as torchvision's attributes so that parity loads PyTorch's weights."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from fwbench_core.models import ModelSpec

from . import MODELS, FlaxModel
from .vision import batch_norm

INCEPTION_BN_EPSILON = 1e-3
INCEPTION_DROPOUT = 0.5


def basic_conv(
    x,
    features: int,
    kernel: tuple[int, int],
    name: str,
    train: bool,
    dtype: Any,
    stride: int = 1,
    padding: tuple[int, int] = (0, 0),
):
    """torchvision's BasicConv2d, in the calling module: {name}.conv (no bias), {name}.bn (epsilon 1e-3), ReLU."""
    x = nn.Conv(
        features,
        kernel,
        strides=stride,
        padding=tuple((p, p) for p in padding),
        use_bias=False,
        dtype=dtype,
        name=f"{name}.conv",
    )(x)
    return nn.relu(batch_norm(f"{name}.bn", train, dtype, INCEPTION_BN_EPSILON)(x))


def average_pool_3x3(x):
    return nn.avg_pool(x, (3, 3), strides=(1, 1), padding=((1, 1), (1, 1)), count_include_pad=True)


def max_pool_3x3_stride_2(x):
    return nn.max_pool(x, (3, 3), strides=(2, 2))


class InceptionBlock(nn.Module):
    """One of torchvision's InceptionA to InceptionE blocks: branches concatenated along the channels in
    torchvision's order, each branch's layers named as torchvision's attributes."""

    kind: str  # "A" to "E"
    width: int  # A: the pool branch's features; C: the 7x7 branches' channels; unused otherwise
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        def c(y, features, kernel, name, stride=1, padding=(0, 0)):
            return basic_conv(y, features, kernel, name, train, self.dtype, stride, padding)

        one, three, five = (1, 1), (3, 3), (5, 5)
        if self.kind == "A":
            b5 = c(c(x, 48, one, "branch5x5_1"), 64, five, "branch5x5_2", padding=(2, 2))
            b3 = c(
                c(c(x, 64, one, "branch3x3dbl_1"), 96, three, "branch3x3dbl_2", padding=(1, 1)),
                96,
                three,
                "branch3x3dbl_3",
                padding=(1, 1),
            )
            branches = [c(x, 64, one, "branch1x1"), b5, b3, c(average_pool_3x3(x), self.width, one, "branch_pool")]
        elif self.kind == "B":
            b3 = c(
                c(c(x, 64, one, "branch3x3dbl_1"), 96, three, "branch3x3dbl_2", padding=(1, 1)),
                96,
                three,
                "branch3x3dbl_3",
                stride=2,
            )
            branches = [c(x, 384, three, "branch3x3", stride=2), b3, max_pool_3x3_stride_2(x)]
        elif self.kind == "C":
            c7 = self.width
            b7 = c(x, c7, one, "branch7x7_1")
            b7 = c(c(b7, c7, (1, 7), "branch7x7_2", padding=(0, 3)), 192, (7, 1), "branch7x7_3", padding=(3, 0))
            d7 = c(x, c7, one, "branch7x7dbl_1")
            for index, (features, kernel, padding) in enumerate(
                ((c7, (7, 1), (3, 0)), (c7, (1, 7), (0, 3)), (c7, (7, 1), (3, 0)), (192, (1, 7), (0, 3))), start=2
            ):
                d7 = c(d7, features, kernel, f"branch7x7dbl_{index}", padding=padding)
            branches = [c(x, 192, one, "branch1x1"), b7, d7, c(average_pool_3x3(x), 192, one, "branch_pool")]
        elif self.kind == "D":
            b3 = c(c(x, 192, one, "branch3x3_1"), 320, three, "branch3x3_2", stride=2)
            b7 = c(x, 192, one, "branch7x7x3_1")
            b7 = c(c(b7, 192, (1, 7), "branch7x7x3_2", padding=(0, 3)), 192, (7, 1), "branch7x7x3_3", padding=(3, 0))
            branches = [b3, c(b7, 192, three, "branch7x7x3_4", stride=2), max_pool_3x3_stride_2(x)]
        else:
            b3 = c(x, 384, one, "branch3x3_1")
            b3 = [
                c(b3, 384, (1, 3), "branch3x3_2a", padding=(0, 1)),
                c(b3, 384, (3, 1), "branch3x3_2b", padding=(1, 0)),
            ]
            d3 = c(c(x, 448, one, "branch3x3dbl_1"), 384, three, "branch3x3dbl_2", padding=(1, 1))
            d3 = [
                c(d3, 384, (1, 3), "branch3x3dbl_3a", padding=(0, 1)),
                c(d3, 384, (3, 1), "branch3x3dbl_3b", padding=(1, 0)),
            ]
            branches = [c(x, 320, one, "branch1x1"), *b3, *d3, c(average_pool_3x3(x), 192, one, "branch_pool")]
        return jnp.concatenate(branches, axis=-1)


# torchvision's Inception3 after its stem: (attribute, block kind, width).
INCEPTION_BLOCKS = (
    ("Mixed_5b", "A", 32),
    ("Mixed_5c", "A", 64),
    ("Mixed_5d", "A", 64),
    ("Mixed_6a", "B", 0),
    ("Mixed_6b", "C", 128),
    ("Mixed_6c", "C", 160),
    ("Mixed_6d", "C", 160),
    ("Mixed_6e", "C", 192),
    ("Mixed_7a", "D", 0),
    ("Mixed_7b", "E", 0),
    ("Mixed_7c", "E", 0),
)


class InceptionV3(nn.Module):
    """torchvision's inception_v3 without the auxiliary classifier and without its input transform, as the
    PyTorch runner builds it. Its initial weights are the backend's (He normal), not torchvision's truncated
    normal: the same shapes, a different draw."""

    classes: int
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        x = basic_conv(x, 32, (3, 3), "Conv2d_1a_3x3", train, self.dtype, stride=2)
        x = basic_conv(x, 32, (3, 3), "Conv2d_2a_3x3", train, self.dtype)
        x = max_pool_3x3_stride_2(basic_conv(x, 64, (3, 3), "Conv2d_2b_3x3", train, self.dtype, padding=(1, 1)))
        x = basic_conv(x, 80, (1, 1), "Conv2d_3b_1x1", train, self.dtype)
        x = max_pool_3x3_stride_2(basic_conv(x, 192, (3, 3), "Conv2d_4a_3x3", train, self.dtype))
        for name, kind, width in INCEPTION_BLOCKS:
            x = InceptionBlock(kind, width, self.dtype, name=name)(x, train)
        x = nn.Dropout(INCEPTION_DROPOUT, deterministic=not train)(jnp.mean(x, axis=(1, 2)))
        return nn.Dense(self.classes, dtype=self.dtype, name="fc")(x)


def _inception_v3(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
    return InceptionV3(spec.head(options).outputs, dtype)


MODELS.register("inception_v3")(FlaxModel(_inception_v3))
