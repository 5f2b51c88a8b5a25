"""llama_small: the PyTorch runner's Llama-style decoder (fwbench_torch.models.llama), layer for layer and named as its
modules, so that its state_dict loads by name; the sizes come from fwbench_core.architectures.LLAMA_SIZES.

Attention is an einsum for the scores and one for the values, each query head grouped with its key-value head
(heads h = n x group + g share key-value head n, as PyTorch's grouped-query broadcast pairs them), which the FLOPs
count sees as the two products PyTorch's counter counts; the softmax runs in float32. The rotary tables are NumPy
constants computed in float64, as PyTorch's are.

For generation the module takes, beside the tokens, the position of the first one and optionally a preallocated
cache of each layer's keys and values, (batch, length, kv heads, head width), which it returns updated
(lax.dynamic_update_slice): plain arrays in and out, so that one jitted decoding step serves every position
(`offset` may be traced) and its cache buffers can be donated.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fwbench_core.architectures import INIT_STD, LLAMA_EPS, LLAMA_ROPE_THETA, LLAMA_SIZE_OPTION, LLAMA_SIZES
from fwbench_core.models import ModelSpec

from . import MODELS, FlaxModel


def rotary_tables(head_dim: int, max_positions: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of each position's angles, (max_positions, head_dim), each frequency twice; float64 as PyTorch's."""
    inverse_frequencies = LLAMA_ROPE_THETA ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(max_positions, dtype=np.float64), inverse_frequencies)
    angles = np.concatenate((angles, angles), axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rotate(x, cos, sin):
    """Heads (B, S, H, D) turned by their positions' angles (S, D): the first half of each head pairs with the second."""
    first, second = jnp.split(x, 2, axis=-1)
    cos, sin = (table[None, :, None, :].astype(x.dtype) for table in (cos, sin))
    return x * cos + jnp.concatenate((-second, first), axis=-1) * sin


class Attention(nn.Module):
    heads: int
    kv_heads: int
    dtype: Any

    @nn.compact
    def __call__(self, x, cos, sin, positions, cache=None, offset=0):
        """`cache`: (keys, values) of (B, length, kv heads, D), returned with this call's written at `offset`."""
        batch, seq, hidden = x.shape
        head_dim, group = hidden // self.heads, self.heads // self.kv_heads
        dense = lambda width, name: nn.Dense(width, use_bias=False, dtype=self.dtype, name=name)
        q = rotate(dense(self.heads * head_dim, "q_proj")(x).reshape(batch, seq, self.heads, head_dim), cos, sin)
        k = rotate(dense(self.kv_heads * head_dim, "k_proj")(x).reshape(batch, seq, self.kv_heads, head_dim), cos, sin)
        v = dense(self.kv_heads * head_dim, "v_proj")(x).reshape(batch, seq, self.kv_heads, head_dim)
        if cache is not None:
            cache = tuple(
                jax.lax.dynamic_update_slice(held, new.astype(held.dtype), (0, offset, 0, 0))
                for held, new in zip(cache, (k, v))
            )
            k, v = cache
        q = q.reshape(batch, seq, self.kv_heads, group, head_dim)
        scores = jnp.einsum("bqngd,bknd->bngqk", q, k) / jnp.sqrt(head_dim).astype(q.dtype)
        # Each token sees the keys up to its own position: causal, and in a cache nothing not written yet.
        visible = jnp.arange(k.shape[1])[None, :] <= positions[:, None]
        scores = jnp.where(visible, scores.astype(jnp.float32), -jnp.inf)
        probs = nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("bngqk,bknd->bqngd", probs, v).reshape(batch, seq, self.heads * head_dim)
        return dense(hidden, "o_proj")(out), cache


class SwiGlu(nn.Module):
    mlp: int
    dtype: Any

    @nn.compact
    def __call__(self, x):
        dense = lambda width, name: nn.Dense(width, use_bias=False, dtype=self.dtype, name=name)
        return dense(x.shape[-1], "down_proj")(nn.silu(dense(self.mlp, "gate_proj")(x)) * dense(self.mlp, "up_proj")(x))


class DecoderLayer(nn.Module):
    heads: int
    kv_heads: int
    mlp: int
    dtype: Any

    @nn.compact
    def __call__(self, x, cos, sin, positions, cache=None, offset=0):
        norm = lambda name: nn.RMSNorm(epsilon=LLAMA_EPS, dtype=self.dtype, name=name)
        attention = Attention(self.heads, self.kv_heads, self.dtype, name="self_attn")
        attended, cache = attention(norm("input_layernorm")(x), cos, sin, positions, cache, offset)
        x = x + attended
        return x + SwiGlu(self.mlp, self.dtype, name="mlp")(norm("post_attention_layernorm")(x)), cache


class Llama(nn.Module):
    vocab: int
    outputs: int
    size: str  # a key of LLAMA_SIZES
    dtype: Any

    @nn.compact
    def __call__(self, ids, train: bool, caches=None, offset=0):
        """Logits (B, S, outputs) for tokens at positions offset to offset + S - 1. Given caches (empty_caches'),
        it returns the logits and the caches with this call's keys and values written: a prompt's prefill at
        offset 0, then one token at a time; without, the tokens are the whole sequence."""
        size = LLAMA_SIZES[self.size]
        positions = offset + jnp.arange(ids.shape[1])
        tables = rotary_tables(size["hidden"] // size["heads"], size["max_positions"])
        cos, sin = (jnp.asarray(table)[positions] for table in tables)
        x = nn.Embed(self.vocab, size["hidden"], dtype=self.dtype, name="embed_tokens")(ids)
        written = []
        for index in range(size["layers"]):
            layer = DecoderLayer(size["heads"], size["kv_heads"], size["mlp"], self.dtype, name=f"layers.{index}")
            x, cache = layer(x, cos, sin, positions, None if caches is None else caches[index], offset)
            written.append(cache)
        x = nn.RMSNorm(epsilon=LLAMA_EPS, dtype=self.dtype, name="norm")(x)
        logits = nn.Dense(self.outputs, use_bias=False, dtype=self.dtype, name="lm_head")(x)
        return logits if caches is None else (logits, tuple(written))

    def empty_caches(self, batch_size: int, length: int, dtype: Any = None) -> tuple:
        """One zeroed (keys, values) pair per layer for `length` positions (a prompt and the tokens to generate), in
        the module's compute dtype unless given another."""
        size = LLAMA_SIZES[self.size]
        if not 1 <= length <= size["max_positions"]:
            raise ValueError(f"a cache holds 1 to {size['max_positions']} positions (the rotary tables'), not {length}")
        shape = (batch_size, length, size["kv_heads"], size["hidden"] // size["heads"])
        return tuple(
            (jnp.zeros(shape, dtype or self.dtype), jnp.zeros(shape, dtype or self.dtype))
            for _ in range(size["layers"])
        )


def _llama(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
    return Llama(spec.vocab_size, spec.head(options).outputs, options[LLAMA_SIZE_OPTION], dtype)


MODELS.register("llama_small")(FlaxModel(_llama, init_std=INIT_STD))
