"""ViT-B/16: torchvision's vit_b_16, layer for layer, with the same parameters (86,567,656 at 3x224x224).

torchvision's module is not used as it is, for two reasons. Its attention is nn.MultiheadAttention, whose
inference fast path (torch._native_multi_head_attention) runs the query, key and value projections, both
attention products and the output projection as one operator that FlopCounterMode does not see: it would count
22.5 of ViT-B/16's 35.1 GFLOPs, the MLPs and the patch embedding only. And its packed in_proj_weight has no
layer in Keras or Flax to load by name. Here the projections are nn.Linear and attention is
F.scaled_dot_product_attention, counted as the other runners count their einsums.

Position embeddings are one per patch and one for the class token, sized from the image the run asks for (as
torchvision's vit_b_16 fixes its image size when built): 197 at 224x224, 5 at 32x32. Sides must be multiples
of 16 (fwbench_core.architectures.vit_patch_grid). Weights start as torchvision's, except the classifier:
torchvision zeroes it (for fine-tuning a pretrained body), which would make every output zero and give the body
no gradient in the first step; here it starts as nn.Linear does. The TensorFlow and JAX runners
(fwbench_tensorflow.models.vit, fwbench_jax.models.vit) load this module's state_dict by these names.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fwbench_core.architectures import VIT_B16, VIT_EPS, VIT_POSITION_STD, vit_patch_grid
from fwbench_core.models import ModelSpec

from . import MODELS
from .text import attention


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out_proj = nn.Linear(hidden, hidden)
        # nn.MultiheadAttention's initialisation: Xavier over the packed projections, zero biases.
        nn.init.xavier_uniform_(self.qkv.weight)
        nn.init.zeros_(self.qkv.bias)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.out_proj(attention(q, k, v, self.heads, 0.0, causal=False))


class Mlp(nn.Module):
    def __init__(self, hidden: int, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, width)
        self.gelu = nn.GELU()  # exact (erf)
        self.fc2 = nn.Linear(width, hidden)
        for linear in (self.fc1, self.fc2):  # torchvision's MLPBlock initialisation
            nn.init.xavier_uniform_(linear.weight)
            nn.init.normal_(linear.bias, std=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.gelu(self.fc1(x)))


class EncoderBlock(nn.Module):
    """Pre-LayerNorm: x + attention(norm(x)), then x + MLP(norm(x))."""

    def __init__(self, hidden: int, heads: int, mlp: int, eps: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.self_attention = SelfAttention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.mlp = Mlp(hidden, mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    def __init__(self, tokens: int) -> None:
        super().__init__()
        c = VIT_B16
        self.pos_embedding = nn.Parameter(torch.empty(1, tokens, c["hidden"]).normal_(std=VIT_POSITION_STD))
        self.layers = nn.ModuleList(
            EncoderBlock(c["hidden"], c["heads"], c["mlp"], VIT_EPS) for _ in range(c["layers"])
        )
        self.ln = nn.LayerNorm(c["hidden"], eps=VIT_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.pos_embedding
        for layer in self.layers:
            x = layer(x)
        return self.ln(x)


class VisionTransformer(nn.Module):
    def __init__(self, channels: int, height: int, width: int, classes: int) -> None:
        super().__init__()
        c = VIT_B16
        rows, columns = vit_patch_grid(height, width)
        self.conv_proj = nn.Conv2d(channels, c["hidden"], kernel_size=c["patch"], stride=c["patch"])
        fan_in = channels * c["patch"] * c["patch"]
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1.0 / fan_in))
        nn.init.zeros_(self.conv_proj.bias)
        self.class_token = nn.Parameter(torch.zeros(1, 1, c["hidden"]))
        self.encoder = Encoder(rows * columns + 1)
        self.head = nn.Linear(c["hidden"], classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        patches = self.conv_proj(images).flatten(2).transpose(1, 2)  # (B, rows x columns, hidden), row by row
        tokens = torch.cat([self.class_token.expand(patches.shape[0], -1, -1), patches], dim=1)
        return self.head(self.encoder(tokens)[:, 0])


@MODELS.register("vit_b16")
def _vit_b16(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
    channels, height, width = input_shape
    return VisionTransformer(channels, height, width, spec.head(options).outputs)
