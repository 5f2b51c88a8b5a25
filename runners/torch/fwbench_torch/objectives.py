"""Random inputs, random targets and the loss for each kind of model, in PyTorch."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fwbench_core.choices import InputKind, Objective
from fwbench_core.models import Head, ModelSpec


def random_inputs(spec: ModelSpec, batch_size: int, input_shape: tuple[int, ...], device) -> torch.Tensor:
    shape = (batch_size, *input_shape)
    if spec.input_kind is InputKind.TOKENS:
        return torch.randint(0, spec.vocab_size, shape, device=device)
    return torch.randn(shape, device=device)


def ctc_label_length(frames: int) -> int:
    """Transcripts a quarter as long as the output, so CTC always has a valid alignment."""
    return max(1, frames // 4)


def random_targets(head: Head, output: torch.Tensor) -> torch.Tensor:
    batch = output.shape[0]
    if head.objective is Objective.CLASSIFY:
        return torch.randint(0, head.outputs, (batch,), device=output.device)
    if head.objective is Objective.TOKEN_CE:
        return torch.randint(0, head.outputs, output.shape[:2], device=output.device)
    # CTC: labels exclude the blank (index 0).
    return torch.randint(1, head.outputs, (batch, ctc_label_length(output.shape[1])), device=output.device)


def loss(head: Head, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    if head.objective is Objective.CLASSIFY:
        return F.cross_entropy(output, targets)
    if head.objective is Objective.TOKEN_CE:
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))
    batch, frames, _ = output.shape
    log_probs = output.log_softmax(-1).transpose(0, 1)  # (frames, batch, alphabet), as ctc_loss wants
    input_lengths = torch.full((batch,), frames, dtype=torch.long, device=output.device)
    target_lengths = torch.full((batch,), targets.shape[1], dtype=torch.long, device=output.device)
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0)
