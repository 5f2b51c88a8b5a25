"""tiny_decoder in PyTorch: the reference the other builders match, and what generation asks of a decoder here.

Token plus learned position embeddings, 2 pre-LayerNorm decoder layers (4-head causal self-attention, then a GELU
FFN, each added back to its input), a final LayerNorm and a linear LM head at every position: (B, S, vocab).

To generate (model.toml's `generates = true`), the torch runner asks the module for two things, as it asks its
built-in decoders: `empty_caches(batch_size, length, dtype)`, the caches of a request (here the runner's own
KeyValueCache, one per layer), and `forward(ids, caches, offset)`, the logits of the tokens `ids` at positions
offset, offset + 1, ..., their keys and values written into the caches. Without caches, forward is the plain
causal pass the other modes train and time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fwbench_torch.models.key_value_cache import KeyValueCache, empty_caches

from .sizes import EPS, FFN, HEAD_DIM, HEADS, INIT_STD, LAYERS, WIDTH


class DecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(WIDTH, eps=EPS)
        self.query = nn.Linear(WIDTH, WIDTH)
        self.key = nn.Linear(WIDTH, WIDTH)
        self.value = nn.Linear(WIDTH, WIDTH)
        self.attention_output = nn.Linear(WIDTH, WIDTH)
        self.ffn_norm = nn.LayerNorm(WIDTH, eps=EPS)
        self.intermediate = nn.Linear(WIDTH, FFN)
        self.output = nn.Linear(FFN, WIDTH)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: KeyValueCache | None) -> torch.Tensor:
        batch, seq, _ = x.shape
        h = self.attention_norm(x)
        q, k, v = (p(h).view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2) for p in (self.query, self.key, self.value))
        if cache is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # writes k and v at `positions`, then attends over the cache up to each token
            a = cache.attend(q, k, v, positions)
        x = x + self.attention_output(a.transpose(1, 2).reshape(batch, seq, WIDTH))
        return x + self.output(F.gelu(self.intermediate(self.ffn_norm(x))))


class TinyDecoder(nn.Module):
    def __init__(self, vocab: int, max_positions: int) -> None:
        super().__init__()
        self.token_embeddings = nn.Embedding(vocab, WIDTH)
        self.position_embeddings = nn.Embedding(max_positions, WIDTH)
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.final_norm = nn.LayerNorm(WIDTH, eps=EPS)
        self.head = nn.Linear(WIDTH, vocab)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=INIT_STD)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(
        self, ids: torch.Tensor, caches: list[KeyValueCache] | None = None, offset: int | torch.Tensor = 0
    ) -> torch.Tensor:
        # `offset` may be a tensor, so that one compiled decode step serves every position.
        positions = offset + torch.arange(ids.shape[1], device=ids.device)
        x = self.token_embeddings(ids) + self.position_embeddings(positions)
        for index, layer in enumerate(self.layers):
            x = layer(x, positions, None if caches is None else caches[index])
        return self.head(self.final_norm(x))

    def empty_caches(self, batch_size: int, length: int, dtype: torch.dtype | None = None) -> list[KeyValueCache]:
        """One zeroed cache per layer for `length` positions (prompt and new tokens), on the weights' device, in
        their dtype unless given another (autocast's)."""
        return empty_caches(LAYERS, batch_size, HEADS, length, HEAD_DIM, self.head.weight, dtype)


def build(spec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
    return TinyDecoder(spec.vocab_size, spec.max_input_shape[0])
