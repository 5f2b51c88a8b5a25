"""A JAX model's variables: drawn from the seed as the PyTorch runner draws its weights, or loaded from PyTorch's."""

from __future__ import annotations

from collections.abc import Mapping

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from fwbench_core.errors import InvalidArgument

from .models.speech import WEIGHT_NORM_G, WEIGHT_NORM_V

# nn.LSTM's and nn.GRU's parameters, which the Flax recurrent layers keep under PyTorch's names.
RECURRENT_PARAMETERS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def initial_variables(shapes, seed: int, init_std: float | None) -> dict:
    """Variables of the shapes given, drawn on the host by NumPy from the seed, as the PyTorch runner starts
    them. With init_std (transformers): every matrix and embedding normal(0, init_std). Otherwise PyTorch's
    defaults: convolutions He normal over fan-out (torchvision's), linear layers uniform within 1/sqrt(fan-in),
    embeddings standard normal, recurrent layers' parameters uniform within 1/sqrt(hidden). Other biases zero, norms'
    scales one, BatchNorm statistics zero mean and unit variance. Flax's own initialisers would run as one
    XLA kernel per distinct parameter shape, each compiled first: tens of seconds per build on a small CPU."""
    rng = np.random.default_rng(seed)
    flat = traverse_util.flatten_dict(shapes)
    # A recurrent layer's hidden size, read from its (gates x hidden, hidden) recurrent matrix.
    hidden = {path[:-1]: leaf.shape[1] for path, leaf in flat.items() if path[-1].startswith("weight_hh")}
    values = {}
    for path, leaf in flat.items():
        shape, name = leaf.shape, path[-1]
        if init_std is not None and name in ("kernel", "embedding"):
            value = rng.normal(0.0, init_std, shape)
        elif name == "kernel" and len(shape) == 4:  # (kh, kw, in, out)
            value = rng.normal(0.0, np.sqrt(2.0 / (shape[0] * shape[1] * shape[3])), shape)
        elif name == "embedding":
            value = rng.normal(0.0, 1.0, shape)
        elif name.startswith(RECURRENT_PARAMETERS):
            bound = 1.0 / np.sqrt(hidden[path[:-1]])
            value = rng.uniform(-bound, bound, shape)
        elif name in ("kernel", WEIGHT_NORM_V):  # (in, out), (kernel, in, out), or PyTorch's (out, in, kernel)
            fan_in = np.prod(shape[1:]) if name == WEIGHT_NORM_V else np.prod(shape[:-1])
            bound = 1.0 / np.sqrt(fan_in)
            value = rng.uniform(-bound, bound, shape)
        elif name in ("scale", "var"):
            value = np.ones(shape)
        else:  # biases, BatchNorm means
            value = np.zeros(shape)
        values[path] = value.astype(np.float32)
    for path in values:
        if path[-1] == WEIGHT_NORM_G:  # weight norm starts as the identity: g = |v| over all but the kernel dimension
            direction = values[(*path[:-1], WEIGHT_NORM_V)]
            values[path] = np.sqrt(np.sum(direction * direction, axis=(0, 1), keepdims=True))
    return traverse_util.unflatten_dict(values)


def variable_shapes(module: flax.linen.Module, sample: jax.ShapeDtypeStruct) -> dict:
    """The module's variables as shapes: nothing is computed."""
    return jax.eval_shape(lambda x: module.init(jax.random.key(0), x, train=False), sample)


def _torch_value(
    collection: str, leaf: str, torch_prefix: str, weights: Mapping[str, np.ndarray]
) -> tuple[str, np.ndarray]:
    """The PyTorch tensor behind one Flax variable, in Flax's layout."""
    roles = {
        ("batch_stats", "mean"): "running_mean",
        ("batch_stats", "var"): "running_var",
        ("params", "scale"): "weight",
        ("params", "bias"): "bias",
        ("params", "kernel"): "weight",
        ("params", "embedding"): "weight",
    }
    # A parameter of no layer (BERT's decoder_bias) has PyTorch's name.
    name = roles.get((collection, leaf), leaf)
    key = f"{torch_prefix}.{name}" if torch_prefix else name
    value = weights[key]
    if leaf == "kernel":
        # Convolutions (out, in, kh, kw) -> (kh, kw, in, out), depthwise ones included, (out, in, k) -> (k, in, out);
        # linear (out, in) -> (in, out).
        value = value.transpose(*range(2, value.ndim), 1, 0)
    return key, value


def load_torch_weights(variables_shapes, weights: Mapping[str, np.ndarray], model: str) -> dict:
    """Flax variables from PyTorch's (NumPy arrays keyed by parameter name): Flax modules are named as
    PyTorch's, so the module path joined by dots is the PyTorch name; every PyTorch tensor must be used."""
    loaded, used = {}, set()
    for path, shape in traverse_util.flatten_dict(variables_shapes).items():
        collection, *modules, leaf = path
        try:
            key, value = _torch_value(collection, leaf, ".".join(modules), weights)
        except KeyError as missing:
            raise InvalidArgument(f"the reference lacks the weight {missing.args[0]!r} that {model} needs") from None
        if value.shape != shape.shape:
            raise InvalidArgument(
                f"the reference's weights do not fit {model}: {key} has shape {value.shape}, the model needs {shape.shape}"
            )
        loaded[path] = jnp.asarray(value, jnp.float32)
        used.add(key)
    unused = sorted(set(weights) - used)
    if unused:
        raise InvalidArgument(
            f"the reference's weights do not fit {model}: tensors with no Flax variable: {', '.join(unused[:8])}"
        )
    return traverse_util.unflatten_dict(loaded)
