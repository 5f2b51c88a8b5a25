"""Random inputs and targets, and the loss, for each kind of model, on any Keras backend: the inputs drawn by NumPy
from the run's data seed, the losses Keras' own."""

from __future__ import annotations

import keras
import numpy as np

from fwbench_core.choices import InputKind, Objective
from fwbench_core.models import Head, ModelSpec


def keras_input_shape(spec: ModelSpec, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The user's per-sample shape in Keras' layout: images go channels last, the rest as given."""
    if spec.input_kind is InputKind.IMAGE:
        channels, *spatial = shape
        return (*spatial, channels)
    return tuple(shape)


def ctc_label_length(frames: int) -> int:
    """Transcripts a quarter as long as the output, so CTC always has a valid alignment."""
    return max(1, frames // 4)


def random_inputs(spec: ModelSpec, batch_size: int, input_shape: tuple[int, ...], rng: np.random.Generator):
    shape = (batch_size, *keras_input_shape(spec, input_shape))
    if spec.input_kind is InputKind.TOKENS:
        return rng.integers(0, spec.vocab_size, shape, dtype=np.int32)
    return rng.standard_normal(shape, dtype=np.float32)


def random_targets(head: Head, output_shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    batch = output_shape[0]
    if head.objective is Objective.CLASSIFY:
        return rng.integers(0, head.outputs, (batch,), dtype=np.int32)
    if head.objective is Objective.TOKEN_CE:
        return rng.integers(0, head.outputs, output_shape[:2], dtype=np.int32)
    # CTC: labels exclude the blank (index 0).
    return rng.integers(1, head.outputs, (batch, ctc_label_length(output_shape[1])), dtype=np.int32)


def loss(head: Head) -> keras.losses.Loss:
    """The native runners' losses, as Keras has them: cross-entropy from logits averaged over the batch (and its
    positions), or CTC from logits with the blank at 0 (keras.losses.CTC's), averaged over the batch."""
    if head.objective is Objective.CTC:
        return keras.losses.CTC()
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)
