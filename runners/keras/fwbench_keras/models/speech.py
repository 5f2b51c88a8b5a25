"""Speech models, matching the PyTorch runner's (see fwbench_torch/models/speech.py for the networks).

Both return CTC logits (batch, frames, alphabet) with the blank at index 0, and
have the same parameters, the same FLOPs and, with the loaders below, the same
outputs as the PyTorch definitions. Layout differences only:

deepspeech2: the input (batch, F, T) becomes a channels-last image (batch, F, T, 1);
  explicit symmetric zero padding then "valid" convolutions (as PyTorch's padding);
  Hardtanh(0, 20) is ReLU(max_value=20); the image (batch, F', T', C) is flattened per
  frame channel major (c * F' + f), as PyTorch's; each recurrent layer is a
  Bidirectional(GRU(512, reset_after=True)) with the directions concatenated: reset_after
  is PyTorch's (and cuDNN's) GRU, with an input and a recurrent bias, so the parameter
  count is the same; Keras orders the gates z, r, h where PyTorch orders r, z, n.
wav2vec2_base: the weight-normed, grouped positional convolution is a layer of its own
  (WeightNormGroupedConv1D) that, on the TensorFlow backend, calls tf.nn.conv1d directly:
  Keras' Conv1D(groups=16) there compiles every grouped convolution with XLA, which on
  the CPU is about 50x slower than TensorFlow's own grouped Conv2D kernel (CPU and GPU
  both have one); on another Keras backend it is Keras' own convolution. Attention is written out with einsum so that its two batched products are
  counted and dropout falls on the attention probabilities, as in PyTorch's
  scaled_dot_product_attention.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

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

from .. import torch_weights
from . import MODELS, TORCH_BN, KerasModel, TorchWeights

# --- deepspeech2 -------------------------------------------------------------------------------


def _deepspeech2(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    freq_bins, steps = input_shape
    inputs = keras.Input(shape=(freq_bins, steps))
    x = layers.Reshape((freq_bins, steps, 1), name="image")(inputs)
    for index, (filters, kernel, stride, padding) in enumerate(DS2_CONVS):
        x = layers.ZeroPadding2D(padding, name=f"conv{index}_pad")(x)
        x = layers.Conv2D(filters, kernel, strides=stride, use_bias=False, name=f"conv{index}")(x)
        x = layers.BatchNormalization(**TORCH_BN, name=f"conv{index}_bn")(x)
        x = layers.ReLU(max_value=20.0, name=f"conv{index}_hardtanh")(x)
    _, freq, frames, channels = x.shape
    x = layers.Permute((2, 3, 1), name="frames_first")(x)  # (batch, T', C, F')
    x = layers.Reshape((frames, channels * freq), name="features")(x)
    for index in range(DS2_RNN_LAYERS):
        gru = layers.GRU(DS2_HIDDEN, return_sequences=True, reset_after=True, name=f"gru{index}")
        x = layers.Bidirectional(gru, merge_mode="concat", name=f"rnn{index}")(x)
    outputs = layers.Dense(spec.head(options).outputs, name="fc")(x)
    return keras.Model(inputs, outputs, name="deepspeech2")


def _gru_gates(array: np.ndarray) -> np.ndarray:
    """PyTorch's gate blocks r, z, n (along the first axis) in Keras' order z, r, h."""
    r, z, n = np.split(array, 3, axis=0)
    return np.concatenate([z, r, n], axis=0)


def _load_gru(layer: layers.GRU, weights: TorchWeights, suffix: str) -> None:
    layer.set_weights(
        [
            _gru_gates(weights[f"rnn.weight_ih_{suffix}"]).T,
            _gru_gates(weights[f"rnn.weight_hh_{suffix}"]).T,
            np.stack([_gru_gates(weights[f"rnn.bias_ih_{suffix}"]), _gru_gates(weights[f"rnn.bias_hh_{suffix}"])]),
        ]
    )


def _load_deepspeech2(model: keras.Model, weights: TorchWeights) -> None:
    for index in range(len(DS2_CONVS)):
        torch_weights.conv(model.get_layer(f"conv{index}"), weights, f"conv.{3 * index}")
        torch_weights.batch_norm(model.get_layer(f"conv{index}_bn"), weights, f"conv.{3 * index + 1}")
    for index in range(DS2_RNN_LAYERS):
        rnn = model.get_layer(f"rnn{index}")
        _load_gru(rnn.forward_layer, weights, f"l{index}")
        _load_gru(rnn.backward_layer, weights, f"l{index}_reverse")
    torch_weights.dense(model.get_layer("fc"), weights, "fc")


MODELS.register("deepspeech2")(KerasModel(_deepspeech2, _load_deepspeech2))

# --- wav2vec2_base -------------------------------------------------------------------------------


def gelu(x):
    return ops.gelu(x, approximate=False)  # exact (erf), as PyTorch's default


class WeightNormGroupedConv1D(layers.Layer):
    """Conv1D, "same"-size padding of kernel // 2, grouped, with weight norm over the kernel axis.

    kernel = g * v / ||v||, the norm over input and output channels for each kernel
    position: PyTorch's weight_norm(conv, dim=2) in Keras' (k, in / groups, out) layout.
    """

    def __init__(self, filters: int, kernel_size: int, groups: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.filters, self.kernel_size, self.groups = filters, kernel_size, groups

    def build(self, input_shape) -> None:
        channels = input_shape[-1]
        self.v = self.add_weight(
            name="v", shape=(self.kernel_size, channels // self.groups, self.filters), initializer="glorot_uniform"
        )
        self.g = self.add_weight(name="g", shape=(self.kernel_size, 1, 1), initializer="ones")
        self.bias = self.add_weight(name="bias", shape=(self.filters,), initializer="zeros")

    def call(self, x):
        v = ops.convert_to_tensor(self.v)
        kernel = self.g * v / ops.sqrt(ops.sum(ops.square(v), axis=(1, 2), keepdims=True))
        pad = self.kernel_size // 2
        x = ops.pad(x, [[0, 0], [pad, pad], [0, 0]])
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf  # only this backend's kernel: the layer is backend-neutral otherwise

            # An Add, not a BiasAdd: grappler fuses Conv2D + BiasAdd into one op that, on some CPUs (oneDNN),
            # refuses grouped convolutions ("Fused conv implementation does not support grouped convolutions").
            return tf.nn.conv1d(x, kernel, stride=1, padding="VALID") + self.bias
        # Elsewhere Keras' own convolution, grouped by the kernel's input channels (channels / groups).
        return ops.conv(x, kernel, strides=1, padding="valid") + self.bias

    def compute_output_shape(self, input_shape):
        steps = input_shape[1]
        steps = None if steps is None else steps + 2 * (self.kernel_size // 2) - self.kernel_size + 1
        return (input_shape[0], steps, self.filters)

    def get_config(self) -> dict:
        return {**super().get_config(), "filters": self.filters, "kernel_size": self.kernel_size, "groups": self.groups}


def _attention(x, name: str):
    frames = x.shape[1]
    head_dim = W2V_DIM // W2V_HEADS

    def heads(kind: str):
        y = layers.Dense(W2V_DIM, name=f"{name}_{kind}_proj")(x)
        return layers.Reshape((frames, W2V_HEADS, head_dim), name=f"{name}_{kind}_heads")(y)

    q, k, v = heads("q"), heads("k"), heads("v")
    scores = ops.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / head_dim**0.5)
    probs = layers.Dropout(W2V_DROPOUT, name=f"{name}_dropout")(layers.Softmax(axis=-1, name=f"{name}_softmax")(scores))
    y = ops.einsum("bhqk,bkhd->bqhd", probs, v)
    y = layers.Reshape((frames, W2V_DIM), name=f"{name}_merge")(y)
    return layers.Dense(W2V_DIM, name=f"{name}_out_proj")(y)


def _encoder_layer(x, name: str):
    """Post-LN, as wav2vec2-base: x = LN(x + attention(x)); x = LN(x + FFN(x))."""
    y = layers.Dropout(W2V_DROPOUT, name=f"{name}_attention_out_dropout")(_attention(x, f"{name}_attention"))
    x = layers.LayerNormalization(epsilon=W2V_EPS, name=f"{name}_layer_norm")(x + y)
    y = layers.Dense(W2V_FFN, activation=gelu, name=f"{name}_intermediate_dense")(x)
    y = layers.Dropout(W2V_DROPOUT, name=f"{name}_activation_dropout")(y)
    y = layers.Dense(W2V_DIM, name=f"{name}_output_dense")(y)
    y = layers.Dropout(W2V_DROPOUT, name=f"{name}_output_dropout")(y)
    return layers.LayerNormalization(epsilon=W2V_EPS, name=f"{name}_final_layer_norm")(x + y)


def _wav2vec2_base(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    (samples,) = input_shape
    inputs = keras.Input(shape=(samples,))
    x = layers.Reshape((samples, 1), name="waveform")(inputs)
    for index, (kernel, stride) in enumerate(W2V_CONVS):
        x = layers.Conv1D(W2V_CONV_CHANNELS, kernel, strides=stride, use_bias=False, name=f"feature_conv{index}")(x)
        if index == 0:
            x = layers.GroupNormalization(W2V_CONV_CHANNELS, epsilon=W2V_EPS, name="feature_norm")(x)
        x = layers.Activation(gelu, name=f"feature_gelu{index}")(x)
    x = layers.LayerNormalization(epsilon=W2V_EPS, name="projection_norm")(x)
    x = layers.Dense(W2V_DIM, name="projection")(x)
    x = layers.Dropout(W2V_DROPOUT, name="projection_dropout")(x)
    pos = WeightNormGroupedConv1D(W2V_DIM, W2V_POS_KERNEL, W2V_POS_GROUPS, name="pos_conv")(x)
    pos = layers.Cropping1D((0, 1), name="pos_conv_crop")(pos)  # an even kernel makes one frame too many
    pos = layers.Activation(gelu, name="pos_conv_gelu")(pos)
    x = layers.LayerNormalization(epsilon=W2V_EPS, name="encoder_norm")(x + pos)
    x = layers.Dropout(W2V_DROPOUT, name="encoder_dropout")(x)
    for index in range(W2V_LAYERS):
        x = _encoder_layer(x, f"layer{index}")
    x = layers.Dropout(W2V_DROPOUT, name="head_dropout")(x)
    outputs = layers.Dense(spec.head(options).outputs, name="lm_head")(x)
    return keras.Model(inputs, outputs, name="wav2vec2_base")


def _load_wav2vec2_base(model: keras.Model, weights: TorchWeights) -> None:
    for index in range(len(W2V_CONVS)):
        torch_weights.conv(model.get_layer(f"feature_conv{index}"), weights, f"feature_encoder.convs.{index}")
    torch_weights.layer_norm(model.get_layer("feature_norm"), weights, "feature_encoder.norm")
    torch_weights.layer_norm(model.get_layer("projection_norm"), weights, "projection_norm")
    torch_weights.dense(model.get_layer("projection"), weights, "projection")
    prefix = "pos_conv.conv.parametrizations.weight"
    model.get_layer("pos_conv").set_weights(
        [
            weights[f"{prefix}.original1"].transpose(2, 1, 0),  # v: (out, in / groups, k) -> (k, in / groups, out)
            weights[f"{prefix}.original0"].transpose(2, 1, 0),  # g: (1, 1, k) -> (k, 1, 1)
            weights["pos_conv.conv.bias"],
        ]
    )
    torch_weights.layer_norm(model.get_layer("encoder_norm"), weights, "encoder_norm")
    for index in range(W2V_LAYERS):
        name, prefix = f"layer{index}", f"layers.{index}"
        for kind in ("q", "k", "v", "out"):
            torch_weights.dense(
                model.get_layer(f"{name}_attention_{kind}_proj"), weights, f"{prefix}.attention.{kind}_proj"
            )
        for part in ("layer_norm", "final_layer_norm"):
            torch_weights.layer_norm(model.get_layer(f"{name}_{part}"), weights, f"{prefix}.{part}")
        for part in ("intermediate_dense", "output_dense"):
            torch_weights.dense(model.get_layer(f"{name}_{part}"), weights, f"{prefix}.{part}")
    torch_weights.dense(model.get_layer("lm_head"), weights, "lm_head")


MODELS.register("wav2vec2_base")(KerasModel(_wav2vec2_base, _load_wav2vec2_base))
