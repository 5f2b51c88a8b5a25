"""Copying PyTorch weights (NumPy arrays keyed by PyTorch parameter name) into Keras layers.

Only the layouts differ: PyTorch convolutions are (out, in, kh, kw), Keras'
(kh, kw, in, out); PyTorch linear layers are (out, in), Keras' (in, out).
"""

from __future__ import annotations

import numpy as np
from keras import layers


def conv(layer: layers.Layer, weights: dict[str, np.ndarray], prefix: str) -> None:
    kernel = weights[f"{prefix}.weight"]
    if isinstance(layer, layers.DepthwiseConv2D):
        values = [kernel.transpose(2, 3, 0, 1)]  # (C, 1, kh, kw) -> (kh, kw, C, 1)
    elif kernel.ndim == 3:
        values = [kernel.transpose(2, 1, 0)]  # Conv1D: (out, in, k) -> (k, in, out)
    else:
        values = [kernel.transpose(2, 3, 1, 0)]
    if f"{prefix}.bias" in weights:
        values.append(weights[f"{prefix}.bias"])
    layer.set_weights(values)


def batch_norm(layer: layers.BatchNormalization, weights: dict[str, np.ndarray], prefix: str) -> None:
    layer.set_weights([weights[f"{prefix}.{name}"] for name in ("weight", "bias", "running_mean", "running_var")])


def dense(layer: layers.Dense, weights: dict[str, np.ndarray], prefix: str) -> None:
    values = [weights[f"{prefix}.weight"].T]
    if f"{prefix}.bias" in weights:
        values.append(weights[f"{prefix}.bias"])
    layer.set_weights(values)


def layer_norm(layer: layers.LayerNormalization, weights: dict[str, np.ndarray], prefix: str) -> None:
    layer.set_weights([weights[f"{prefix}.weight"], weights[f"{prefix}.bias"]])
