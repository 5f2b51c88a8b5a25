"""Vision models, matching torchvision's.

Where keras.applications has the same network it is used; otherwise it is
defined here to match PyTorch's: explicit symmetric zero padding (Keras' "same"
pads stride-2 convolutions asymmetrically), no convolution biases where
PyTorch has none, BatchNorm with PyTorch's epsilon and momentum.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

from fwbench_core.models import ModelSpec

from .. import torch_weights
from . import MODELS, TORCH_BN, KerasModel, TorchWeights


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
RESNET_BLOCKS = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
# Keras name suffix -> torchvision attribute, per block type.
RESNET_CONVS = {
    "basic": (("1", "conv1", "bn1"), ("2", "conv2", "bn2")),
    "bottleneck": (("1", "conv1", "bn1"), ("2", "conv2", "bn2"), ("3", "conv3", "bn3")),
}


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


def load_by_name(model: keras.Model, weights: TorchWeights, special: dict | None = None) -> None:
    """Copy every weighted layer from the PyTorch parameters its name spells ("features_1_conv_0_0" reads
    features.1.conv.0.0), or through `special` (layer name -> loader); every PyTorch tensor must be used."""
    special = special or {}
    used: set[str] = set()
    for layer in model.layers:
        if not layer.weights:
            continue
        prefix = layer.name.replace("_", ".")
        if layer.name in special:
            special[layer.name](layer, weights, prefix)
        elif isinstance(layer, layers.BatchNormalization):
            torch_weights.batch_norm(layer, weights, prefix)
        elif isinstance(layer, layers.Dense):
            torch_weights.dense(layer, weights, prefix)
        else:
            torch_weights.conv(layer, weights, prefix)
        used.update(key for key in weights if key.startswith(f"{prefix}."))
    unused = sorted(set(weights) - used)
    if unused:
        raise ValueError(f"{model.name}: PyTorch tensors with no Keras layer: {', '.join(unused[:8])}")


def conv_bn_relu6(x, filters: int, kernel: int, stride: int, name: str, depthwise: bool = False):
    """torchvision's Conv2dNormActivation with ReLU6: layers {name}_0 (conv), {name}_1 (BN), as in its state_dict."""
    if stride > 1:
        # Symmetric padding kernel//2, as PyTorch; "same" would pad stride-2 convolutions of even sizes (0, 1).
        x = layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
    padding = "valid" if stride > 1 else "same"  # stride 1, odd kernel: "same" pads kernel//2 on each side
    if depthwise:
        x = layers.DepthwiseConv2D(kernel, strides=stride, padding=padding, use_bias=False, name=f"{name}_0")(x)
    else:
        x = layers.Conv2D(filters, kernel, strides=stride, padding=padding, use_bias=False, name=f"{name}_0")(x)
    x = layers.BatchNormalization(**TORCH_BN, name=f"{name}_1")(x)
    return layers.ReLU(max_value=6.0, name=f"{name}_2")(x)


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


def _inverted_residual(x, out_channels: int, stride: int, expansion: int, name: str):
    """torchvision's InvertedResidual: [1x1 expand,] 3x3 depthwise, 1x1 linear projection, residual if shapes agree."""
    in_channels = x.shape[-1]
    hidden = int(round(in_channels * expansion))
    y, index = x, 0
    if expansion != 1:
        y = conv_bn_relu6(y, hidden, 1, 1, f"{name}_conv_0")
        index = 1
    y = conv_bn_relu6(y, hidden, 3, stride, f"{name}_conv_{index}", depthwise=True)
    y = layers.Conv2D(out_channels, 1, use_bias=False, name=f"{name}_conv_{index + 1}")(y)
    y = layers.BatchNormalization(**TORCH_BN, name=f"{name}_conv_{index + 2}")(y)
    if stride == 1 and in_channels == out_channels:
        y = layers.Add(name=f"{name}_add")([x, y])
    return y


def _mobilenet_v2(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    """torchvision's mobilenet_v2, layer for layer; Keras layer names spell its state_dict keys.

    keras.applications.MobileNetV2 is not used: it pads stride-2 convolutions (0, 1) where PyTorch pads
    (1, 1), and its BatchNorm has epsilon 1e-3 and momentum 0.999.
    """
    inputs = keras.Input(shape=input_shape)
    x = conv_bn_relu6(inputs, MOBILENET_V2_STEM, 3, 2, "features_0")
    index = 1
    for expansion, channels, repeats, stride in MOBILENET_V2_SETTING:
        for repeat in range(repeats):
            x = _inverted_residual(x, channels, stride if repeat == 0 else 1, expansion, f"features_{index}")
            index += 1
    x = conv_bn_relu6(x, MOBILENET_V2_LAST, 1, 1, f"features_{index}")
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    x = layers.Dropout(MOBILENET_V2_DROPOUT, name="classifier_0")(x)
    outputs = layers.Dense(spec.head(options).outputs, name="classifier_1")(x)
    return keras.Model(inputs, outputs, name="mobilenet_v2")


MODELS.register("mobilenet_v2")(KerasModel(_mobilenet_v2, load_by_name))


class AdaptiveAveragePooling2D(layers.Layer):
    """PyTorch's AdaptiveAvgPool2d for static spatial sizes (NHWC).

    Output bin i along a side of size s averages input positions floor(i*s/n) up to ceil((i+1)*s/n), so
    bins overlap where n does not divide s, and inputs smaller than n are repeated. Built from slices and
    means (no matrix products), so the FLOPs counter sees nothing here, as PyTorch's counts nothing.
    """

    def __init__(self, output_size: tuple[int, int], **kwargs) -> None:
        super().__init__(**kwargs)
        self.output_size = tuple(output_size)

    @staticmethod
    def bins(size: int, count: int) -> list[tuple[int, int]]:
        return [((i * size) // count, -(-((i + 1) * size) // count)) for i in range(count)]

    def _pool(self, x, axis: int, count: int):
        size = x.shape[axis]
        if size == count:
            return x
        if size % count == 0:  # equal, disjoint bins: one reshape and one mean
            shape = list(x.shape)
            shape[0] = -1
            shape[axis : axis + 1] = [count, size // count]
            return ops.mean(ops.reshape(x, shape), axis=axis + 1)
        index = [slice(None)] * 4
        parts = []
        for start, end in self.bins(size, count):
            index[axis] = slice(start, end)
            parts.append(ops.mean(x[tuple(index)], axis=axis, keepdims=True))
        return ops.concatenate(parts, axis=axis)

    def call(self, x):
        if x.shape[1] is None or x.shape[2] is None:
            raise ValueError("AdaptiveAveragePooling2D needs static spatial sizes")
        return self._pool(self._pool(x, 1, self.output_size[0]), 2, self.output_size[1])

    def compute_output_shape(self, input_shape):
        return (input_shape[0], *self.output_size, input_shape[3])

    def get_config(self):
        return {**super().get_config(), "output_size": self.output_size}


# VGG-16 (configuration "D", no BatchNorm) as torchvision defines it; "M" is a 2x2 max pool.
VGG16_FEATURES = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
VGG_POOLED, VGG_HIDDEN, VGG_DROPOUT = 7, 4096, 0.5


def _vgg16(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    """torchvision's vgg16, layer for layer; Keras layer names spell its state_dict keys.

    keras.applications.VGG16 is not used: it has no adaptive pooling, so its classifier's input (and its
    parameter count) depends on the image size, where torchvision pools every size to 7x7 first.
    """
    inputs = keras.Input(shape=input_shape)
    x, index = inputs, 0
    for item in VGG16_FEATURES:
        if item == "M":
            x = layers.MaxPooling2D(2, name=f"features_{index}")(x)  # floor mode, as PyTorch's default
            index += 1
        else:
            x = layers.Conv2D(item, 3, padding="same", name=f"features_{index}")(x)  # stride 1: pads 1 each side
            x = layers.ReLU(name=f"features_{index + 1}")(x)
            index += 2
    x = AdaptiveAveragePooling2D((VGG_POOLED, VGG_POOLED), name="avgpool")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(VGG_HIDDEN, name="classifier_0")(x)
    x = layers.ReLU(name="classifier_1")(x)
    x = layers.Dropout(VGG_DROPOUT, name="classifier_2")(x)
    x = layers.Dense(VGG_HIDDEN, name="classifier_3")(x)
    x = layers.ReLU(name="classifier_4")(x)
    x = layers.Dropout(VGG_DROPOUT, name="classifier_5")(x)
    outputs = layers.Dense(spec.head(options).outputs, name="classifier_6")(x)
    return keras.Model(inputs, outputs, name="vgg16")


def _load_flattened_dense(layer: layers.Dense, weights: TorchWeights, prefix: str) -> None:
    """The first classifier layer: PyTorch flattens the pooled map as (C, H, W), Keras as (H, W, C)."""
    kernel = weights[f"{prefix}.weight"]
    channels = kernel.shape[1] // (VGG_POOLED * VGG_POOLED)
    kernel = kernel.reshape(kernel.shape[0], channels, VGG_POOLED, VGG_POOLED).transpose(2, 3, 1, 0)
    layer.set_weights([np.ascontiguousarray(kernel.reshape(-1, kernel.shape[-1])), weights[f"{prefix}.bias"]])


def _load_vgg16(model: keras.Model, weights: TorchWeights) -> None:
    load_by_name(model, weights, {"classifier_0": _load_flattened_dense})


MODELS.register("vgg16")(KerasModel(_vgg16, _load_vgg16))


def _efficientnet(application):
    def build(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
        """keras.applications' EfficientNet: the same network as torchvision's, trainable parameter for parameter.

        Both have the same blocks, channels, repeats, squeeze-excitation (1x1 convolutions with bias, a
        quarter of the block's input channels), stochastic depth 0.2 x block index / blocks on residual
        blocks, and dropout before the classifier (B0 0.2, B4 0.4), so parameters, FLOPs and output
        shapes are equal. They differ where no parameter or counted FLOP is involved: at even sizes Keras
        pads the stem and the stride-2 depthwise convolutions one less before than after (k//2 - 1, k//2)
        where PyTorch pads (k//2, k//2) (same output sizes, different values at the edges); its BatchNorm
        has epsilon 1e-3 and momentum 0.99 (PyTorch's: 1e-5, and 0.1, which is Keras' 0.9); and it always
        starts with parameter-free preprocessing (Rescaling 1/255, then a Normalization with mean 0 and
        variance 1), elementwise work on the input only: Keras 3's EfficientNet V1 has no
        include_preprocessing argument to drop it. No weights loader: the outputs are not expected to
        match PyTorch's numerically.
        """
        return application(
            input_shape=input_shape, weights=None, classes=spec.head(options).outputs, classifier_activation=None
        )

    return build


MODELS.register("efficientnet_b0")(KerasModel(_efficientnet(keras.applications.EfficientNetB0)))
MODELS.register("efficientnet_b4")(KerasModel(_efficientnet(keras.applications.EfficientNetB4)))


def _inception_v3(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    """keras.applications' InceptionV3, the network torchvision's inception_v3 (no auxiliary classifier) defines.

    Same convolutions, branches, channels and strides, so FLOPs and output shapes are equal. Differences:
    Keras' BatchNorm has no scale (gamma; scale=False), so it has one trainable parameter fewer per
    BatchNorm channel, 17,216 of 23.8 million (0.07%); both use epsilon 1e-3 (momentum: Keras 0.99,
    PyTorch 0.1, which is Keras' 0.9). Keras' 3x3 stride-1 average pools in the Inception blocks exclude
    the padding from the average where PyTorch's (count_include_pad=True) include it, which changes
    values at the edges only. Keras has no dropout before the classifier where PyTorch has 0.5 (training
    only, no parameters). No weights loader: the outputs are not expected to match PyTorch's numerically.
    """
    return keras.applications.InceptionV3(
        input_shape=input_shape, weights=None, classes=spec.head(options).outputs, classifier_activation=None
    )


MODELS.register("inception_v3")(KerasModel(_inception_v3))
