"""tiny_decoder in Keras, layer for layer as build_torch.py, each weighted layer named as the PyTorch module it
mirrors ("layers.0.query"), so that load_torch_weights finds every PyTorch tensor by name.

To generate, the TensorFlow runner asks what it asks its built-in decoders: `decoder(model)`, an object that gives
the logits of the next token from the model's own layers (fwbench_tensorflow.generation.Decoder). The runner makes
the caches (KeyValueCache: a variable of keys and one of values per layer, written in place) and calls
`last_logits(ids, positions, caches)` for a prompt's prefill and then a token at a time; the decoder computes each
layer's queries, keys and values and lets `cache.attend` write the keys and values and attend over the cache.
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import layers, ops

from fwbench_tensorflow.generation import cache_indices, split_heads

from .sizes import EPS, FFN, HEAD_DIM, HEADS, INIT_STD, LAYERS, WIDTH


def _init():
    return keras.initializers.RandomNormal(stddev=INIT_STD)


def _dense(units: int, name: str, activation=None) -> layers.Dense:
    return layers.Dense(units, activation=activation, kernel_initializer=_init(), name=name)


def gelu_erf(x):
    return keras.activations.gelu(x, approximate=False)


class PositionEmbedding(layers.Layer):
    """Adds each position's learned embedding to its input: rows 0 .. seq-1 of the table, or those at `positions`."""

    def __init__(self, max_positions: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_positions = max_positions

    def build(self, input_shape) -> None:
        self.table = self.add_weight((self.max_positions, WIDTH), initializer=_init(), name="table")

    def call(self, x, positions=None):
        return x + (self.table[: ops.shape(x)[1]] if positions is None else ops.take(self.table, positions, axis=0))


class CausalSelfAttention(layers.Layer):
    """softmax(q k^T / sqrt(d)) v over (B, S, width) projections, each token seeing those up to itself."""

    def call(self, q, k, v):
        seq = q.shape[1]

        def split(t):
            return ops.reshape(t, (-1, seq, HEADS, HEAD_DIM))

        scores = ops.einsum("bqhd,bkhd->bhqk", split(q), split(k)) * (1.0 / math.sqrt(HEAD_DIM))
        visible = ops.tril(ops.ones((seq, seq), dtype="bool"))
        probs = ops.softmax(ops.where(visible, ops.cast(scores, "float32"), float("-inf")), axis=-1)
        return ops.reshape(ops.einsum("bhqk,bkhd->bqhd", ops.cast(probs, v.dtype), split(v)), (-1, seq, WIDTH))

    def compute_output_shape(self, q_shape, k_shape=None, v_shape=None):
        return q_shape


def _decoder_layer(x, name: str):
    h = layers.LayerNormalization(epsilon=EPS, name=f"{name}.attention_norm")(x)
    q, k, v = (_dense(WIDTH, f"{name}.{part}")(h) for part in ("query", "key", "value"))
    a = CausalSelfAttention(name=f"{name}.attention")(q, k, v)
    x = layers.Add(name=f"{name}.attention_add")([x, _dense(WIDTH, f"{name}.attention_output")(a)])
    h = layers.LayerNormalization(epsilon=EPS, name=f"{name}.ffn_norm")(x)
    h = _dense(WIDTH, f"{name}.output")(_dense(FFN, f"{name}.intermediate", activation=gelu_erf)(h))
    return layers.Add(name=f"{name}.ffn_add")([x, h])


def build(spec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    ids = keras.Input(shape=input_shape, dtype="int32", name="token_ids")
    x = layers.Embedding(spec.vocab_size, WIDTH, embeddings_initializer=_init(), name="token_embeddings")(ids)
    x = PositionEmbedding(spec.max_input_shape[0], name="position_embeddings")(x)
    for index in range(LAYERS):
        x = _decoder_layer(x, f"layers.{index}")
    x = layers.LayerNormalization(epsilon=EPS, name="final_norm")(x)
    return keras.Model(ids, _dense(spec.vocab_size, "head")(x), name="tiny_decoder")


class Decoder:
    """The model's layers called in its order, with the cache's attention in place of CausalSelfAttention."""

    def __init__(self, model: keras.Model) -> None:
        # What the runner sizes the caches by.
        self.layers, self.heads, self.kv_heads, self.head_dim = LAYERS, HEADS, HEADS, HEAD_DIM
        self.cache_dtype = model.get_layer("head").compute_dtype
        self.layer = {layer.name: layer for layer in model.layers}

    def last_logits(self, ids, positions, caches):
        """The logits (B, vocab) after the tokens `ids` (B, S) at `positions` (S,), their keys and values cached."""
        layer = self.layer
        indices = cache_indices(ids.shape[0], self.kv_heads, positions)  # where the caches are written
        x = layer["position_embeddings"](layer["token_embeddings"](ids), positions)
        for index, cache in enumerate(caches):
            name = f"layers.{index}"
            h = layer[f"{name}.attention_norm"](x)
            q, k, v = (split_heads(layer[f"{name}.{part}"](h), HEADS) for part in ("query", "key", "value"))
            x = x + layer[f"{name}.attention_output"](cache.attend(q, k, v, positions, indices))
            x = x + layer[f"{name}.output"](layer[f"{name}.intermediate"](layer[f"{name}.ffn_norm"](x)))
        return layer["head"](layer["final_norm"](x[:, -1]))


def decoder(model: keras.Model) -> Decoder:
    return Decoder(model)


def load_torch_weights(model: keras.Model, weights: dict[str, np.ndarray]) -> None:
    """Copy PyTorch's state_dict (NumPy arrays by name) into the model; only the linear layers' layout differs."""
    used = set()

    def take(key: str) -> np.ndarray:
        used.add(key)
        return weights[key]

    for layer in model.layers:
        prefix = layer.name
        if isinstance(layer, layers.Dense):
            layer.set_weights([take(f"{prefix}.weight").T, take(f"{prefix}.bias")])  # (out, in) -> (in, out)
        elif isinstance(layer, layers.LayerNormalization):
            layer.set_weights([take(f"{prefix}.weight"), take(f"{prefix}.bias")])
        elif isinstance(layer, (layers.Embedding, PositionEmbedding)):
            layer.set_weights([take(f"{prefix}.weight")])
        elif layer.weights:  # a weighted layer no branch above copies would keep its random weights
            raise ValueError(f"no PyTorch counterpart is known for the Keras layer {layer.name!r}")
    unused = sorted(set(weights) - used)
    if unused:
        raise ValueError(f"PyTorch tensors with no Keras layer: {', '.join(unused)}")
