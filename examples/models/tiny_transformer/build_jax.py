"""tiny_transformer in Flax, layer for layer as build_torch.py.

Submodules are named as PyTorch's modules (the Flax variable layers.0/query/kernel is PyTorch's
layers.0.query.weight), which is how the JAX runner loads PyTorch's weights. Attention is one einsum for the
scores and one for the values (the two products PyTorch's FLOP counter counts in scaled_dot_product_attention);
the softmax runs in float32 whatever the compute type.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from fwbench_core.choices import Objective

# As in build_torch.py: each builder is self-contained, so each states the sizes.
WIDTH, HEADS, FFN, LAYERS = 128, 4, 512, 2
EPS = 1e-5
DROPOUT = 0.1
# The runner draws every matrix and embedding normal(0, 0.02), as build_torch.py initialises them.
init_std = 0.02


def attention(q, k, v, heads: int, dropout: nn.Dropout):
    """Multi-head scaled dot-product attention over (B, S, D) projections, back to (B, S, D)."""
    batch, seq, width = q.shape
    q, k, v = (t.reshape(batch, seq, heads, width // heads) for t in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(width // heads).astype(q.dtype)
    probs = dropout(nn.softmax(scores.astype(jnp.float32), axis=-1).astype(v.dtype))
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, seq, width)


class EncoderLayer(nn.Module):
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        def dense(width, name):
            return nn.Dense(width, dtype=self.dtype, name=name)

        def norm(name):
            return nn.LayerNorm(epsilon=EPS, dtype=self.dtype, name=name)

        dropout = nn.Dropout(DROPOUT, deterministic=not train)
        h = norm("attention_norm")(x)
        a = attention(dense(WIDTH, "query")(h), dense(WIDTH, "key")(h), dense(WIDTH, "value")(h), HEADS, dropout)
        x = x + dropout(dense(WIDTH, "attention_output")(a))
        h = nn.gelu(dense(FFN, "intermediate")(norm("ffn_norm")(x)), approximate=False)
        return x + dropout(dense(WIDTH, "output")(h))


class TinyTransformer(nn.Module):
    vocab: int
    max_positions: int
    outputs: int
    first_token: bool
    dtype: Any

    @nn.compact
    def __call__(self, ids, train: bool):
        tokens = nn.Embed(self.vocab, WIDTH, dtype=self.dtype, name="token_embeddings")(ids)
        positions = nn.Embed(self.max_positions, WIDTH, dtype=self.dtype, name="position_embeddings")(
            jnp.arange(ids.shape[1])
        )
        x = nn.Dropout(DROPOUT, deterministic=not train)(tokens + positions)
        for index in range(LAYERS):
            x = EncoderLayer(self.dtype, name=f"layers.{index}")(x, train)
        x = nn.LayerNorm(epsilon=EPS, dtype=self.dtype, name="final_norm")(x)
        if self.first_token:
            x = x[:, 0]
        return nn.Dense(self.outputs, dtype=self.dtype, name="head")(x)


def build(spec, options: dict[str, str], dtype: Any) -> nn.Module:
    head = spec.head(options)
    return TinyTransformer(
        spec.vocab_size, spec.max_input_shape[0], head.outputs, head.objective is Objective.CLASSIFY, dtype
    )
