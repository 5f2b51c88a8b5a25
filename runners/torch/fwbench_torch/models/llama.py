"""llama_small: a Llama-style decoder, defined here once.

The TensorFlow and JAX runners define the same network (their models/llama.py) and load this module's
state_dict by parameter name, so the names below are a contract with their loaders. The names are Llama's usual
ones (embed_tokens, layers.N.self_attn.q_proj, ..., norm, lm_head).

Token embedding; per layer, RMSNorm -> grouped-query self-attention with rotary position embeddings -> residual,
RMSNorm -> SwiGLU MLP -> residual; a final RMSNorm and an LM head of its own (untied); no biases, no dropout. The
sizes are the `size` option's (fwbench_core.architectures.LLAMA_SIZES): small has 124,668,672 parameters.

Rotary embeddings turn the two halves of each head's query and key by angles that grow with the position; the
tables of cos and sin are derived from the sizes (buffers, not weights: not in the state_dict). A forward pass takes
the position of its first token, and optionally a preallocated cache of each layer's keys and values: a prompt's
prefill writes its positions, each decoding step one more, and attends to everything the cache holds up to itself.
Attention is F.scaled_dot_product_attention with its grouped-query broadcast: FlopCounterMode counts its two
products over every query head, as the other runners count their einsums.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fwbench_core.architectures import LLAMA_EPS, LLAMA_ROPE_THETA, LLAMA_SIZE_OPTION, LLAMA_SIZES
from fwbench_core.models import ModelSpec

from . import MODELS
from .key_value_cache import KeyValueCache, empty_caches
from .text import init_transformer


def rotary_tables(head_dim: int, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's angles, (max_positions, head_dim): each frequency twice, as the two halves of
    a head turn together. Computed in float64, as the other runners compute theirs, so the float32 tables agree."""
    inverse_frequencies = LLAMA_ROPE_THETA ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(max_positions, dtype=torch.float64), inverse_frequencies)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().float(), angles.sin().float()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Heads (B, H, S, D) turned by their positions' angles (S, D): the first half of each head pairs with the second."""
    first, second = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat((-second, first), dim=-1) * sin.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        positions: torch.Tensor,
        cache: KeyValueCache | None = None,
    ) -> torch.Tensor:
        batch, seq, _ = x.shape

        def split(t: torch.Tensor, heads: int) -> torch.Tensor:
            return t.view(batch, seq, heads, self.head_dim).transpose(1, 2)

        q = rotate(split(self.q_proj(x), self.heads), cos, sin)
        k = rotate(split(self.k_proj(x), self.kv_heads), cos, sin)
        v = split(self.v_proj(x), self.kv_heads)
        if cache is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            out = cache.attend(q, k, v, positions, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim))


class SwiGlu(nn.Module):
    def __init__(self, hidden: int, mlp: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, mlp, bias=False)
        self.up_proj = nn.Linear(hidden, mlp, bias=False)
        self.down_proj = nn.Linear(mlp, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, mlp: int) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(hidden, eps=LLAMA_EPS)
        self.self_attn = Attention(hidden, heads, kv_heads)
        self.post_attention_layernorm = nn.RMSNorm(hidden, eps=LLAMA_EPS)
        self.mlp = SwiGlu(hidden, mlp)

    def forward(self, x, cos, sin, positions, cache: KeyValueCache | None = None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, positions, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, vocab: int, outputs: int, size: dict[str, int]) -> None:
        super().__init__()
        hidden, heads = size["hidden"], size["heads"]
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            DecoderLayer(hidden, heads, size["kv_heads"], size["mlp"]) for _ in range(size["layers"])
        )
        self.norm = nn.RMSNorm(hidden, eps=LLAMA_EPS)
        self.lm_head = nn.Linear(hidden, outputs, bias=False)
        cos, sin = rotary_tables(hidden // heads, size["max_positions"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        init_transformer(self)

    def forward(
        self, ids: torch.Tensor, caches: list[KeyValueCache] | None = None, offset: int | torch.Tensor = 0
    ) -> torch.Tensor:
        """Logits (B, S, outputs) for tokens at positions offset to offset + S - 1. Given caches (empty_caches'),
        each layer writes its keys and values there and attends to all the cache holds up to each token; without,
        the tokens are the whole sequence. `offset` may be a tensor, so that a compiled step serves every position."""
        positions = offset + torch.arange(ids.shape[1], device=ids.device)
        cos, sin = self.cos[positions], self.sin[positions]
        x = self.embed_tokens(ids)
        for index, layer in enumerate(self.layers):
            x = layer(x, cos, sin, positions, None if caches is None else caches[index])
        return self.lm_head(self.norm(x))

    def empty_caches(self, batch_size: int, length: int, dtype: torch.dtype | None = None) -> list[KeyValueCache]:
        """One zeroed cache per layer for `length` positions (a prompt and the tokens to generate), on the model's
        device, in its weights' dtype unless given another."""
        if not 1 <= length <= len(self.cos):
            raise ValueError(f"a cache holds 1 to {len(self.cos)} positions (the rotary tables'), not {length}")
        attention = self.layers[0].self_attn
        return empty_caches(
            len(self.layers), batch_size, attention.kv_heads, length, attention.head_dim, self.lm_head.weight, dtype
        )


@MODELS.register("llama_small")
def build_llama(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
    return Llama(spec.vocab_size, spec.head(options).outputs, LLAMA_SIZES[options[LLAMA_SIZE_OPTION]])
