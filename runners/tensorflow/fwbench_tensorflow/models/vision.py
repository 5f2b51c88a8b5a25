"""Vision models, matching torchvision's.

Where keras.applications has the same network it is used; otherwise it is
defined here to match PyTorch's: explicit symmetric zero padding (Keras' "same"
pads stride-2 convolutions asymmetrically), no convolution biases where
PyTorch has none, BatchNorm with PyTorch's epsilon and momentum.
"""

from __future__ import annotations

import keras
from fwbench_core.spec import ModelSpec
from keras import layers

from .. import torch_weights
from . import MODELS, KerasModel, TorchWeights

# PyTorch BatchNorm2d defaults: eps 1e-5, running stats updated with 0.1 of the new value.
TORCH_BN = dict(epsilon=1e-5, momentum=0.9)


def conv_bn(x, filters: int, kernel: int, stride: int, name: str, relu: bool = True):
    """Conv (symmetric padding kernel//2, no bias), BatchNorm, optional ReLU: PyTorch's usual block."""
    if kernel > 1:
        x = layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
    x = layers.Conv2D(filters, kernel, strides=stride, use_bias=False, name=f"{name}_conv")(x)
    x = layers.BatchNormalization(**TORCH_BN, name=f"{name}_bn")(x)
    return layers.ReLU(name=f"{name}_relu")(x) if relu else x


def load_conv_bn(model: keras.Model, weights: TorchWeights, name: str, conv_prefix: str, bn_prefix: str) -> None:
    torch_weights.conv(model.get_layer(f"{name}_conv"), weights, conv_prefix)
    torch_weights.batch_norm(model.get_layer(f"{name}_bn"), weights, bn_prefix)


# ResNet, as torchvision defines it (v1.5: a bottleneck's stride sits on its 3x3 convolution).
RESNET_BLOCKS = {"resnet18": ("basic", (2, 2, 2, 2)), "resnet50": ("bottleneck", (3, 4, 6, 3)),
                 "resnet152": ("bottleneck", (3, 8, 36, 3))}
# Keras name suffix -> torchvision attribute, per block type.
RESNET_CONVS = {"basic": (("1", "conv1", "bn1"), ("2", "conv2", "bn2")),
                "bottleneck": (("1", "conv1", "bn1"), ("2", "conv2", "bn2"), ("3", "conv3", "bn3"))}


def _resnet_block(x, kind: str, width: int, stride: int, name: str):
    out_channels = width * (4 if kind == "bottleneck" else 1)
    shortcut = x
    if stride != 1 or x.shape[-1] != out_channels:
        shortcut = conv_bn(x, out_channels, 1, stride, f"{name}_down", relu=False)
    if kind == "basic":
        y = conv_bn(x, width, 3, stride, f"{name}_1")
        y = conv_bn(y, width, 3, 1, f"{name}_2", relu=False)
    else:
        y = conv_bn(x, width, 1, 1, f"{name}_1")
        y = conv_bn(y, width, 3, stride, f"{name}_2")
        y = conv_bn(y, out_channels, 1, 1, f"{name}_3", relu=False)
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([shortcut, y]))


def _resnet(model_name: str) -> KerasModel:
    kind, depths = RESNET_BLOCKS[model_name]

    def build(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
        inputs = keras.Input(shape=input_shape)
        x = conv_bn(inputs, 64, 7, 2, "stem")
        # The pool's inputs are non-negative (after ReLU): zero padding acts as PyTorch's -inf padding.
        x = layers.ZeroPadding2D(1, name="pool_pad")(x)
        x = layers.MaxPooling2D(3, strides=2, name="pool")(x)
        for stage, (width, depth) in enumerate(zip((64, 128, 256, 512), depths), start=1):
            for block in range(depth):
                stride = 2 if stage > 1 and block == 0 else 1
                x = _resnet_block(x, kind, width, stride, f"layer{stage}_{block}")
        x = layers.GlobalAveragePooling2D(name="avgpool")(x)
        outputs = layers.Dense(spec.head(options).outputs, name="fc")(x)
        return keras.Model(inputs, outputs, name=model_name)

    def load(model: keras.Model, weights: TorchWeights) -> None:
        load_conv_bn(model, weights, "stem", "conv1", "bn1")
        for stage, depth in enumerate(depths, start=1):
            for block in range(depth):
                name, prefix = f"layer{stage}_{block}", f"layer{stage}.{block}"
                for suffix, conv_attr, bn_attr in RESNET_CONVS[kind]:
                    load_conv_bn(model, weights, f"{name}_{suffix}", f"{prefix}.{conv_attr}", f"{prefix}.{bn_attr}")
                if f"{prefix}.downsample.0.weight" in weights:
                    load_conv_bn(model, weights, f"{name}_down", f"{prefix}.downsample.0", f"{prefix}.downsample.1")
        torch_weights.dense(model.get_layer("fc"), weights, "fc")

    return KerasModel(build, load)


for _name in RESNET_BLOCKS:
    MODELS.register(_name)(_resnet(_name))


def _mobilenet_v2(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    return keras.applications.MobileNetV2(
        input_shape=input_shape, weights=None, classes=spec.head(options).outputs, classifier_activation=None
    )


MODELS.register("mobilenet_v2")(KerasModel(_mobilenet_v2))
