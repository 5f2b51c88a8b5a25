"""tiny_decoder in Flax, layer for layer as build_torch.py, its submodules named as PyTorch's modules (how the JAX
runner loads PyTorch's weights).

To generate, the JAX runner asks the module what it asks its built-in decoders: `empty_caches(batch_size, length)`,
plain arrays (here a (keys, values) pair per layer, each (B, length, heads, head width)), and
`__call__(ids, train, caches, offset)` returning the logits and the caches with this call's keys and values written
at `offset` (lax.dynamic_update_slice). Arrays in, arrays out: the runner jits the prefill and the decode step and
donates the caches, so XLA writes them in place, and `offset` may be traced, so one decode step serves every
position. Attention is an einsum for the scores and one for the values; the softmax runs in float32.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from .sizes import EPS, FFN, HEAD_DIM, HEADS, INIT_STD, LAYERS, WIDTH

# The runner draws every matrix and embedding normal(0, init_std), as build_torch.py initialises them.
init_std = INIT_STD


class DecoderLayer(nn.Module):
    dtype: Any

    @nn.compact
    def __call__(self, x, positions, cache=None, offset=0):
        batch, seq, _ = x.shape
        dense = lambda width, name: nn.Dense(width, dtype=self.dtype, name=name)
        norm = lambda name: nn.LayerNorm(epsilon=EPS, dtype=self.dtype, name=name)
        h = norm("attention_norm")(x)
        q, k, v = (dense(WIDTH, name)(h).reshape(batch, seq, HEADS, HEAD_DIM) for name in ("query", "key", "value"))
        if cache is not None:
            cache = tuple(
                jax.lax.dynamic_update_slice(held, new.astype(held.dtype), (0, offset, 0, 0))
                for held, new in zip(cache, (k, v))
            )
            k, v = cache
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(HEAD_DIM).astype(q.dtype)
        # Each token sees the keys up to its own position: causal, and in a cache nothing not written yet.
        visible = jnp.arange(k.shape[1])[None, :] <= positions[:, None]
        probs = nn.softmax(jnp.where(visible, scores.astype(jnp.float32), -jnp.inf), axis=-1).astype(v.dtype)
        a = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, seq, WIDTH)
        x = x + dense(WIDTH, "attention_output")(a)
        h = nn.gelu(dense(FFN, "intermediate")(norm("ffn_norm")(x)), approximate=False)
        return x + dense(WIDTH, "output")(h), cache


class TinyDecoder(nn.Module):
    vocab: int
    max_positions: int
    dtype: Any

    @nn.compact
    def __call__(self, ids, train: bool, caches=None, offset=0):
        positions = offset + jnp.arange(ids.shape[1])
        x = nn.Embed(self.vocab, WIDTH, dtype=self.dtype, name="token_embeddings")(ids)
        x = x + nn.Embed(self.max_positions, WIDTH, dtype=self.dtype, name="position_embeddings")(positions)
        written = []
        for index in range(LAYERS):
            cache = None if caches is None else caches[index]
            x, cache = DecoderLayer(self.dtype, name=f"layers.{index}")(x, positions, cache, offset)
            written.append(cache)
        x = nn.LayerNorm(epsilon=EPS, dtype=self.dtype, name="final_norm")(x)
        logits = nn.Dense(self.vocab, dtype=self.dtype, name="head")(x)
        return logits if caches is None else (logits, tuple(written))

    def empty_caches(self, batch_size: int, length: int, dtype: Any = None) -> tuple:
        """One zeroed (keys, values) pair per layer for `length` positions, in the compute dtype unless given
        another."""
        shape = (batch_size, length, HEADS, HEAD_DIM)
        return tuple(
            (jnp.zeros(shape, dtype or self.dtype), jnp.zeros(shape, dtype or self.dtype)) for _ in range(LAYERS)
        )


def build(spec, options: dict[str, str], dtype: Any) -> nn.Module:
    return TinyDecoder(spec.vocab_size, spec.max_input_shape[0], dtype)
