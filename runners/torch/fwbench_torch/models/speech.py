"""Speech models: defined here, once; the TensorFlow runner defines the same networks.

Both take random inputs (no feature extraction) and return CTC logits
(batch, frames, alphabet) with the blank at index 0.

deepspeech2 (after Amodei et al. 2016 and deepspeech.pytorch), input (batch, F=161, T):
  the spectrogram as a 1-channel image (batch, 1, F, T);
  Conv2d(1->32, kernel (41, 11), stride (2, 2), padding (20, 5)) + BatchNorm + Hardtanh(0, 20);
  Conv2d(32->32, kernel (21, 11), stride (2, 1), padding (10, 5)) + BatchNorm + Hardtanh(0, 20);
  channels x frequency flattened into one feature vector per frame (channel major: c * F' + f);
  3 bidirectional GRU layers, 512 hidden per direction, the two directions concatenated (1024);
  Linear(1024 -> alphabet). Frames = ceil(T / 2).
  The convolutions have no bias (BatchNorm follows; deepspeech.pytorch keeps a redundant one).
  No BatchNorm between the recurrent layers.

wav2vec2_base (the architecture of facebook/wav2vec2-base with a CTC head), input (batch, samples):
  feature encoder: 7 Conv1d of 512 channels, kernels (10, 3, 3, 3, 3, 2, 2), strides (5, 2, 2, 2, 2, 2, 2),
  no bias, GroupNorm(512 groups) after the first only, exact (erf) GELU after each: 320x downsampling;
  feature projection: LayerNorm(512) + Linear(512 -> 768) + dropout;
  positional embedding: weight-normed Conv1d(768 -> 768, kernel 128, padding 64, groups 16) (weight
  norm over the kernel dimension, dim=2, as wav2vec2), its last frame dropped, GELU, added to the features;
  LayerNorm(768) + dropout; 12 post-LN transformer layers (768, 12 heads, FFN 3072, GELU);
  dropout + Linear(768 -> alphabet).
  Dropout 0.1 everywhere wav2vec2-base-960h has it (feature projection, encoder input, attention
  probabilities, attention output, FFN activation and output, before the head). Not included:
  LayerDrop, SpecAugment masking (and its learned mask embedding), the quantizer.
  Frames: 400 samples (25 ms) give one, 16000 give 49.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

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

from . import MODELS

# --- deepspeech2 -------------------------------------------------------------------------------


def conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


class DeepSpeech2(nn.Module):
    def __init__(self, freq_bins: int, alphabet: int) -> None:
        super().__init__()
        convs: list[nn.Module] = []
        channels, freq = 1, freq_bins
        for out, kernel, stride, padding in DS2_CONVS:
            convs += [
                nn.Conv2d(channels, out, kernel, stride, padding, bias=False),
                nn.BatchNorm2d(out),
                nn.Hardtanh(0, 20),
            ]
            channels, freq = out, conv_out(freq, kernel[0], stride[0], padding[0])
        self.conv = nn.Sequential(*convs)
        self.rnn = nn.GRU(channels * freq, DS2_HIDDEN, num_layers=DS2_RNN_LAYERS, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(2 * DS2_HIDDEN, alphabet)

    def forward(self, spectrogram: torch.Tensor) -> torch.Tensor:  # (batch, F, T)
        x = self.conv(spectrogram.unsqueeze(1))  # (batch, C, F', T')
        batch, channels, freq, frames = x.shape
        x = x.reshape(batch, channels * freq, frames).transpose(1, 2)  # (batch, T', C * F')
        x, _ = self.rnn(x)
        return self.fc(x)


@MODELS.register("deepspeech2")
def build_deepspeech2(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
    return DeepSpeech2(input_shape[0], spec.head(options).outputs)


# --- wav2vec2_base -------------------------------------------------------------------------------


class FeatureEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList()
        channels = 1
        for kernel, stride in W2V_CONVS:
            self.convs.append(nn.Conv1d(channels, W2V_CONV_CHANNELS, kernel, stride, bias=False))
            channels = W2V_CONV_CHANNELS
        self.norm = nn.GroupNorm(W2V_CONV_CHANNELS, W2V_CONV_CHANNELS, eps=W2V_EPS)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:  # (batch, samples) -> (batch, frames, 512)
        x = audio.unsqueeze(1)
        for index, conv in enumerate(self.convs):
            x = conv(x)
            if index == 0:
                x = self.norm(x)
            x = F.gelu(x)
        return x.transpose(1, 2)


class PositionalConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        conv = nn.Conv1d(W2V_DIM, W2V_DIM, W2V_POS_KERNEL, padding=W2V_POS_KERNEL // 2, groups=W2V_POS_GROUPS)
        self.conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, frames, 768)
        y = self.conv(x.transpose(1, 2))[:, :, :-1]  # an even kernel makes one frame too many
        return F.gelu(y).transpose(1, 2)


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(W2V_DIM, W2V_DIM)
        self.k_proj = nn.Linear(W2V_DIM, W2V_DIM)
        self.v_proj = nn.Linear(W2V_DIM, W2V_DIM)
        self.out_proj = nn.Linear(W2V_DIM, W2V_DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, frames, _ = x.shape

        def heads(projection: nn.Linear) -> torch.Tensor:
            return projection(x).view(batch, frames, W2V_HEADS, -1).transpose(1, 2)

        y = F.scaled_dot_product_attention(
            heads(self.q_proj),
            heads(self.k_proj),
            heads(self.v_proj),
            dropout_p=W2V_DROPOUT if self.training else 0.0,
        )
        return self.out_proj(y.transpose(1, 2).reshape(batch, frames, W2V_DIM))


class EncoderLayer(nn.Module):
    """Post-LN, as wav2vec2-base: x = LN(x + attention(x)); x = LN(x + FFN(x))."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = SelfAttention()
        self.layer_norm = nn.LayerNorm(W2V_DIM, eps=W2V_EPS)
        self.intermediate_dense = nn.Linear(W2V_DIM, W2V_FFN)
        self.output_dense = nn.Linear(W2V_FFN, W2V_DIM)
        self.final_layer_norm = nn.LayerNorm(W2V_DIM, eps=W2V_EPS)
        self.dropout = nn.Dropout(W2V_DROPOUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer_norm(x + self.dropout(self.attention(x)))
        y = self.dropout(F.gelu(self.intermediate_dense(x)))
        return self.final_layer_norm(x + self.dropout(self.output_dense(y)))


class Wav2Vec2(nn.Module):
    def __init__(self, alphabet: int) -> None:
        super().__init__()
        self.feature_encoder = FeatureEncoder()
        self.projection_norm = nn.LayerNorm(W2V_CONV_CHANNELS, eps=W2V_EPS)
        self.projection = nn.Linear(W2V_CONV_CHANNELS, W2V_DIM)
        self.pos_conv = PositionalConv()
        self.encoder_norm = nn.LayerNorm(W2V_DIM, eps=W2V_EPS)
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(W2V_LAYERS))
        self.dropout = nn.Dropout(W2V_DROPOUT)
        self.lm_head = nn.Linear(W2V_DIM, alphabet)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:  # (batch, samples)
        x = self.dropout(self.projection(self.projection_norm(self.feature_encoder(audio))))
        x = self.dropout(self.encoder_norm(x + self.pos_conv(x)))
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.dropout(x))


def wav2vec2_frames(samples: int) -> int:
    for kernel, stride in W2V_CONVS:
        samples = conv_out(samples, kernel, stride, 0)
    return samples


@MODELS.register("wav2vec2_base")
def build_wav2vec2_base(spec: ModelSpec, input_shape: tuple[int, ...], options: dict[str, str]) -> nn.Module:
    return Wav2Vec2(spec.head(options).outputs)
