"""llama_small: the PyTorch runner's Llama-style decoder (fwbench_torch.models.llama) in Keras layers.

The same widths, RMSNorm epsilon and rotary tables (computed in float64 as PyTorch's are), the same untied LM head,
no biases, no dropout, so parameter counts and FLOPs agree; the loader copies PyTorch's state_dict by parameter name.
Attention is an einsum for the scores and one for the values, each query head grouped with its key-value head
(heads h = n x group + g share key-value head n, as PyTorch's grouped-query broadcast pairs them), which the FLOP
counter counts as PyTorch counts scaled_dot_product_attention. The softmax runs in float32.

Keras idioms for generation: each layer's keys and values are a preallocated cache of (batch, length, kv heads,
head width) passed in and returned updated (ops.slice_update at the first token's position), so that a compiled
decoding step (tf.function, XLA) keeps one shape for every position; `offset` may be a tensor.
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import layers, ops

from fwbench_core.architectures import INIT_STD, LLAMA_EPS, LLAMA_ROPE_THETA, LLAMA_SIZE_OPTION, LLAMA_SIZES
from fwbench_core.models import ModelSpec

from .. import torch_weights
from . import MODELS, KerasModel, TorchWeights

ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
NORMS = ("input_layernorm", "post_attention_layernorm")


def rotary_tables(head_dim: int, max_positions: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of each position's angles, (max_positions, head_dim), each frequency twice; float64 as PyTorch's.
    NumPy arrays, so that a traced graph holds them as constants (tf2onnx keeps a captured tensor as an input)."""
    inverse_frequencies = LLAMA_ROPE_THETA ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(max_positions, dtype=np.float64), inverse_frequencies)
    angles = np.concatenate((angles, angles), axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rotate(x, cos, sin):
    """Heads (B, S, H, D) turned by their positions' angles (S, D): the first half of each head pairs with the second."""
    first, second = ops.split(x, 2, axis=-1)
    cos, sin = (ops.cast(table[None, :, None, :], x.dtype) for table in (cos, sin))
    return x * cos + ops.concatenate((-second, first), axis=-1) * sin


def _dense(units: int, name: str) -> layers.Dense:
    return layers.Dense(
        units, use_bias=False, kernel_initializer=keras.initializers.RandomNormal(stddev=INIT_STD), name=name
    )


class Attention(layers.Layer):
    def __init__(self, hidden: int, heads: int, kv_heads: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = _dense(heads * self.head_dim, "q_proj")
        self.k_proj = _dense(kv_heads * self.head_dim, "k_proj")
        self.v_proj = _dense(kv_heads * self.head_dim, "v_proj")
        self.o_proj = _dense(hidden, "o_proj")

    def build(self, input_shape) -> None:
        for projection in (self.q_proj, self.k_proj, self.v_proj):
            projection.build(input_shape)
        self.o_proj.build((*input_shape[:-1], self.heads * self.head_dim))

    def call(self, x, cos, sin, positions, cache=None, offset=0):
        """`cache`: (keys, values) of (B, length, kv heads, D), returned with this call's written at `offset`."""
        seq, group = x.shape[1], self.heads // self.kv_heads
        q = rotate(ops.reshape(self.q_proj(x), (-1, seq, self.heads, self.head_dim)), cos, sin)
        k = rotate(ops.reshape(self.k_proj(x), (-1, seq, self.kv_heads, self.head_dim)), cos, sin)
        v = ops.reshape(self.v_proj(x), (-1, seq, self.kv_heads, self.head_dim))
        if cache is not None:
            start = (0, offset, 0, 0)
            cache = tuple(ops.slice_update(held, start, ops.cast(new, held.dtype)) for held, new in zip(cache, (k, v)))
            k, v = cache
        q = ops.reshape(q, (-1, seq, self.kv_heads, group, self.head_dim))
        scores = ops.einsum("bqngd,bknd->bngqk", q, k) * (1.0 / math.sqrt(self.head_dim))
        # Each token sees the keys up to its own position: causal, and in a cache nothing not written yet.
        visible = ops.arange(ops.shape(k)[1])[None, :] <= positions[:, None]
        scores = ops.where(visible, ops.cast(scores, "float32"), float("-inf"))
        probs = ops.cast(ops.softmax(scores, axis=-1), v.dtype)
        out = ops.reshape(ops.einsum("bngqk,bknd->bqngd", probs, v), (-1, seq, self.heads * self.head_dim))
        return self.o_proj(out), cache


class SwiGlu(layers.Layer):
    def __init__(self, hidden: int, mlp: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.gate_proj, self.up_proj, self.down_proj = (
            _dense(mlp, "gate_proj"),
            _dense(mlp, "up_proj"),
            _dense(hidden, "down_proj"),
        )

    def build(self, input_shape) -> None:
        self.gate_proj.build(input_shape)
        self.up_proj.build(input_shape)
        self.down_proj.build((*input_shape[:-1], self.gate_proj.units))

    def call(self, x):
        return self.down_proj(ops.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(layers.Layer):
    def __init__(self, hidden: int, heads: int, kv_heads: int, mlp: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.input_layernorm = layers.RMSNormalization(epsilon=LLAMA_EPS, name="input_layernorm")
        self.self_attn = Attention(hidden, heads, kv_heads, name="self_attn")
        self.post_attention_layernorm = layers.RMSNormalization(epsilon=LLAMA_EPS, name="post_attention_layernorm")
        self.mlp = SwiGlu(hidden, mlp, name="mlp")

    def build(self, input_shape) -> None:
        for sublayer in (self.input_layernorm, self.self_attn, self.post_attention_layernorm, self.mlp):
            sublayer.build(input_shape)

    def call(self, x, cos, sin, positions, cache=None, offset=0):
        attended, cache = self.self_attn(self.input_layernorm(x), cos, sin, positions, cache=cache, offset=offset)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), cache


class Llama(keras.Model):
    def __init__(self, vocab: int, outputs: int, size: dict[str, int], **kwargs) -> None:
        super().__init__(**kwargs)
        self.hidden, heads, self.kv_heads = size["hidden"], size["heads"], size["kv_heads"]
        self.head_dim = self.hidden // heads
        self.embed_tokens = layers.Embedding(
            vocab,
            self.hidden,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=INIT_STD),
            name="embed_tokens",
        )
        # Not `layers`: keras.Model has a property of that name.
        self.decoder_layers = [
            DecoderLayer(self.hidden, heads, self.kv_heads, size["mlp"], name=f"layers_{index}")
            for index in range(size["layers"])
        ]
        self.norm = layers.RMSNormalization(epsilon=LLAMA_EPS, name="norm")
        self.lm_head = _dense(outputs, "lm_head")
        self.rotary = rotary_tables(self.head_dim, size["max_positions"])

    def build(self, input_shape) -> None:
        """Every weight made at once, so that the model counts and trains them before its first call."""
        self.embed_tokens.build(input_shape)
        hidden_shape = (*input_shape, self.hidden)
        for sublayer in (*self.decoder_layers, self.norm, self.lm_head):
            sublayer.build(hidden_shape)

    def call(self, ids, caches=None, offset=0, training=None):
        """Logits (B, S, outputs) for tokens at positions offset to offset + S - 1. Given caches (empty_caches'),
        it returns the logits and the caches with this call's keys and values written: a prompt's prefill at
        offset 0, then one token at a time; without, the tokens are the whole sequence."""
        positions = offset + ops.arange(ids.shape[1])
        cos, sin = (ops.take(ops.convert_to_tensor(table), positions, axis=0) for table in self.rotary)
        x = self.embed_tokens(ids)
        written = []
        for index, layer in enumerate(self.decoder_layers):
            x, cache = layer(x, cos, sin, positions, cache=None if caches is None else caches[index], offset=offset)
            written.append(cache)
        logits = self.lm_head(self.norm(x))
        return logits if caches is None else (logits, tuple(written))

    def empty_caches(self, batch_size: int, length: int, dtype: str | None = None) -> tuple:
        """One zeroed (keys, values) pair per layer for `length` positions (a prompt and the tokens to generate), in
        the model's compute dtype unless given another."""
        if not 1 <= length <= len(self.rotary[0]):
            raise ValueError(f"a cache holds 1 to {len(self.rotary[0])} positions (the rotary tables'), not {length}")
        shape = (batch_size, length, self.kv_heads, self.head_dim)
        dtype = dtype or self.compute_dtype
        return tuple((ops.zeros(shape, dtype), ops.zeros(shape, dtype)) for _ in self.decoder_layers)


def _build_llama(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    size = LLAMA_SIZES[options[LLAMA_SIZE_OPTION]]
    model = Llama(spec.vocab_size, spec.head(options).outputs, size, name="llama_small")
    model.build((None, *input_shape))
    return model


def _load_llama(model: Llama, weights: TorchWeights) -> None:
    model.embed_tokens.set_weights([weights["embed_tokens.weight"]])
    for index, layer in enumerate(model.decoder_layers):
        prefix = f"layers.{index}"
        for name in ATTENTION_PROJECTIONS:
            torch_weights.dense(getattr(layer.self_attn, name), weights, f"{prefix}.self_attn.{name}")
        for name in MLP_PROJECTIONS:
            torch_weights.dense(getattr(layer.mlp, name), weights, f"{prefix}.mlp.{name}")
        for name in NORMS:
            getattr(layer, name).set_weights([weights[f"{prefix}.{name}.weight"]])
    model.norm.set_weights([weights["norm.weight"]])
    torch_weights.dense(model.lm_head, weights, "lm_head")


MODELS.register("llama_small")(KerasModel(_build_llama, _load_llama))
