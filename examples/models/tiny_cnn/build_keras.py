"""tiny_cnn in Keras 3 (layers only, so every Keras backend builds it), layer for layer as build_torch.py.

Each weighted layer is named as the PyTorch module it mirrors, "-" for "." ("blocks-0-conv" for blocks.0.conv: Keras
on PyTorch makes layer names parameter names, which take no "."), so load_torch_weights finds every PyTorch tensor
by name. Convolutions pad explicitly, 1 on every side as PyTorch does: Keras' "same" would pad a stride-2
convolution of an even size by (0, 1). BatchNorm uses PyTorch's epsilon and momentum.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers

# (out channels, stride) per block, as in build_torch.py.
BLOCKS = ((32, 1), (64, 2), (128, 2))
# PyTorch's BatchNorm defaults: eps 1e-5, running statistics updated with 0.1 of the new value.
TORCH_BN = dict(epsilon=1e-5, momentum=0.9)
# The initial distributions of build_torch.py: He normal over fan-out for the convolutions, PyTorch's default
# uniform(+-1/sqrt(fan_in)) for the linear weights (variance scaling 1/3, uniform), zero biases.
CONV_INIT = keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")
LINEAR_INIT = keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform")


def build(spec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    inputs = keras.Input(shape=input_shape)  # H x W x C
    x = inputs
    for index, (channels, stride) in enumerate(BLOCKS):
        name = f"blocks-{index}"
        x = layers.ZeroPadding2D(1, name=f"{name}-pad")(x)
        x = layers.Conv2D(
            channels, 3, strides=stride, use_bias=False, kernel_initializer=CONV_INIT, name=f"{name}-conv"
        )(x)
        x = layers.BatchNormalization(**TORCH_BN, name=f"{name}-bn")(x)
        x = layers.ReLU(name=f"{name}-relu")(x)
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = layers.Dense(spec.head(options).outputs, kernel_initializer=LINEAR_INIT, name="classifier")(x)
    return keras.Model(inputs, outputs, name="tiny_cnn")


def load_torch_weights(model: keras.Model, weights: dict[str, np.ndarray]) -> None:
    """Copy PyTorch's state_dict (NumPy arrays by name) into the model; only the layouts differ."""
    used = set()

    def take(key: str) -> np.ndarray:
        used.add(key)
        return weights[key]

    for layer in model.layers:
        prefix = layer.name.replace("-", ".")  # blocks-0-conv: PyTorch's blocks.0.conv
        if isinstance(layer, layers.Conv2D):
            layer.set_weights(
                [take(f"{prefix}.weight").transpose(2, 3, 1, 0)]
            )  # (out, in, kh, kw) -> (kh, kw, in, out)
        elif isinstance(layer, layers.BatchNormalization):
            layer.set_weights([take(f"{prefix}.{name}") for name in ("weight", "bias", "running_mean", "running_var")])
        elif isinstance(layer, layers.Dense):
            layer.set_weights([take(f"{prefix}.weight").T, take(f"{prefix}.bias")])  # (out, in) -> (in, out)
        elif layer.weights:  # a weighted layer no branch above copies would keep its random weights
            raise ValueError(f"no PyTorch counterpart is known for the Keras layer {layer.name!r}")
    unused = sorted(set(weights) - used)
    if unused:
        raise ValueError(f"PyTorch tensors with no Keras layer: {', '.join(unused)}")
