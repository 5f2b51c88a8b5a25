"""Speech models: the PyTorch runner's networks (fwbench_torch.models.speech), named as its modules so that
its state_dicts load by name; inputs are taken as they come (no feature extraction) and the outputs are
CTC logits (batch, frames, alphabet) with the blank at index 0.

deepspeech2's GRU keeps nn.GRU's parameters as they are (two bias vectors per gate block, gates r, z, n,
the reset gate applied to the recurrent product with its bias), so it has PyTorch's parameter count and
arithmetic exactly. wav2vec2_base's positional convolution keeps PyTorch's weight-norm parametrization
(original0: the norm g per kernel position, original1: the direction v), the weight being g * v / |v|.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fwbench_core.architectures import (
    DS2_CONVS,
    DS2_HIDDEN,
    DS2_RNN_LAYERS,
    W2V_CONV_CHANNELS,
    W2V_CONVS,
    W2V_DIM,
    W2V_DROPOUT,
    W2V_EPS,
    W2V_FFN,
    W2V_HEADS,
    W2V_LAYERS,
    W2V_POS_GROUPS,
    W2V_POS_KERNEL,
)
from fwbench_core.models import ModelSpec

from . import MODELS, FlaxModel
from .text import attention
from .vision import batch_norm


class BidirectionalGru(nn.Module):
    """PyTorch's multi-layer bidirectional nn.GRU (batch first, zero initial state), in its names and layouts."""

    hidden: int
    layers: int
    dtype: Any

    def _direction(self, x, layer: int, suffix: str, reverse: bool):
        gates = 3 * self.hidden

        def param(name: str, shape: tuple) -> Any:
            return self.param(f"{name}_l{layer}{suffix}", nn.initializers.zeros, shape).astype(self.dtype)

        w_ih, w_hh = param("weight_ih", (gates, x.shape[-1])), param("weight_hh", (gates, self.hidden))
        b_ih, b_hh = param("bias_ih", (gates,)), param("bias_hh", (gates,))
        projected = jnp.einsum("bsi,gi->sbg", x, w_ih) + b_ih  # the input's part of every gate, every step

        def cell(h, inputs):
            ir, iz, in_ = jnp.split(inputs, 3, axis=-1)
            hr, hz, hn = jnp.split(h @ w_hh.T + b_hh, 3, axis=-1)
            r, z = jax.nn.sigmoid(ir + hr), jax.nn.sigmoid(iz + hz)
            h = (1 - z) * jnp.tanh(in_ + r * hn) + z * h
            return h, h

        _, outputs = jax.lax.scan(cell, jnp.zeros((x.shape[0], self.hidden), self.dtype), projected, reverse=reverse)
        return jnp.swapaxes(outputs, 0, 1)

    @nn.compact
    def __call__(self, x):
        x = x.astype(self.dtype)
        for layer in range(self.layers):
            x = jnp.concatenate(
                [self._direction(x, layer, "", False), self._direction(x, layer, "_reverse", True)], axis=-1
            )
        return x


class DeepSpeech2(nn.Module):
    alphabet: int
    dtype: Any

    @nn.compact
    def __call__(self, spectrogram, train: bool):  # (batch, F, T)
        x = spectrogram[..., None]  # a one-channel image, NHWC
        for index, (out, kernel, stride, padding) in enumerate(DS2_CONVS):
            x = nn.Conv(
                out,
                kernel,
                strides=stride,
                padding=tuple((p, p) for p in padding),
                use_bias=False,
                dtype=self.dtype,
                name=f"conv.{3 * index}",
            )(x)
            x = jnp.clip(batch_norm(f"conv.{3 * index + 1}", train, self.dtype)(x), 0, 20)  # Hardtanh(0, 20)
        batch, freq, frames, channels = x.shape
        # One feature vector per frame, channel major (c * F' + f) as PyTorch flattens (C, F').
        x = jnp.transpose(x, (0, 2, 3, 1)).reshape(batch, frames, channels * freq)
        x = BidirectionalGru(DS2_HIDDEN, DS2_RNN_LAYERS, self.dtype, name="rnn")(x)
        return nn.Dense(self.alphabet, dtype=self.dtype, name="fc")(x)


def _deepspeech2(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
    return DeepSpeech2(spec.head(options).outputs, dtype)


MODELS.register("deepspeech2")(FlaxModel(_deepspeech2))


# Names of the positional convolution's weight-norm parameters, as PyTorch's parametrization names them.
WEIGHT_NORM_G, WEIGHT_NORM_V = "parametrizations.weight.original0", "parametrizations.weight.original1"


class PositionalConv(nn.Module):
    """wav2vec2's weight-normed grouped Conv1d (norm over the kernel dimension, dim=2), in PyTorch's layout
    (out, in / groups, kernel); its last frame dropped (an even kernel makes one too many), then GELU."""

    dtype: Any

    @nn.compact
    def __call__(self, x):  # (batch, frames, 768)
        shape = (W2V_DIM, W2V_DIM // W2V_POS_GROUPS, W2V_POS_KERNEL)
        g = self.param(WEIGHT_NORM_G, nn.initializers.ones, (1, 1, W2V_POS_KERNEL))
        v = self.param(WEIGHT_NORM_V, nn.initializers.zeros, shape)
        bias = self.param("bias", nn.initializers.zeros, (W2V_DIM,))
        weight = g * v / jnp.sqrt(jnp.sum(v * v, axis=(0, 1), keepdims=True))
        pad = W2V_POS_KERNEL // 2
        y = jax.lax.conv_general_dilated(
            x.astype(self.dtype),
            weight.astype(self.dtype),
            (1,),
            ((pad, pad),),
            dimension_numbers=("NWC", "OIW", "NWC"),
            feature_group_count=W2V_POS_GROUPS,
        ) + bias.astype(self.dtype)
        return nn.gelu(y[:, :-1], approximate=False)


class EncoderLayer(nn.Module):
    """Post-LN, as wav2vec2-base: x = LN(x + attention(x)); x = LN(x + FFN(x))."""

    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        dense = lambda width, name: nn.Dense(width, dtype=self.dtype, name=name)
        norm = lambda name: nn.LayerNorm(epsilon=W2V_EPS, dtype=self.dtype, name=name)
        dropout = nn.Dropout(W2V_DROPOUT, deterministic=not train)
        q, k, v = (dense(W2V_DIM, f"attention.{name}_proj")(x) for name in ("q", "k", "v"))
        a = dense(W2V_DIM, "attention.out_proj")(attention(q, k, v, W2V_HEADS, dropout, causal=False))
        x = norm("layer_norm")(x + dropout(a))
        y = dropout(nn.gelu(dense(W2V_FFN, "intermediate_dense")(x), approximate=False))
        return norm("final_layer_norm")(x + dropout(dense(W2V_DIM, "output_dense")(y)))


class Wav2Vec2(nn.Module):
    alphabet: int
    dtype: Any

    @nn.compact
    def __call__(self, audio, train: bool):  # (batch, samples)
        dropout = nn.Dropout(W2V_DROPOUT, deterministic=not train)
        x = audio[..., None]
        for index, (kernel, stride) in enumerate(W2V_CONVS):
            x = nn.Conv(
                W2V_CONV_CHANNELS,
                (kernel,),
                strides=stride,
                padding="VALID",
                use_bias=False,
                dtype=self.dtype,
                name=f"feature_encoder.convs.{index}",
            )(x)
            if index == 0:
                x = nn.GroupNorm(W2V_CONV_CHANNELS, epsilon=W2V_EPS, dtype=self.dtype, name="feature_encoder.norm")(x)
            x = nn.gelu(x, approximate=False)
        x = nn.LayerNorm(epsilon=W2V_EPS, dtype=self.dtype, name="projection_norm")(x)
        x = dropout(nn.Dense(W2V_DIM, dtype=self.dtype, name="projection")(x))
        x = x + PositionalConv(self.dtype, name="pos_conv.conv")(x)
        x = dropout(nn.LayerNorm(epsilon=W2V_EPS, dtype=self.dtype, name="encoder_norm")(x))
        for index in range(W2V_LAYERS):
            x = EncoderLayer(self.dtype, name=f"layers.{index}")(x, train)
        return nn.Dense(self.alphabet, dtype=self.dtype, name="lm_head")(dropout(x))


def _wav2vec2_base(spec: ModelSpec, options: dict[str, str], dtype: Any) -> nn.Module:
    return Wav2Vec2(spec.head(options).outputs, dtype)


MODELS.register("wav2vec2_base")(FlaxModel(_wav2vec2_base))
