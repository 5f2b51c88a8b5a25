"""tiny_transformer in PyTorch: the reference the other builders match.

Token plus learned position embeddings, dropout, 2 pre-LayerNorm encoder layers (4-head self-attention, then a
GELU FFN, each added back to its input), a final LayerNorm, and a linear head: on the first token for
head=classification -> (B, classes), at every position for head=mlm -> (B, S, vocab).

The module names (token_embeddings, layers.0.query, ..., final_norm, head) are the contract with the other
builders: TensorFlow's layers carry the same names, and the Flax submodules too. Attention is
F.scaled_dot_product_attention, whose two products (scores and values) PyTorch's FLOP counter counts, as the
others count their two einsums.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fwbench_core.choices import Objective

WIDTH, HEADS, FFN, LAYERS = 128, 4, 512, 2
EPS = 1e-5  # LayerNorm
DROPOUT = 0.1
INIT_STD = 0.02  # BERT's: every matrix and embedding normal(0, 0.02), biases zero


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, dropout: float) -> torch.Tensor:
    """Multi-head scaled dot-product attention over (B, S, D) projections, back to (B, S, D)."""
    batch, seq, width = q.shape
    shape = (batch, seq, heads, width // heads)
    out = F.scaled_dot_product_attention(
        q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2), v.view(shape).transpose(1, 2), dropout_p=dropout
    )
    return out.transpose(1, 2).reshape(batch, seq, width)


class EncoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # Attributes, not globals, so that torch.jit.script can read them.
        self.heads, self.dropout_p = HEADS, DROPOUT
        self.attention_norm = nn.LayerNorm(WIDTH, eps=EPS)
        self.query = nn.Linear(WIDTH, WIDTH)
        self.key = nn.Linear(WIDTH, WIDTH)
        self.value = nn.Linear(WIDTH, WIDTH)
        self.attention_output = nn.Linear(WIDTH, WIDTH)
        self.ffn_norm = nn.LayerNorm(WIDTH, eps=EPS)
        self.intermediate = nn.Linear(WIDTH, FFN)
        self.output = nn.Linear(FFN, WIDTH)
        self.dropout = nn.Dropout(DROPOUT)
        self.gelu = nn.GELU()  # exact (erf)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.attention_norm(x)
        a = attention(self.query(h), self.key(h), self.value(h), self.heads, self.dropout_p if self.training else 0.0)
        x = x + self.dropout(self.attention_output(a))
        h = self.output(self.gelu(self.intermediate(self.ffn_norm(x))))
        return x + self.dropout(h)


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int, max_positions: int, outputs: int, first_token: bool) -> None:
        super().__init__()
        self.first_token = first_token
        self.token_embeddings = nn.Embedding(vocab, WIDTH)
        self.position_embeddings = nn.Embedding(max_positions, WIDTH)
        self.dropout = nn.Dropout(DROPOUT)
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(LAYERS))
        self.final_norm = nn.LayerNorm(WIDTH, eps=EPS)
        self.head = nn.Linear(WIDTH, outputs)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=INIT_STD)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.dropout(self.token_embeddings(ids) + self.position_embeddings(positions))
        for layer in self.layers:
            x = layer(x)
        x = self.final_norm(x)
        if self.first_token:
            x = x[:, 0]
        return self.head(x)


def build(spec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
    head = spec.head(options)
    # One position embedding per position the declaration accepts.
    return TinyTransformer(spec.vocab_size, spec.max_input_shape[0], head.outputs, head.objective is Objective.CLASSIFY)
