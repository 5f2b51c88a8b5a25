"""Random inputs, random targets and the loss, in JAX."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from fwbench_core.choices import InputKind, Objective
from fwbench_core.models import Head, ModelSpec


def jax_input_shape(spec: ModelSpec, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The user's per-sample shape in Flax's layout: images go channels last, the rest as given."""
    if spec.input_kind is InputKind.IMAGE:
        channels, *spatial = shape
        return (*spatial, channels)
    return tuple(shape)


def random_inputs(key: jax.Array, spec: ModelSpec, batch_size: int, input_shape: tuple[int, ...]) -> jax.Array:
    shape = (batch_size, *jax_input_shape(spec, input_shape))
    if spec.input_kind is InputKind.TOKENS:
        return jax.random.randint(key, shape, 0, spec.vocab_size)
    return jax.random.normal(key, shape, jnp.float32)


def ctc_label_length(frames: int) -> int:
    """Transcripts a quarter as long as the output, so CTC always has a valid alignment."""
    return max(1, frames // 4)


def random_targets(key: jax.Array, head: Head, output_shape: tuple[int, ...]) -> jax.Array:
    """Class ids, one per sample (CLASSIFY) or per position (TOKEN_CE); CTC: transcripts without the blank (0)."""
    if head.objective is Objective.CLASSIFY:
        return jax.random.randint(key, output_shape[:1], 0, head.outputs)
    if head.objective is Objective.TOKEN_CE:
        return jax.random.randint(key, output_shape[:2], 0, head.outputs)
    return jax.random.randint(key, (output_shape[0], ctc_label_length(output_shape[1])), 1, head.outputs)


def loss(head: Head, logits: jax.Array, targets: jax.Array) -> jax.Array:
    """In float32: mean cross-entropy over every sample (and position), or CTC as PyTorch's ctc_loss
    reduces it (each transcript's loss over its length, then the mean)."""
    logits = logits.astype(jnp.float32)
    if head.objective is not Objective.CTC:
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
    no_padding = jnp.zeros(logits.shape[:2])
    per_sample = optax.ctc_loss(logits, no_padding, targets, jnp.zeros(targets.shape), blank_id=0)
    return (per_sample / targets.shape[1]).mean()
