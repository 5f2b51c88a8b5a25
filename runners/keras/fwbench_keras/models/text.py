"""Text models: defined here, once, to match the PyTorch runner's (fwbench_torch.models.text).

Each network is the PyTorch one layer for layer: the same widths, epsilons,
GELU forms (exact erf for BERT, tanh approximation for GPT-2), dropout rates
and places, tied weights where PyTorch ties them (BERT's MLM decoder and
GPT-2's LM head reuse the word embedding matrix), so parameter counts and
FLOPs agree. Attention is an einsum for the scores and one for the values,
counted by the FLOP counter as PyTorch counts scaled_dot_product_attention.

One difference in parameters, by construction: lstm_lm. PyTorch's nn.LSTM keeps
two bias vectors per layer (b_ih and b_hh, 4 x 650 each); Keras' LSTM keeps one,
which is all the cell uses (z = x W + h U + b). Keras therefore counts
2 layers x 2,600 = 5,200 fewer parameters: 19,775,200 against PyTorch's
19,780,400 (0.026%). The loader stores b_ih + b_hh as the Keras bias. Both
order the gates input, forget, cell, output (PyTorch's i, f, g, o), so the
kernels only need transposing.

The LSTM layers use cuDNN where Keras sees a GPU and a While loop elsewhere;
the FLOP counter handles both, and skips the one step Keras traces outside its
loop only to learn the output's structure.

The loaders copy PyTorch state_dicts (NumPy arrays keyed by parameter name)
into these layers: bert_base (both heads), gpt2_small and lstm_lm.
"""

from __future__ import annotations

import math

import keras
from keras import layers, ops

from fwbench_core.architectures import BERT, GPT2, INIT_STD, LSTM_LM
from fwbench_core.models import HEAD_OPTION, ModelSpec

from .. import torch_weights
from . import MODELS, KerasModel, TorchWeights


def _init():
    return keras.initializers.RandomNormal(stddev=INIT_STD)


def gelu_erf(x):
    return keras.activations.gelu(x, approximate=False)


def gelu_tanh(x):
    return keras.activations.gelu(x, approximate=True)


def _dense(units: int, name: str, activation=None) -> layers.Dense:
    return layers.Dense(units, activation=activation, kernel_initializer=_init(), name=name)


def _layer_norm(eps: float, name: str) -> layers.LayerNormalization:
    return layers.LayerNormalization(epsilon=eps, name=name)


class TokenEmbedding(layers.Layer):
    """Word plus learned position embeddings (plus token type 0, where there are types): PyTorch's sum."""

    def __init__(self, vocab: int, width: int, max_positions: int, type_vocab: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.vocab, self.width, self.max_positions, self.type_vocab = vocab, width, max_positions, type_vocab

    def build(self, input_shape) -> None:
        self.word = self.add_weight((self.vocab, self.width), initializer=_init(), name="word")
        self.position = self.add_weight((self.max_positions, self.width), initializer=_init(), name="position")
        self.token_type = (
            self.add_weight((self.type_vocab, self.width), initializer=_init(), name="token_type")
            if self.type_vocab
            else None
        )

    def call(self, ids, positions=None):
        """`positions` (S,): where the tokens stand, for a generation's step past the first; else 0 to S - 1."""
        position = (
            self.position[: ops.shape(ids)[1]] if positions is None else ops.take(self.position, positions, axis=0)
        )
        x = ops.take(self.word, ids, axis=0) + position
        if self.token_type is not None:
            x = x + self.token_type[0]  # every token is of type 0
        return x

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.width)


class TiedLogits(layers.Layer):
    """Logits against a TokenEmbedding's word matrix (x E^T), with a bias of its own where asked.

    The embedding is tracked as a sublayer, so this layer's `weights` include the
    embedding's; Keras counts and trains each variable once.
    """

    def __init__(self, embedding: TokenEmbedding, use_bias: bool, **kwargs) -> None:
        super().__init__(**kwargs)
        self.embedding, self.use_bias = embedding, use_bias

    def build(self, input_shape) -> None:
        vocab = self.embedding.vocab
        self.bias = self.add_weight((vocab,), initializer="zeros", name="bias") if self.use_bias else None

    def call(self, x):
        logits = ops.einsum("bsd,vd->bsv", x, self.embedding.word)
        return logits + self.bias if self.bias is not None else logits

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.embedding.vocab)


class DotProductAttention(layers.Layer):
    """Multi-head softmax(q k^T / sqrt(d)) v over (B, S, D) projections; two einsums, as PyTorch's SDPA."""

    def __init__(self, heads: int, dropout: float, causal: bool, **kwargs) -> None:
        super().__init__(**kwargs)
        self.heads, self.causal = heads, causal
        self.dropout = layers.Dropout(dropout)

    def call(self, q, k, v, training=None):
        seq, width = q.shape[1], q.shape[2]
        depth = width // self.heads

        def split(t):
            return ops.reshape(t, (-1, seq, self.heads, depth))

        scores = ops.einsum("bqhd,bkhd->bhqk", split(q), split(k)) * (1.0 / math.sqrt(depth))
        if self.causal:
            allowed = ops.tril(ops.ones((seq, seq), dtype="bool"))
            scores = ops.where(allowed, scores, float("-inf"))
        probs = self.dropout(ops.softmax(scores, axis=-1), training=training)
        return ops.reshape(ops.einsum("bhqk,bkhd->bqhd", probs, split(v)), (-1, seq, width))

    def compute_output_shape(self, q_shape, k_shape=None, v_shape=None):
        return q_shape


class FirstToken(layers.Layer):
    def call(self, x):
        return x[:, 0]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])


class SplitQkv(layers.Layer):
    def call(self, x):
        return tuple(ops.split(x, 3, axis=-1))

    def compute_output_shape(self, input_shape):
        shape = (*input_shape[:-1], input_shape[-1] // 3)
        return (shape, shape, shape)


def _tied_vocab(spec: ModelSpec, options: dict[str, str]) -> int:
    """A head tied to the word embeddings predicts exactly the input vocabulary."""
    outputs = spec.head(options).outputs
    if outputs != spec.vocab_size:
        raise ValueError(f"{spec.name}: a tied head has {outputs} outputs but the vocabulary is {spec.vocab_size}")
    return outputs


def _token_input(input_shape: tuple[int, ...]):
    return keras.Input(shape=input_shape, dtype="int32", name="token_ids")


# BERT


def _bert_layer(x, i: int):
    c = BERT
    name = f"layer_{i}"
    a = DotProductAttention(c["heads"], c["dropout"], causal=False, name=f"{name}_attention")(
        _dense(c["hidden"], f"{name}_query")(x),
        _dense(c["hidden"], f"{name}_key")(x),
        _dense(c["hidden"], f"{name}_value")(x),
    )
    a = _dense(c["hidden"], f"{name}_attention_output")(a)
    a = layers.Dropout(c["dropout"], name=f"{name}_attention_dropout")(a)
    x = _layer_norm(c["eps"], f"{name}_attention_norm")(layers.Add(name=f"{name}_attention_add")([x, a]))
    h = _dense(c["ffn"], f"{name}_intermediate", activation=gelu_erf)(x)
    h = layers.Dropout(c["dropout"], name=f"{name}_output_dropout")(_dense(c["hidden"], f"{name}_output")(h))
    return _layer_norm(c["eps"], f"{name}_output_norm")(layers.Add(name=f"{name}_output_add")([x, h]))


def _build_bert(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    c = BERT
    head = options.get(HEAD_OPTION, spec.heads[0][0])
    if head == "mlm":
        _tied_vocab(spec, options)
    ids = _token_input(input_shape)
    embedding = TokenEmbedding(spec.vocab_size, c["hidden"], c["max_positions"], c["type_vocab"], name="embeddings")
    x = _layer_norm(c["eps"], "embedding_norm")(embedding(ids))
    x = layers.Dropout(c["dropout"], name="embedding_dropout")(x)
    for i in range(c["layers"]):
        x = _bert_layer(x, i)
    if head == "classification":
        pooled = _dense(c["hidden"], "pooler", activation="tanh")(FirstToken(name="cls")(x))
        pooled = layers.Dropout(c["dropout"], name="pooler_dropout")(pooled)
        outputs = _dense(spec.head(options).outputs, "classifier")(pooled)
    else:
        h = _dense(c["hidden"], "transform", activation=gelu_erf)(x)
        h = _layer_norm(c["eps"], "transform_norm")(h)
        outputs = TiedLogits(embedding, use_bias=True, name="decoder")(h)
    return keras.Model(ids, outputs, name=f"bert_base_{head}")


def _load_bert(model: keras.Model, weights: TorchWeights) -> None:
    model.get_layer("embeddings").set_weights(
        [weights[f"{kind}_embeddings.weight"] for kind in ("word", "position", "token_type")]
    )
    torch_weights.layer_norm(model.get_layer("embedding_norm"), weights, "embedding_norm")
    for i in range(BERT["layers"]):
        for part in ("query", "key", "value", "attention_output", "intermediate", "output"):
            torch_weights.dense(model.get_layer(f"layer_{i}_{part}"), weights, f"layers.{i}.{part}")
        for part in ("attention_norm", "output_norm"):
            torch_weights.layer_norm(model.get_layer(f"layer_{i}_{part}"), weights, f"layers.{i}.{part}")
    if "classifier.weight" in weights:
        torch_weights.dense(model.get_layer("pooler"), weights, "pooler")
        torch_weights.dense(model.get_layer("classifier"), weights, "classifier")
    else:
        torch_weights.dense(model.get_layer("transform"), weights, "transform")
        torch_weights.layer_norm(model.get_layer("transform_norm"), weights, "transform_norm")
        model.get_layer("decoder").bias.assign(weights["decoder_bias"])  # its weight is the word embeddings


MODELS.register("bert_base")(KerasModel(_build_bert, _load_bert))


# GPT-2


def _gpt2_block(x, i: int):
    c = GPT2
    name = f"h_{i}"
    qkv = _dense(3 * c["hidden"], f"{name}_c_attn")(_layer_norm(c["eps"], f"{name}_ln_1")(x))
    q, k, v = SplitQkv(name=f"{name}_split")(qkv)
    a = DotProductAttention(c["heads"], c["dropout"], causal=True, name=f"{name}_attention")(q, k, v)
    a = layers.Dropout(c["dropout"], name=f"{name}_attention_dropout")(_dense(c["hidden"], f"{name}_c_proj")(a))
    x = layers.Add(name=f"{name}_attention_add")([x, a])
    h = _dense(c["ffn"], f"{name}_c_fc", activation=gelu_tanh)(_layer_norm(c["eps"], f"{name}_ln_2")(x))
    h = layers.Dropout(c["dropout"], name=f"{name}_mlp_dropout")(_dense(c["hidden"], f"{name}_mlp_proj")(h))
    return layers.Add(name=f"{name}_mlp_add")([x, h])


def _build_gpt2(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    c = GPT2
    ids = _token_input(input_shape)
    embedding = TokenEmbedding(_tied_vocab(spec, options), c["hidden"], c["max_positions"], name="embeddings")
    x = layers.Dropout(c["dropout"], name="embedding_dropout")(embedding(ids))
    for i in range(c["layers"]):
        x = _gpt2_block(x, i)
    x = _layer_norm(c["eps"], "ln_f")(x)
    outputs = TiedLogits(embedding, use_bias=False, name="lm_head")(x)
    return keras.Model(ids, outputs, name="gpt2_small")


def _load_gpt2(model: keras.Model, weights: TorchWeights) -> None:
    model.get_layer("embeddings").set_weights([weights["wte.weight"], weights["wpe.weight"]])
    for i in range(GPT2["layers"]):
        for part in ("c_attn", "c_proj", "c_fc", "mlp_proj"):
            torch_weights.dense(model.get_layer(f"h_{i}_{part}"), weights, f"h.{i}.{part}")
        for part in ("ln_1", "ln_2"):
            torch_weights.layer_norm(model.get_layer(f"h_{i}_{part}"), weights, f"h.{i}.{part}")
    torch_weights.layer_norm(model.get_layer("ln_f"), weights, "ln_f")


MODELS.register("gpt2_small")(KerasModel(_build_gpt2, _load_gpt2))


# LSTM language model


def _build_lstm_lm(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    c = LSTM_LM
    ids = _token_input(input_shape)
    x = layers.Embedding(spec.vocab_size, c["embedding"], name="encoder")(ids)
    x = layers.Dropout(c["dropout"], name="encoder_dropout")(x)
    for i in range(c["layers"]):
        if i:
            x = layers.Dropout(c["dropout"], name=f"rnn_dropout_{i}")(x)  # nn.LSTM's dropout between layers
        # Zero initial state; cuDNN on a GPU (use_cudnn="auto"), a While loop elsewhere.
        x = layers.LSTM(c["hidden"], return_sequences=True, name=f"rnn_{i}")(x)
    x = layers.Dropout(c["dropout"], name="rnn_output_dropout")(x)
    outputs = layers.Dense(spec.head(options).outputs, name="decoder")(x)
    return keras.Model(ids, outputs, name="lstm_lm")


def _load_lstm_lm(model: keras.Model, weights: TorchWeights) -> None:
    model.get_layer("encoder").set_weights([weights["encoder.weight"]])
    for i in range(LSTM_LM["layers"]):
        # Gates in the same order (i, f, g/c, o): transpose the kernels, sum the two biases.
        model.get_layer(f"rnn_{i}").set_weights(
            [
                weights[f"rnn.weight_ih_l{i}"].T,
                weights[f"rnn.weight_hh_l{i}"].T,
                weights[f"rnn.bias_ih_l{i}"] + weights[f"rnn.bias_hh_l{i}"],
            ]
        )
    torch_weights.dense(model.get_layer("decoder"), weights, "decoder")


MODELS.register("lstm_lm")(KerasModel(_build_lstm_lm, _load_lstm_lm))
