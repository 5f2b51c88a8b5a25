"""Text models: defined here, once.

The TensorFlow runner defines the same networks layer for layer
(fwbench_tensorflow.models.text) and loads these modules' state_dicts by
parameter name, so the names below are a contract with its loaders.

bert_base   BERT-base encoder: 12 post-LayerNorm layers (eps 1e-12), hidden 768,
            12 heads, FFN 3072 with exact (erf) GELU, learned positions (512),
            token-type embeddings (2) with every token of type 0, dropout 0.1.
            head=classification: pooler (dense + tanh on [CLS]), dropout, dense
            to 2 classes -> (B, 2). head=mlm: transform (dense + GELU +
            LayerNorm), then a decoder to the vocabulary whose weight is the
            word embedding matrix (tied, as in BertForMaskedLM) plus its own
            bias -> (B, S, 30522). Tied in both frameworks.
gpt2_small  GPT-2 124M: 12 pre-LayerNorm blocks (eps 1e-5), tanh-approximate
            GELU ("gelu_new"), causal attention, final LayerNorm, LM head tied to
            the token embeddings, no bias -> (B, S, 50257); 124,439,808
            parameters. Its forward takes the position of its first token
            and optionally a preallocated key-value cache, which generation
            prefills with a prompt and extends a token at a time.
lstm_lm     2-layer LSTM language model (PyTorch's word_language_model at the
            "medium" size): embedding 650, LSTM 650 x 2, dropout 0.5 on the
            embeddings, between the two LSTM layers and on the LSTM output,
            untied decoder 650 -> 10000 -> (B, S, 10000). nn.LSTM keeps two bias
            vectors per layer (b_ih and b_hh, 4 x 650 each) where Keras keeps one
            (their sum is all the cell ever uses), so PyTorch counts 2 x 2600 =
            5,200 more parameters: 19,780,400 against 19,775,200 (0.026%).

Attention is F.scaled_dot_product_attention: FlopCounterMode counts its two
products (scores and values), as the TensorFlow runner counts its einsums.
Weights start as in the reference implementations (normal, std 0.02, for the
transformers; PyTorch's defaults for the LSTM model); none are downloaded.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fwbench_core.architectures import BERT, GPT2, INIT_STD, LSTM_LM
from fwbench_core.models import HEAD_OPTION, ModelSpec

from . import MODELS
from .key_value_cache import KeyValueCache, empty_caches


def split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, S, D) projections as (B, heads, S, D / heads)."""
    batch, seq, width = t.shape
    return t.view(batch, seq, heads, width // heads).transpose(1, 2)


def merge_heads(t: torch.Tensor) -> torch.Tensor:
    """(B, heads, S, head width) back to (B, S, D)."""
    batch, heads, seq, head_dim = t.shape
    return t.transpose(1, 2).reshape(batch, seq, heads * head_dim)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, dropout: float, causal: bool):
    """Multi-head scaled dot-product attention over (B, S, D) projections, back to (B, S, D)."""
    q, k, v = (split_heads(t, heads) for t in (q, k, v))
    return merge_heads(F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal))


def tied_vocab(spec: ModelSpec, options: dict[str, str]) -> int:
    """A head tied to the word embeddings predicts exactly the input vocabulary."""
    outputs = spec.head(options).outputs
    if outputs != spec.vocab_size:
        raise ValueError(f"{spec.name}: a tied head has {outputs} outputs but the vocabulary is {spec.vocab_size}")
    return outputs


def init_transformer(module: nn.Module) -> None:
    """BERT's and GPT-2's initialization: normal(0, 0.02) weights, zero biases, unit LayerNorms."""
    for sub in module.modules():
        if isinstance(sub, (nn.Linear, nn.Embedding)):
            nn.init.normal_(sub.weight, std=INIT_STD)
        if isinstance(sub, nn.Linear) and sub.bias is not None:
            nn.init.zeros_(sub.bias)
        if isinstance(sub, nn.LayerNorm):
            nn.init.ones_(sub.weight)
            nn.init.zeros_(sub.bias)


# BERT


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, eps: float, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout_p = heads, dropout
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, ffn)
        self.output = nn.Linear(ffn, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.gelu = nn.GELU()  # exact (erf)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.dropout_p if self.training else 0.0
        a = attention(self.query(x), self.key(x), self.value(x), self.heads, p, causal=False)
        x = self.attention_norm(x + self.dropout(self.attention_output(a)))
        h = self.output(self.gelu(self.intermediate(x)))
        return self.output_norm(x + self.dropout(h))


class Bert(nn.Module):
    def __init__(self, vocab: int, head: str, classes: int) -> None:
        super().__init__()
        c = BERT
        hidden = c["hidden"]
        self.head = head
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(c["max_positions"], hidden)
        self.token_type_embeddings = nn.Embedding(c["type_vocab"], hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=c["eps"])
        self.dropout = nn.Dropout(c["dropout"])
        self.layers = nn.ModuleList(
            BertLayer(hidden, c["heads"], c["ffn"], c["eps"], c["dropout"]) for _ in range(c["layers"])
        )
        if head == "classification":
            self.pooler = nn.Linear(hidden, hidden)
            self.classifier = nn.Linear(hidden, classes)
        else:
            self.transform = nn.Linear(hidden, hidden)
            self.transform_norm = nn.LayerNorm(hidden, eps=c["eps"])
            self.gelu = nn.GELU()
            # The decoder's weight is word_embeddings.weight; only its bias is its own.
            self.decoder_bias = nn.Parameter(torch.zeros(vocab))
        init_transformer(self)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        # Every token is of type 0: row 0 of the token-type table, added everywhere.
        x = self.word_embeddings(ids) + self.position_embeddings(positions) + self.token_type_embeddings.weight[0]
        x = self.dropout(self.embedding_norm(x))
        for layer in self.layers:
            x = layer(x)
        if self.head == "classification":
            pooled = torch.tanh(self.pooler(x[:, 0]))
            return self.classifier(self.dropout(pooled))
        h = self.transform_norm(self.gelu(self.transform(x)))
        return F.linear(h, self.word_embeddings.weight, self.decoder_bias)


@MODELS.register("bert_base")
def build_bert(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
    head = options.get(HEAD_OPTION, spec.heads[0][0])
    if head == "mlm":
        tied_vocab(spec, options)
    return Bert(spec.vocab_size, head, spec.head(options).outputs)


# GPT-2


class Gpt2Block(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, eps: float, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout_p = heads, dropout
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.c_attn = nn.Linear(hidden, 3 * hidden)  # query, key, value in that order
        self.c_proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.c_fc = nn.Linear(hidden, ffn)
        self.mlp_proj = nn.Linear(ffn, hidden)
        self.dropout = nn.Dropout(dropout)
        self.gelu = nn.GELU(approximate="tanh")  # GPT-2's "gelu_new"

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor | None = None, cache: KeyValueCache | None = None
    ) -> torch.Tensor:
        p = self.dropout_p if self.training else 0.0
        q, k, v = self.c_attn(self.ln_1(x)).chunk(3, dim=-1)
        if cache is None:
            a = attention(q, k, v, self.heads, p, causal=True)
        else:
            q, k, v = (split_heads(t, self.heads) for t in (q, k, v))
            a = merge_heads(cache.attend(q, k, v, positions))
        x = x + self.dropout(self.c_proj(a))
        return x + self.dropout(self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x)))))


class Gpt2(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        c = GPT2
        self.wte = nn.Embedding(vocab, c["hidden"])
        self.wpe = nn.Embedding(c["max_positions"], c["hidden"])
        self.dropout = nn.Dropout(c["dropout"])
        self.h = nn.ModuleList(
            Gpt2Block(c["hidden"], c["heads"], c["ffn"], c["eps"], c["dropout"]) for _ in range(c["layers"])
        )
        self.ln_f = nn.LayerNorm(c["hidden"], eps=c["eps"])
        init_transformer(self)

    def forward(
        self, ids: torch.Tensor, caches: list[KeyValueCache] | None = None, offset: int | torch.Tensor = 0
    ) -> torch.Tensor:
        """Logits (B, S, vocab) for tokens at positions offset to offset + S - 1. Given caches (empty_caches'), each
        block writes its keys and values there and attends to all the cache holds up to each token; without, the
        tokens are the whole sequence. `offset` may be a tensor, so that a compiled step serves every position."""
        positions = offset + torch.arange(ids.shape[1], device=ids.device)
        x = self.dropout(self.wte(ids) + self.wpe(positions))
        for index, block in enumerate(self.h):
            x = block(x, positions, None if caches is None else caches[index])
        return F.linear(self.ln_f(x), self.wte.weight)  # LM head tied to the token embeddings, no bias

    def empty_caches(self, batch_size: int, length: int, dtype: torch.dtype | None = None) -> list[KeyValueCache]:
        """One zeroed cache per block for `length` positions (a prompt and the tokens to generate), on the model's
        device, in its weights' dtype unless given another."""
        if not 1 <= length <= self.wpe.num_embeddings:
            raise ValueError(
                f"a cache holds 1 to {self.wpe.num_embeddings} positions (the position table's), not {length}"
            )
        heads = self.h[0].heads
        hidden = self.wte.embedding_dim
        return empty_caches(len(self.h), batch_size, heads, length, hidden // heads, self.wte.weight, dtype)


@MODELS.register("gpt2_small")
def build_gpt2(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
    return Gpt2(tied_vocab(spec, options))


# LSTM language model


class LstmLm(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        c = LSTM_LM
        self.encoder = nn.Embedding(vocab, c["embedding"])
        self.dropout = nn.Dropout(c["dropout"])
        self.rnn = nn.LSTM(c["embedding"], c["hidden"], c["layers"], dropout=c["dropout"], batch_first=True)
        self.decoder = nn.Linear(c["hidden"], vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        output, _ = self.rnn(self.dropout(self.encoder(ids)))  # zero initial state
        return self.decoder(self.dropout(output))


@MODELS.register("lstm_lm")
def build_lstm_lm(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
    return LstmLm(spec.vocab_size)
