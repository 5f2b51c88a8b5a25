"""Text models: the PyTorch runner's networks (fwbench_torch.models.text), layer for layer and named as its
modules, so that its state_dicts load by name; the hyper-parameters come from fwbench_core.architectures.

lstm_lm keeps PyTorch's nn.LSTM parameters as they are (two bias vectors per layer, gates i, f, g, o),
so it has PyTorch's parameter count exactly. Attention is written as two einsums (scores and values), which the FLOPs count sees as the two products
PyTorch's counter counts in scaled_dot_product_attention; the softmax runs in float32.

For generation gpt2_small takes, as llama_small does, the position of its first token and optionally a preallocated
cache of each layer's keys and values, (batch, length, hidden), which it returns updated (lax.dynamic_update_slice).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fwbench_core.architectures import BERT, GPT2, INIT_STD, LSTM_LM
from fwbench_core.models import HEAD_OPTION, ModelSpec

from . import MODELS, FlaxModel


def attention(q, k, v, heads: int, dropout: nn.Dropout, causal: bool, offset=0):
    """Multi-head scaled dot-product attention of (B, S, D) queries over (B, K, D) keys and values, back to (B, S, D).
    Causal: the query at position offset + i sees the keys up to that position, so that in a key-value cache of K
    positions the ones not written yet stay unseen (`offset` may be traced)."""
    batch, seq, width = q.shape
    q, k, v = (t.reshape(batch, t.shape[1], heads, width // heads) for t in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(width // heads).astype(q.dtype)
    if causal:
        visible = jnp.arange(k.shape[1])[None, :] <= offset + jnp.arange(seq)[:, None]
        scores = jnp.where(visible, scores, jnp.finfo(scores.dtype).min)
    weights = dropout(nn.softmax(scores.astype(jnp.float32), axis=-1).astype(v.dtype))
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, seq, width)


class BertLayer(nn.Module):
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        c = BERT
        dense = lambda width, name: nn.Dense(width, dtype=self.dtype, name=name)
        norm = lambda name: nn.LayerNorm(epsilon=c["eps"], dtype=self.dtype, name=name)
        dropout = nn.Dropout(c["dropout"], deterministic=not train)
        hidden = c["hidden"]
        a = attention(
            dense(hidden, "query")(x),
            dense(hidden, "key")(x),
            dense(hidden, "value")(x),
            c["heads"],
            dropout,
            causal=False,
        )
        x = norm("attention_norm")(x + dropout(dense(hidden, "attention_output")(a)))
        h = dense(hidden, "output")(nn.gelu(dense(c["ffn"], "intermediate")(x), approximate=False))
        return norm("output_norm")(x + dropout(h))


class Bert(nn.Module):
    vocab: int
    head: str
    classes: int
    dtype: Any

    @nn.compact
    def __call__(self, ids, train: bool):
        c = BERT
        hidden = c["hidden"]
        dropout = nn.Dropout(c["dropout"], deterministic=not train)
        words = nn.Embed(self.vocab, hidden, dtype=self.dtype, name="word_embeddings")
        positions = nn.Embed(c["max_positions"], hidden, dtype=self.dtype, name="position_embeddings")
        token_types = nn.Embed(c["type_vocab"], hidden, dtype=self.dtype, name="token_type_embeddings")
        # Every token is of type 0: row 0 of the token-type table, added everywhere.
        x = words(ids) + positions(jnp.arange(ids.shape[1])) + token_types(jnp.zeros((), jnp.int32))
        x = dropout(nn.LayerNorm(epsilon=c["eps"], dtype=self.dtype, name="embedding_norm")(x))
        for index in range(c["layers"]):
            x = BertLayer(self.dtype, name=f"layers.{index}")(x, train)
        if self.head == "classification":
            pooled = jnp.tanh(nn.Dense(hidden, dtype=self.dtype, name="pooler")(x[:, 0]))
            return nn.Dense(self.classes, dtype=self.dtype, name="classifier")(dropout(pooled))
        h = nn.gelu(nn.Dense(hidden, dtype=self.dtype, name="transform")(x), approximate=False)
        h = nn.LayerNorm(epsilon=c["eps"], dtype=self.dtype, name="transform_norm")(h)
        # The decoder's weight is the word embedding matrix (tied); only its bias is its own.
        bias = self.param("decoder_bias", nn.initializers.zeros, (self.vocab,))
        return words.attend(h) + bias.astype(self.dtype)


def _bert(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
    return Bert(spec.vocab_size, options.get(HEAD_OPTION, spec.heads[0][0]), spec.head(options).outputs, dtype)


MODELS.register("bert_base")(FlaxModel(_bert, init_std=INIT_STD))


class Gpt2Block(nn.Module):
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool, cache=None, offset=0):
        """`cache`: (keys, values) of (B, length, hidden), returned with this call's written at `offset`."""
        c = GPT2
        hidden = c["hidden"]
        dense = lambda width, name: nn.Dense(width, dtype=self.dtype, name=name)
        norm = lambda name: nn.LayerNorm(epsilon=c["eps"], dtype=self.dtype, name=name)
        dropout = nn.Dropout(c["dropout"], deterministic=not train)
        q, k, v = jnp.split(dense(3 * hidden, "c_attn")(norm("ln_1")(x)), 3, axis=-1)  # query, key, value
        if cache is not None:
            cache = tuple(
                jax.lax.dynamic_update_slice(held, new.astype(held.dtype), (0, offset, 0))
                for held, new in zip(cache, (k, v))
            )
            k, v = cache
        x = x + dropout(dense(hidden, "c_proj")(attention(q, k, v, c["heads"], dropout, causal=True, offset=offset)))
        h = nn.gelu(dense(c["ffn"], "c_fc")(norm("ln_2")(x)), approximate=True)  # GPT-2's "gelu_new"
        return x + dropout(dense(hidden, "mlp_proj")(h)), cache


class Gpt2(nn.Module):
    vocab: int
    dtype: Any

    @nn.compact
    def __call__(self, ids, train: bool, caches=None, offset=0):
        """Logits (B, S, vocab) for tokens at positions offset to offset + S - 1. Given caches (empty_caches'), it
        returns the logits and the caches with this call's keys and values written: a prompt's prefill at offset 0,
        then one token at a time; without, the tokens are the whole sequence."""
        c = GPT2
        wte = nn.Embed(self.vocab, c["hidden"], dtype=self.dtype, name="wte")
        wpe = nn.Embed(c["max_positions"], c["hidden"], dtype=self.dtype, name="wpe")
        x = nn.Dropout(c["dropout"], deterministic=not train)(wte(ids) + wpe(offset + jnp.arange(ids.shape[1])))
        written = []
        for index in range(c["layers"]):
            x, cache = Gpt2Block(self.dtype, name=f"h.{index}")(
                x, train, None if caches is None else caches[index], offset
            )
            written.append(cache)
        # The LM head is tied to the token embeddings, without a bias.
        logits = wte.attend(nn.LayerNorm(epsilon=c["eps"], dtype=self.dtype, name="ln_f")(x))
        return logits if caches is None else (logits, tuple(written))

    def empty_caches(self, batch_size: int, length: int, dtype: Any = None) -> tuple:
        """One zeroed (keys, values) pair per layer for `length` positions (a prompt and the tokens to generate), in
        the module's compute dtype unless given another."""
        c = GPT2
        if not 1 <= length <= c["max_positions"]:
            raise ValueError(
                f"a cache holds 1 to {c['max_positions']} positions (the position embeddings'), not {length}"
            )
        shape = (batch_size, length, c["hidden"])
        return tuple(
            (jnp.zeros(shape, dtype or self.dtype), jnp.zeros(shape, dtype or self.dtype)) for _ in range(c["layers"])
        )


def _gpt2(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
    return Gpt2(spec.vocab_size, dtype)


MODELS.register("gpt2_small")(FlaxModel(_gpt2, init_std=INIT_STD))


class Lstm(nn.Module):
    """PyTorch's multi-layer nn.LSTM (batch first, zero initial state), its parameters in PyTorch's names and
    layouts. Each layer's input projection runs over the whole sequence at once; the recurrence is a scan."""

    hidden: int
    layers: int
    dropout: float
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        gates = 4 * self.hidden
        for layer in range(self.layers):
            if layer:
                x = nn.Dropout(self.dropout, deterministic=not train)(x)
            w_ih = self.param(f"weight_ih_l{layer}", nn.initializers.zeros, (gates, x.shape[-1])).astype(self.dtype)
            w_hh = self.param(f"weight_hh_l{layer}", nn.initializers.zeros, (gates, self.hidden)).astype(self.dtype)
            bias = (
                self.param(f"bias_ih_l{layer}", nn.initializers.zeros, (gates,))
                + self.param(f"bias_hh_l{layer}", nn.initializers.zeros, (gates,))
            ).astype(self.dtype)
            projected = jnp.einsum("bsi,gi->sbg", x.astype(self.dtype), w_ih) + bias

            def cell(carry, inputs, w_hh=w_hh):  # this layer's weights, bound as the loop makes it
                h, c = carry
                i, f, g, o = jnp.split(inputs + h @ w_hh.T, 4, axis=-1)
                c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                h = jax.nn.sigmoid(o) * jnp.tanh(c)
                return (h, c), h

            zeros = jnp.zeros((x.shape[0], self.hidden), self.dtype)
            _, outputs = jax.lax.scan(cell, (zeros, zeros), projected)
            x = jnp.swapaxes(outputs, 0, 1)
        return x


class LstmLm(nn.Module):
    vocab: int
    dtype: Any

    @nn.compact
    def __call__(self, ids, train: bool):
        c = LSTM_LM
        dropout = nn.Dropout(c["dropout"], deterministic=not train)
        x = dropout(nn.Embed(self.vocab, c["embedding"], dtype=self.dtype, name="encoder")(ids))
        x = Lstm(c["hidden"], c["layers"], c["dropout"], self.dtype, name="rnn")(x, train)
        return nn.Dense(self.vocab, dtype=self.dtype, name="decoder")(dropout(x))


def _lstm_lm(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
    return LstmLm(spec.vocab_size, dtype)


MODELS.register("lstm_lm")(FlaxModel(_lstm_lm))
