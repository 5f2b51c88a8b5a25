"""Keras builders for the catalog's models, channels-last, no weights.

Where keras.applications has the network (MobileNetV2) it is used as is; ResNet-18
is not there, so it is defined here to match torchvision's: explicit symmetric
zero padding (Keras' "same" pads stride-2 convolutions asymmetrically), no
convolution biases, BatchNorm with PyTorch's epsilon and momentum.
"""

from __future__ import annotations

import keras
from fwbench_core.registry import ModelRegistry
from keras import layers

MODELS: ModelRegistry = ModelRegistry("tensorflow")

# PyTorch BatchNorm2d defaults: eps 1e-5, running stats updated with 0.1 of the new value.
_BN = dict(epsilon=1e-5, momentum=0.9)


def _conv_bn(x, filters: int, kernel: int, stride: int, name: str, relu: bool = True):
    if kernel > 1:
        x = layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
    x = layers.Conv2D(filters, kernel, strides=stride, use_bias=False, name=f"{name}_conv")(x)
    x = layers.BatchNormalization(**_BN, name=f"{name}_bn")(x)
    return layers.ReLU(name=f"{name}_relu")(x) if relu else x


def _basic_block(x, filters: int, stride: int, name: str):
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = _conv_bn(x, filters, 1, stride, f"{name}_down", relu=False)
    y = _conv_bn(x, filters, 3, stride, f"{name}_1")
    y = _conv_bn(y, filters, 3, 1, f"{name}_2", relu=False)
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([shortcut, y]))


@MODELS.register("resnet18")
def resnet18(input_shape_hwc: tuple[int, int, int], num_classes: int) -> keras.Model:
    inputs = keras.Input(shape=input_shape_hwc)
    x = _conv_bn(inputs, 64, 7, 2, "stem")
    # Inputs to the pool are non-negative (after ReLU), so zero padding acts as PyTorch's -inf padding.
    x = layers.ZeroPadding2D(1, name="pool_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool")(x)
    for stage, filters in enumerate((64, 128, 256, 512), start=1):
        x = _basic_block(x, filters, 1 if stage == 1 else 2, f"layer{stage}_0")
        x = _basic_block(x, filters, 1, f"layer{stage}_1")
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    outputs = layers.Dense(num_classes, name="fc")(x)
    return keras.Model(inputs, outputs, name="resnet18")


@MODELS.register("mobilenet_v2")
def mobilenet_v2(input_shape_hwc: tuple[int, int, int], num_classes: int) -> keras.Model:
    return keras.applications.MobileNetV2(
        input_shape=input_shape_hwc, weights=None, classes=num_classes, classifier_activation=None
    )
