"""Vision models, matching torchvision's layer for layer: symmetric zero padding of kernel // 2 (as
PyTorch pads; "SAME" would pad stride-2 convolutions of even sizes (0, 1)), no convolution biases where
PyTorch has none, BatchNorm with PyTorch's epsilon and momentum. The backend draws the initial weights
(fwbench_jax.weights.initial_variables), not Flax's initialisers.

Flax's BatchNorm keeps the biased batch variance as its running variance where PyTorch keeps the
unbiased one: training updates the statistics slightly differently, inference with given statistics
is the same.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fwbench_core.models import ModelSpec

from . import MODELS, FlaxModel

# PyTorch's BatchNorm defaults: eps 1e-5, running stats updated with 0.1 of the new value (Flax: 0.9 of the old).
TORCH_BN = dict(epsilon=1e-5, momentum=0.9)


def conv(
    features: int, kernel: int, stride: int, name: str, dtype: Any, groups: int = 1, bias: bool = False
) -> nn.Conv:
    pad = kernel // 2
    return nn.Conv(
        features,
        (kernel, kernel),
        strides=stride,
        padding=((pad, pad), (pad, pad)),
        feature_group_count=groups,
        use_bias=bias,
        dtype=dtype,
        name=name,
    )


def batch_norm(name: str, train: bool, dtype: Any, epsilon: float = TORCH_BN["epsilon"]) -> nn.BatchNorm:
    return nn.BatchNorm(
        use_running_average=not train, dtype=dtype, name=name, epsilon=epsilon, momentum=TORCH_BN["momentum"]
    )


# ResNet as torchvision defines it (v1.5: a bottleneck's stride sits on its 3x3 convolution).
RESNET_BLOCKS = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}


class ResNetBlock(nn.Module):
    kind: str  # "basic" or "bottleneck"
    width: int
    stride: int
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        out_channels = self.width * (4 if self.kind == "bottleneck" else 1)
        if self.kind == "basic":
            convs = ((self.width, 3, self.stride), (self.width, 3, 1))
        else:
            convs = ((self.width, 1, 1), (self.width, 3, self.stride), (out_channels, 1, 1))
        y = x
        for index, (features, kernel, stride) in enumerate(convs, start=1):
            y = conv(features, kernel, stride, f"conv{index}", self.dtype)(y)
            y = batch_norm(f"bn{index}", train, self.dtype)(y)
            if index < len(convs):
                y = nn.relu(y)
        shortcut = x
        if self.stride != 1 or x.shape[-1] != out_channels:
            shortcut = conv(out_channels, 1, self.stride, "downsample.0", self.dtype)(x)
            shortcut = batch_norm("downsample.1", train, self.dtype)(shortcut)
        return nn.relu(y + shortcut)


class ResNet(nn.Module):
    kind: str
    depths: tuple[int, ...]
    classes: int
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        x = conv(64, 7, 2, "conv1", self.dtype)(x)
        x = nn.relu(batch_norm("bn1", train, self.dtype)(x))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for stage, (width, depth) in enumerate(zip((64, 128, 256, 512), self.depths), start=1):
            for block in range(depth):
                stride = 2 if stage > 1 and block == 0 else 1
                x = ResNetBlock(self.kind, width, stride, self.dtype, name=f"layer{stage}.{block}")(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.classes, dtype=self.dtype, name="fc")(x)


def _resnet(model_name: str) -> FlaxModel:
    kind, depths = RESNET_BLOCKS[model_name]

    def build(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
        return ResNet(kind, depths, spec.head(options).outputs, dtype)

    return FlaxModel(build)


for _name in RESNET_BLOCKS:
    MODELS.register(_name)(_resnet(_name))


# MobileNetV2 as torchvision defines it (width 1.0): expansion t, channels c, repeats n, first stride s.
MOBILENET_V2_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
MOBILENET_V2_STEM, MOBILENET_V2_LAST, MOBILENET_V2_DROPOUT = 32, 1280, 0.2


def conv_bn_relu6(x, features: int, kernel: int, stride: int, prefix: str, train: bool, dtype: Any, depthwise=False):
    """torchvision's Conv2dNormActivation with ReLU6, in the calling module: convolution {prefix}.0, BatchNorm {prefix}.1."""
    groups = x.shape[-1] if depthwise else 1
    x = conv(features, kernel, stride, f"{prefix}.0", dtype, groups=groups)(x)
    return nn.relu6(batch_norm(f"{prefix}.1", train, dtype)(x))


class InvertedResidual(nn.Module):
    """torchvision's InvertedResidual: [1x1 expand,] 3x3 depthwise, 1x1 linear projection, residual if shapes agree."""

    out_channels: int
    stride: int
    expansion: int
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        in_channels = x.shape[-1]
        hidden = int(round(in_channels * self.expansion))
        y, index = x, 0
        if self.expansion != 1:
            y = conv_bn_relu6(y, hidden, 1, 1, "conv.0", train, self.dtype)
            index = 1
        y = conv_bn_relu6(y, hidden, 3, self.stride, f"conv.{index}", train, self.dtype, depthwise=True)
        y = conv(self.out_channels, 1, 1, f"conv.{index + 1}", self.dtype)(y)
        y = batch_norm(f"conv.{index + 2}", train, self.dtype)(y)
        return x + y if self.stride == 1 and in_channels == self.out_channels else y


class MobileNetV2(nn.Module):
    classes: int
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        x = conv_bn_relu6(x, MOBILENET_V2_STEM, 3, 2, "features.0", train, self.dtype)
        index = 1
        for expansion, channels, repeats, stride in MOBILENET_V2_SETTING:
            for repeat in range(repeats):
                block = InvertedResidual(
                    channels, stride if repeat == 0 else 1, expansion, self.dtype, name=f"features.{index}"
                )
                x = block(x, train)
                index += 1
        x = conv_bn_relu6(x, MOBILENET_V2_LAST, 1, 1, f"features.{index}", train, self.dtype)
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dropout(MOBILENET_V2_DROPOUT, deterministic=not train, name="classifier.0")(x)
        return nn.Dense(self.classes, dtype=self.dtype, name="classifier.1")(x)


def _mobilenet_v2(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
    return MobileNetV2(spec.head(options).outputs, dtype)


MODELS.register("mobilenet_v2")(FlaxModel(_mobilenet_v2))


def adaptive_average_pool(x, output_size: int):
    """PyTorch's AdaptiveAvgPool2d for static sizes (NHWC): output bin i along a side of size s averages
    positions floor(i*s/n) up to ceil((i+1)*s/n), so bins overlap where n does not divide s and inputs
    smaller than n repeat. Slices and means only, so the FLOPs count sees nothing here, as PyTorch's."""
    for axis in (1, 2):
        size = x.shape[axis]
        if size == output_size:
            continue
        bins = [((i * size) // output_size, -(-((i + 1) * size) // output_size)) for i in range(output_size)]
        x = jnp.concatenate(
            [jnp.mean(jax.lax.slice_in_dim(x, start, end, axis=axis), axis=axis, keepdims=True) for start, end in bins],
            axis=axis,
        )
    return x


# VGG-16 (configuration "D", no BatchNorm) as torchvision defines it; "M" is a 2x2 max pool.
VGG16_FEATURES = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
VGG_POOLED, VGG_HIDDEN, VGG_DROPOUT = 7, 4096, 0.5


class VGG16(nn.Module):
    classes: int
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        index = 0
        for item in VGG16_FEATURES:
            if item == "M":
                x = nn.max_pool(x, (2, 2), strides=(2, 2))  # floor mode, as PyTorch's default
                index += 1
            else:
                x = nn.relu(conv(item, 3, 1, f"features.{index}", self.dtype, bias=True)(x))
                index += 2
        x = adaptive_average_pool(x, VGG_POOLED)
        # Flattened as PyTorch flattens (C, H, W), so that its first classifier layer's weights fit as they are.
        x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
        for index in (0, 3):
            x = nn.relu(nn.Dense(VGG_HIDDEN, dtype=self.dtype, name=f"classifier.{index}")(x))
            x = nn.Dropout(VGG_DROPOUT, deterministic=not train)(x)
        return nn.Dense(self.classes, dtype=self.dtype, name="classifier.6")(x)


def _vgg16(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
    return VGG16(spec.head(options).outputs, dtype)


MODELS.register("vgg16")(FlaxModel(_vgg16))


# EfficientNet (V1) as torchvision defines it: per stage (expansion, kernel, stride, input channels, output
# channels, repeats) at width and depth 1, scaled by each variant's multipliers; stochastic depth up to 0.2.
EFFICIENTNET_STAGES = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)
EFFICIENTNET_VARIANTS = {
    "efficientnet_b0": (1.0, 1.0, 0.2),
    "efficientnet_b4": (1.4, 1.8, 0.4),
}  # width, depth, dropout
EFFICIENTNET_STOCHASTIC_DEPTH = 0.2


def make_divisible(value: float, divisor: int = 8) -> int:
    """torchvision's channel rounding: to the nearest multiple of divisor, never below 90% of value."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def conv_bn_silu(
    x,
    features: int,
    kernel: int,
    stride: int,
    prefix: str,
    train: bool,
    dtype: Any,
    groups: int = 1,
    activation: bool = True,
):
    """torchvision's Conv2dNormActivation with SiLU, in the calling module: convolution {prefix}.0, BatchNorm {prefix}.1."""
    x = conv(features, kernel, stride, f"{prefix}.0", dtype, groups=groups)(x)
    x = batch_norm(f"{prefix}.1", train, dtype)(x)
    return nn.silu(x) if activation else x


class MBConv(nn.Module):
    """torchvision's MBConv: [1x1 expand,] depthwise, squeeze-and-excitation, 1x1 projection, and a residual
    under stochastic depth (whole samples dropped in training, the rest scaled) where shapes agree."""

    expansion: int
    kernel: int
    stride: int
    out_channels: int
    drop_rate: float
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        in_channels = x.shape[-1]
        expanded = make_divisible(in_channels * self.expansion)
        y, index = x, 0
        if expanded != in_channels:
            y = conv_bn_silu(y, expanded, 1, 1, "block.0", train, self.dtype)
            index = 1
        y = conv_bn_silu(y, expanded, self.kernel, self.stride, f"block.{index}", train, self.dtype, groups=expanded)
        squeeze = max(1, in_channels // 4)
        scale = jnp.mean(y, axis=(1, 2), keepdims=True)
        scale = nn.silu(nn.Conv(squeeze, (1, 1), dtype=self.dtype, name=f"block.{index + 1}.fc1")(scale))
        y = y * nn.sigmoid(nn.Conv(expanded, (1, 1), dtype=self.dtype, name=f"block.{index + 1}.fc2")(scale))
        y = conv_bn_silu(y, self.out_channels, 1, 1, f"block.{index + 2}", train, self.dtype, activation=False)
        if self.stride != 1 or in_channels != self.out_channels:
            return y
        if train and self.drop_rate > 0:
            survival = 1.0 - self.drop_rate
            keep = jax.random.bernoulli(self.make_rng("dropout"), survival, (y.shape[0], 1, 1, 1))
            y = y * keep.astype(y.dtype) / survival
        return x + y


class EfficientNet(nn.Module):
    width: float
    depth: float
    dropout: float
    classes: int
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        x = conv_bn_silu(
            x, make_divisible(EFFICIENTNET_STAGES[0][3] * self.width), 3, 2, "features.0", train, self.dtype
        )
        repeats = [int(math.ceil(stage[5] * self.depth)) for stage in EFFICIENTNET_STAGES]
        block_id = 0
        for stage, (expansion, kernel, stride, _, channels, _) in enumerate(EFFICIENTNET_STAGES):
            for repeat in range(repeats[stage]):
                drop_rate = EFFICIENTNET_STOCHASTIC_DEPTH * block_id / sum(repeats)
                block = MBConv(
                    expansion,
                    kernel,
                    stride if repeat == 0 else 1,
                    make_divisible(channels * self.width),
                    drop_rate,
                    self.dtype,
                    name=f"features.{stage + 1}.{repeat}",
                )
                x = block(x, train)
                block_id += 1
        x = conv_bn_silu(x, 4 * x.shape[-1], 1, 1, f"features.{len(EFFICIENTNET_STAGES) + 1}", train, self.dtype)
        x = nn.Dropout(self.dropout, deterministic=not train)(jnp.mean(x, axis=(1, 2)))
        return nn.Dense(self.classes, dtype=self.dtype, name="classifier.1")(x)


def _efficientnet(model_name: str) -> FlaxModel:
    width, depth, dropout = EFFICIENTNET_VARIANTS[model_name]

    def build(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
        return EfficientNet(width, depth, dropout, spec.head(options).outputs, dtype)

    return FlaxModel(build)


for _name in EFFICIENTNET_VARIANTS:
    MODELS.register(_name)(_efficientnet(_name))
