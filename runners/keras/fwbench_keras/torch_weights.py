"""Copying PyTorch weights (NumPy arrays keyed by PyTorch parameter name) into Keras layers.

Only the layouts differ: PyTorch convolutions are (out, in, kh, kw), Keras'
(kh, kw, in, out); PyTorch linear layers are (out, in), Keras' (in, out).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from keras import layers

from fwbench_core.errors import InvalidArgument


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


def reference_weights(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A parity reference's weights (its arrays named weights/<PyTorch parameter name>), by PyTorch name."""
    return {key.removeprefix("weights/"): value for key, value in arrays.items() if key.startswith("weights/")}


def load_reference(load: Callable, model, weights: dict[str, np.ndarray], model_name: str) -> None:
    """load(model, weights), a model's loader; weights that do not fit the model are an InvalidArgument saying why."""
    try:
        load(model, weights)
    except KeyError as missing:
        raise InvalidArgument(f"the reference lacks the weight {missing.args[0]!r} that {model_name} needs") from None
    except ValueError as error:
        reason = (str(error).strip() or "ValueError").splitlines()[0][:200]
        raise InvalidArgument(f"the reference's weights do not fit {model_name}: {reason}") from None
