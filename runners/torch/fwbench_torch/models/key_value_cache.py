"""The decoders' key-value cache (gpt2_small, llama_small): each layer's keys and values at every position a
generation reaches, preallocated once and written in place as the positions come, so that a compiled decoding step
sees the same shapes at every position."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class KeyValueCache:
    """One layer's keys and values: (batch, kv heads, length, head width) each."""

    keys: torch.Tensor
    values: torch.Tensor

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, **sdpa
    ) -> torch.Tensor:
        """Write the new tokens' keys and values (B, H, S, D) at `positions` (S,), then attend from their queries over
        the whole cache, each token seeing the positions up to its own: what lies past it is not written yet, or is
        left from an earlier request. `sdpa`: more of scaled_dot_product_attention's arguments (enable_gqa)."""
        self.keys.index_copy_(2, positions, k)
        self.values.index_copy_(2, positions, v)
        visible = torch.arange(self.keys.shape[2], device=q.device) <= positions[:, None]
        return F.scaled_dot_product_attention(q, self.keys, self.values, attn_mask=visible, **sdpa)


def empty_caches(
    layers: int, batch_size: int, kv_heads: int, length: int, head_dim: int, like: torch.Tensor, dtype=None
) -> list[KeyValueCache]:
    """One zeroed cache per layer for `length` positions, on `like`'s device, in its dtype unless given another
    (autocast's, where the projections that fill it run in it)."""
    shape = (batch_size, kv_heads, length, head_dim)
    return [
        KeyValueCache(
            torch.zeros(shape, dtype=dtype or like.dtype, device=like.device),
            torch.zeros(shape, dtype=dtype or like.dtype, device=like.device),
        )
        for _ in range(layers)
    ]
