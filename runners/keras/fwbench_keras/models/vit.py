"""ViT-B/16, defined here to match the PyTorch runner's (fwbench_torch.models.vit, torchvision's vit_b_16 layer
for layer): a 16x16 stride-16 convolution cuts the image into patches, taken row by row as PyTorch flattens
them, a class token goes first, learned position embeddings are added, then 12 pre-LayerNorm encoder layers
(epsilon 1e-6, exact GELU, no dropout), a final LayerNorm and a classifier on the class token. Attention is
text.py's two einsums, counted as PyTorch counts scaled_dot_product_attention.

Position embeddings are one per patch and one for the class token, sized from the input shape the run asks
for; sides must be multiples of 16. Initial weights follow torchvision's where Keras has the same initializer
(the patch embedding normal over its fan-in, position embeddings normal 0.02, a zero class token, Glorot
uniform projections, which is Xavier); none are expected to equal PyTorch's draws. The loader copies the
PyTorch runner's state_dict.
"""

from __future__ import annotations

import math

import keras
from keras import layers, ops

from fwbench_core.architectures import VIT_B16, VIT_EPS, VIT_POSITION_STD, vit_patch_grid
from fwbench_core.models import ModelSpec

from .. import torch_weights
from . import MODELS, KerasModel, TorchWeights
from .text import DotProductAttention, FirstToken, SplitQkv, gelu_erf


class ClassTokenAndPositions(layers.Layer):
    """Puts the class token before the patches and adds the position embeddings: (B, P, D) -> (B, P + 1, D)."""

    def __init__(self, tokens: int, width: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tokens, self.width = tokens, width

    def build(self, input_shape) -> None:
        self.class_token = self.add_weight((1, 1, self.width), initializer="zeros", name="class_token")
        self.pos_embedding = self.add_weight(
            (1, self.tokens, self.width),
            initializer=keras.initializers.RandomNormal(stddev=VIT_POSITION_STD),
            name="pos_embedding",
        )

    def call(self, patches):
        class_tokens = ops.broadcast_to(self.class_token, (ops.shape(patches)[0], 1, self.width))
        return ops.concatenate([class_tokens, patches], axis=1) + self.pos_embedding

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.tokens, self.width)

    def get_config(self):
        return {**super().get_config(), "tokens": self.tokens, "width": self.width}


def _encoder_block(x, i: int):
    c = VIT_B16
    name = f"layers_{i}"
    h = layers.LayerNormalization(epsilon=VIT_EPS, name=f"{name}_ln_1")(x)
    q, k, v = SplitQkv(name=f"{name}_split")(layers.Dense(3 * c["hidden"], name=f"{name}_qkv")(h))
    a = DotProductAttention(c["heads"], 0.0, causal=False, name=f"{name}_attention")(q, k, v)
    x = layers.Add(name=f"{name}_attention_add")([x, layers.Dense(c["hidden"], name=f"{name}_out_proj")(a)])
    h = layers.LayerNormalization(epsilon=VIT_EPS, name=f"{name}_ln_2")(x)
    h = layers.Dense(c["mlp"], activation=gelu_erf, name=f"{name}_fc1")(h)
    return layers.Add(name=f"{name}_mlp_add")([x, layers.Dense(c["hidden"], name=f"{name}_fc2")(h)])


def _build_vit_b16(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> keras.Model:
    c = VIT_B16
    height, width, channels = input_shape
    rows, columns = vit_patch_grid(height, width)
    images = keras.Input(shape=input_shape)
    patches = layers.Conv2D(
        c["hidden"],
        c["patch"],
        strides=c["patch"],
        kernel_initializer=keras.initializers.RandomNormal(stddev=math.sqrt(1.0 / (channels * c["patch"] ** 2))),
        name="conv_proj",
    )(images)
    x = layers.Reshape((rows * columns, c["hidden"]), name="patches")(patches)  # row by row, as PyTorch's flatten
    x = ClassTokenAndPositions(rows * columns + 1, c["hidden"], name="tokens")(x)
    for i in range(c["layers"]):
        x = _encoder_block(x, i)
    x = layers.LayerNormalization(epsilon=VIT_EPS, name="encoder_ln")(x)
    outputs = layers.Dense(spec.head(options).outputs, name="head")(FirstToken(name="class_token")(x))
    return keras.Model(images, outputs, name="vit_b16")


def _load_vit_b16(model: keras.Model, weights: TorchWeights) -> None:
    torch_weights.conv(model.get_layer("conv_proj"), weights, "conv_proj")
    model.get_layer("tokens").set_weights([weights["class_token"], weights["encoder.pos_embedding"]])
    for i in range(VIT_B16["layers"]):
        name, prefix = f"layers_{i}", f"encoder.layers.{i}"
        for part in ("ln_1", "ln_2"):
            torch_weights.layer_norm(model.get_layer(f"{name}_{part}"), weights, f"{prefix}.{part}")
        for part, torch_part in (("qkv", "self_attention.qkv"), ("out_proj", "self_attention.out_proj")):
            torch_weights.dense(model.get_layer(f"{name}_{part}"), weights, f"{prefix}.{torch_part}")
        for part in ("fc1", "fc2"):
            torch_weights.dense(model.get_layer(f"{name}_{part}"), weights, f"{prefix}.mlp.{part}")
    torch_weights.layer_norm(model.get_layer("encoder_ln"), weights, "encoder.ln")
    torch_weights.dense(model.get_layer("head"), weights, "head")


MODELS.register("vit_b16")(KerasModel(_build_vit_b16, _load_vit_b16))
