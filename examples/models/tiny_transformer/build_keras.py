"""tiny_transformer in Keras 3 (layers and keras.ops: every Keras backend builds it), layer for layer as build_torch.py.

Each weighted layer is named as the PyTorch module it mirrors, "-" for "." ("layers-0-query" for layers.0.query:
Keras on PyTorch makes layer names parameter names, which take no "."), so load_torch_weights finds every PyTorch
tensor by name. Attention is one einsum for the scores and one for the values, which the TensorFlow runner's FLOP
counter counts as PyTorch's counts scaled_dot_product_attention. LayerNorm takes PyTorch's epsilon (Keras' default
is 1e-3), GELU is the exact (erf) form.
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import layers, ops

from fwbench_core.choices import Objective

# As in build_torch.py: each builder is self-contained, so each states the sizes.
WIDTH, HEADS, FFN, LAYERS = 128, 4, 512, 2
EPS = 1e-5
DROPOUT = 0.1
INIT_STD = 0.02


def _init():
    return keras.initializers.RandomNormal(stddev=INIT_STD)


class PositionEmbedding(layers.Layer):
    """Adds a learned embedding of each position (rows 0 .. seq-1 of the table) to its input: PyTorch's
    position_embeddings(arange(seq)), summed with the token embeddings."""

    def __init__(self, max_positions: int, width: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_positions, self.width = max_positions, width

    def build(self, input_shape) -> None:
        self.table = self.add_weight((self.max_positions, self.width), initializer=_init(), name="table")

    def call(self, x):
        return x + self.table[: ops.shape(x)[1]]


class SelfAttention(layers.Layer):
    """Multi-head softmax(q k^T / sqrt(d)) v over (B, S, D) projections, back to (B, S, D)."""

    def __init__(self, heads: int, dropout: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.heads = heads
        self.dropout = layers.Dropout(dropout)

    def call(self, q, k, v, training=None):
        seq, width = q.shape[1], q.shape[2]
        depth = width // self.heads

        def split(t):
            return ops.reshape(t, (-1, seq, self.heads, depth))

        scores = ops.einsum("bqhd,bkhd->bhqk", split(q), split(k)) * (1.0 / math.sqrt(depth))
        probs = self.dropout(ops.softmax(scores, axis=-1), training=training)
        return ops.reshape(ops.einsum("bhqk,bkhd->bqhd", probs, split(v)), (-1, seq, width))

    def compute_output_shape(self, q_shape, k_shape=None, v_shape=None):
        return q_shape


def gelu_erf(x):
    return keras.activations.gelu(x, approximate=False)


def _dense(units: int, name: str, activation=None) -> layers.Dense:
    return layers.Dense(units, activation=activation, kernel_initializer=_init(), name=name)


def _encoder_layer(x, name: str):
    h = layers.LayerNormalization(epsilon=EPS, name=f"{name}-attention_norm")(x)
    a = SelfAttention(HEADS, DROPOUT, name=f"{name}-attention")(
        _dense(WIDTH, f"{name}-query")(h), _dense(WIDTH, f"{name}-key")(h), _dense(WIDTH, f"{name}-value")(h)
    )
    a = layers.Dropout(DROPOUT, name=f"{name}-attention_dropout")(_dense(WIDTH, f"{name}-attention_output")(a))
    x = layers.Add(name=f"{name}-attention_add")([x, a])
    h = layers.LayerNormalization(epsilon=EPS, name=f"{name}-ffn_norm")(x)
    h = _dense(FFN, f"{name}-intermediate", activation=gelu_erf)(h)
    h = layers.Dropout(DROPOUT, name=f"{name}-ffn_dropout")(_dense(WIDTH, f"{name}-output")(h))
    return layers.Add(name=f"{name}-ffn_add")([x, h])


def build(spec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    head = spec.head(options)
    ids = keras.Input(shape=input_shape, dtype="int32", name="token_ids")
    x = layers.Embedding(spec.vocab_size, WIDTH, embeddings_initializer=_init(), name="token_embeddings")(ids)
    x = PositionEmbedding(spec.max_input_shape[0], WIDTH, name="position_embeddings")(x)
    x = layers.Dropout(DROPOUT, name="embedding_dropout")(x)
    for index in range(LAYERS):
        x = _encoder_layer(x, f"layers-{index}")
    x = layers.LayerNormalization(epsilon=EPS, name="final_norm")(x)
    if head.objective is Objective.CLASSIFY:
        x = x[:, 0]
    outputs = _dense(head.outputs, "head")(x)
    return keras.Model(ids, outputs, name="tiny_transformer")


def load_torch_weights(model: keras.Model, weights: dict[str, np.ndarray]) -> None:
    """Copy PyTorch's state_dict (NumPy arrays by name) into the model; only the linear layers' layout differs."""
    used = set()

    def take(key: str) -> np.ndarray:
        used.add(key)
        return weights[key]

    for layer in model.layers:
        prefix = layer.name.replace("-", ".")  # layers-0-query: PyTorch's layers.0.query
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
