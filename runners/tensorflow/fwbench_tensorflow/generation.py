"""Greedy generation (Mode.GENERATE) for the TensorFlow runner's decoders: gpt2_small, llama_small and a plug-in's
(its build_tensorflow.py's `decoder(model)`), each a Decoder over its Keras model's layers.

The key-value cache is a pair of tf.Variables per layer, (batch, kv heads, prompt + new tokens, head width), made once
for a batch of prompts and reused by every request. Each step writes its tokens' keys and values into it
(scatter_nd_update, only the new positions) and attends over the whole cache, a mask hiding the positions past each
token (not written yet, or left from the request before), so that every decode step has the same shapes: one trace,
one XLA compilation. Variables rather than cache tensors passed in and returned because a tf.function cannot donate
its arguments: a returned cache is a fresh copy of the whole cache at every token, whereas XLA aliases a variable's
update to its buffer and writes the cache in place. Eager and graph, TensorFlow copies a variable written sparsely
when it is next read, so there each decode step copies the cache once (CACHE_COPY_NOTE).

The step functions take no tensor from the host but the decode step's position: the last tokens chosen stay on the
device and are fed back, and only the last position's logits are computed. The softmax runs in float32, as
llama_small's does; each decoder's layers are the Keras model's own, called one by one (no dropout: inference).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import keras
import numpy as np
import tensorflow as tf
from fwbench_keras.models.llama import Llama, rotate

from fwbench_core.architectures import GPT2
from fwbench_core.errors import FailedPrecondition
from fwbench_core.models import ModelSpec

from .models import MODELS

# What generation without XLA does that XLA does not (the run's flags show it).
CACHE_COPY_NOTE = (
    "generation without XLA: each decode step copies the key-value cache (TensorFlow copies a variable written in "
    "place when it is next read; XLA updates it where it is)"
)
GPT2_BLOCK_LAYERS = ("ln_1", "c_attn", "c_proj", "ln_2", "c_fc", "mlp_proj")


def split_heads(t: tf.Tensor, heads: int) -> tf.Tensor:
    """(B, S, heads x D) projections as (B, S, heads, D)."""
    batch, seq, width = t.shape
    return tf.reshape(t, (batch, seq, heads, width // heads))


def cache_indices(batch: int, kv_heads: int, positions: tf.Tensor) -> tf.Tensor:
    """scatter_nd's index of every (prompt, kv head, position) that a step writes: (B, KV, S, 3)."""
    prompt, head, position = tf.meshgrid(tf.range(batch), tf.range(kv_heads), positions, indexing="ij")
    return tf.stack((prompt, head, position), axis=-1)


class KeyValueCache:
    """One layer's keys and values, each a (batch, kv heads, length, head width) variable."""

    def __init__(self, batch: int, kv_heads: int, length: int, head_dim: int, dtype: str) -> None:
        shape = (batch, kv_heads, length, head_dim)
        self.keys = tf.Variable(tf.zeros(shape, dtype), trainable=False, name="keys")
        self.values = tf.Variable(tf.zeros(shape, dtype), trainable=False, name="values")

    def attend(self, q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, positions: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
        """q (B, S, H, D), k and v (B, S, KV, D) of the tokens at `positions` (S,), `indices` their cache_indices:
        k and v written into the cache, then each query attends to the cache up to its own position. (B, S, H x D)."""
        batch, seq, heads, depth = q.shape
        kv_heads, length = self.keys.shape[1], self.keys.shape[2]
        group = heads // kv_heads
        self.keys.scatter_nd_update(indices, tf.transpose(k, (0, 2, 1, 3)))
        self.values.scatter_nd_update(indices, tf.transpose(v, (0, 2, 1, 3)))
        # Query head h = n x group + g shares key-value head n: (B, KV, group x S, D) against (B, KV, length, D).
        q = tf.transpose(tf.reshape(q, (batch, seq, kv_heads, group, depth)), (0, 2, 3, 1, 4))
        q = tf.reshape(q, (batch, kv_heads, group * seq, depth))
        scores = tf.matmul(q, self.keys, transpose_b=True) * (1.0 / math.sqrt(depth))
        visible = tf.range(length)[None, :] <= tf.tile(positions, [group])[:, None]
        scores = tf.where(visible, tf.cast(scores, tf.float32), float("-inf"))
        out = tf.matmul(tf.cast(tf.nn.softmax(scores, axis=-1), v.dtype), self.values)
        out = tf.transpose(tf.reshape(out, (batch, kv_heads, group, seq, depth)), (0, 3, 1, 2, 4))
        return tf.reshape(out, (batch, seq, heads * depth))


class Decoder(Protocol):
    """What generation asks of a decoder: the caches' sizes (layers, kv_heads of head_dim each, in cache_dtype) and
    the logits (B, vocab) after the tokens `ids` (B, S) at `positions` (S,), each layer writing its keys and values
    into its cache with KeyValueCache.attend. The built-ins' are below; a plug-in's build_tensorflow.py gives its
    own through `decoder(model)`."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    cache_dtype: str

    def last_logits(self, ids: tf.Tensor, positions: tf.Tensor, caches: Sequence[KeyValueCache]) -> tf.Tensor: ...


class Gpt2Decoder:
    """gpt2_small's functional model (models/text.py), its layers called in its order with the cache's attention."""

    def __init__(self, model: keras.Model) -> None:
        self.embedding = model.get_layer("embeddings")
        self.blocks = [
            {name: model.get_layer(f"h_{index}_{name}") for name in GPT2_BLOCK_LAYERS}
            for index in range(GPT2["layers"])
        ]
        self.ln_f = model.get_layer("ln_f")
        self.layers, self.heads, self.kv_heads = len(self.blocks), GPT2["heads"], GPT2["heads"]
        self.head_dim = GPT2["hidden"] // GPT2["heads"]
        self.cache_dtype = self.blocks[0]["c_attn"].compute_dtype

    def last_logits(self, ids: tf.Tensor, positions: tf.Tensor, caches: Sequence[KeyValueCache]) -> tf.Tensor:
        """The logits (B, vocab) after the tokens `ids` (B, S) at `positions`, their keys and values cached."""
        indices = cache_indices(ids.shape[0], self.kv_heads, positions)
        x = self.embedding(ids, positions=positions)
        for block, cache in zip(self.blocks, caches):
            qkv = block["c_attn"](block["ln_1"](x))
            q, k, v = (split_heads(t, self.heads) for t in tf.split(qkv, 3, axis=-1))
            x = x + block["c_proj"](cache.attend(q, k, v, positions, indices))
            x = x + block["mlp_proj"](block["c_fc"](block["ln_2"](x)))
        last = self.ln_f(x[:, -1])
        # The tied LM head as one matrix product against the embeddings transposed in the kernel: the lm_head layer's
        # Keras einsum transposes the whole (vocab, width) matrix at each call, which eager pays at every token.
        return tf.matmul(last, tf.cast(self.embedding.word, last.dtype), transpose_b=True)


class LlamaDecoder:
    """llama_small's model (models/llama.py), its layers called in its order with the cache's attention."""

    def __init__(self, model: Llama) -> None:
        self.model = model
        attention = model.decoder_layers[0].self_attn
        self.layers, self.heads, self.kv_heads = len(model.decoder_layers), attention.heads, attention.kv_heads
        self.head_dim = attention.head_dim
        self.cache_dtype = attention.k_proj.compute_dtype

    def last_logits(self, ids: tf.Tensor, positions: tf.Tensor, caches: Sequence[KeyValueCache]) -> tf.Tensor:
        """The logits (B, outputs) after the tokens `ids` (B, S) at `positions`, their keys and values cached."""
        indices = cache_indices(ids.shape[0], self.kv_heads, positions)
        cos, sin = (tf.gather(table, positions) for table in self.model.rotary)
        x = self.model.embed_tokens(ids)
        for layer, cache in zip(self.model.decoder_layers, caches):
            attention, h = layer.self_attn, layer.input_layernorm(x)
            q = rotate(split_heads(attention.q_proj(h), self.heads), cos, sin)
            k = rotate(split_heads(attention.k_proj(h), self.kv_heads), cos, sin)
            v = split_heads(attention.v_proj(h), self.kv_heads)
            x = x + attention.o_proj(cache.attend(q, k, v, positions, indices))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.model.lm_head(self.model.norm(x[:, -1:]))[:, 0]


DECODERS: dict[str, Callable[[keras.Model], Decoder]] = {"gpt2_small": Gpt2Decoder, "llama_small": LlamaDecoder}


def decoder_for(spec: ModelSpec, model: keras.Model) -> Decoder:
    """The built-in's decoder, or the plug-in's (its builder's `decoder`, which the plug-in's check at load asks of
    one that declares it generates)."""
    make = DECODERS.get(spec.name) if spec.source.built_in else MODELS.builder(spec).decoder
    if make is None:
        raise FailedPrecondition(
            f"{spec.name} declares that it generates, but the TensorFlow runner has no decoder for it: a built-in's is "
            f"one of {', '.join(DECODERS)}, a plug-in's is decoder(model) in its build_tensorflow.py"
        )
    return make(model)


def eager(step: Callable) -> Callable:
    return step


class Generation:
    """A batch of prompts (B, P) and its cache, made under the caller's device scope: prefill() starts a request,
    decode_step() adds a token to every prompt; each returns the tokens it chose (B,), int64, on the device, and may
    return before the device is done. tokens() reads the request's to the host. `compile_step` wraps the two step
    functions (tf.function, with or without XLA) or leaves them eager."""

    def __init__(
        self,
        decoder: Decoder,
        prompts: tf.Tensor,
        new_tokens: int,
        compile_step: Callable[[Callable], Callable] = eager,
    ) -> None:
        batch, self.prompt_length = prompts.shape
        self.decoder, self.prompts = decoder, prompts
        length = self.prompt_length + new_tokens
        self.caches = [
            KeyValueCache(batch, decoder.kv_heads, length, decoder.head_dim, decoder.cache_dtype)
            for _ in range(decoder.layers)
        ]
        self._prefill = compile_step(self._prefill_graph)
        self._decode = compile_step(self._decode_graph)
        self.chosen: list[tf.Tensor] = []

    def _greedy(self, ids: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
        return tf.argmax(self.decoder.last_logits(ids, positions, self.caches), axis=-1)

    def _prefill_graph(self) -> tf.Tensor:
        return self._greedy(self.prompts, tf.range(self.prompt_length))

    def _decode_graph(self, last: tf.Tensor, position: tf.Tensor) -> tf.Tensor:
        return self._greedy(last[:, None], position[None])

    def prefill(self) -> tf.Tensor:
        self.chosen = [self._prefill()]
        return self.chosen[-1]

    def decode_step(self) -> tf.Tensor:
        # The last token chosen stands after the prompt and the tokens chosen before it.
        position = tf.constant(self.prompt_length + len(self.chosen) - 1, tf.int32)
        self.chosen.append(self._decode(self.chosen[-1], position))
        return self.chosen[-1]

    def tokens(self) -> np.ndarray:
        """The request's tokens, (B, tokens chosen), int64."""
        return tf.stack(self.chosen, axis=1).numpy()


def generate(decoder: Decoder, prompts: tf.Tensor, new_tokens: int) -> np.ndarray:
    """A whole request, eager: `new_tokens` greedy tokens per prompt, (B, new_tokens) int64 on the host."""
    generation = Generation(decoder, prompts, new_tokens)
    generation.prefill()
    for _ in range(new_tokens - 1):
        generation.decode_step()
    return generation.tokens()
