"""Random inputs, random targets and the loss for each kind of model, in TensorFlow."""

from __future__ import annotations

import keras
import tensorflow as tf
from fwbench_keras.objectives import ctc_label_length, keras_input_shape

from fwbench_core.choices import InputKind, Objective
from fwbench_core.models import Head, ModelSpec


def random_inputs(spec: ModelSpec, batch_size: int, input_shape: tuple[int, ...]) -> tf.Tensor:
    shape = (batch_size, *keras_input_shape(spec, input_shape))
    if spec.input_kind is InputKind.TOKENS:
        return tf.random.uniform(shape, 0, spec.vocab_size, dtype=tf.int32)
    return tf.random.normal(shape)


def random_targets(head: Head, output_shape: tuple[int, ...]) -> tf.Tensor:
    batch = output_shape[0]
    if head.objective is Objective.CLASSIFY:
        return tf.random.uniform((batch,), 0, head.outputs, dtype=tf.int32)
    if head.objective is Objective.TOKEN_CE:
        return tf.random.uniform(output_shape[:2], 0, head.outputs, dtype=tf.int32)
    # CTC: labels exclude the blank (index 0).
    return tf.random.uniform((batch, ctc_label_length(output_shape[1])), 1, head.outputs, dtype=tf.int32)


def loss(head: Head, output: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
    if head.objective is not Objective.CTC:
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(targets, output, from_logits=True))
    batch, frames = tf.shape(output)[0], tf.shape(output)[1]
    return tf.reduce_mean(
        tf.nn.ctc_loss(
            labels=targets,
            logits=output,
            label_length=tf.fill([batch], tf.shape(targets)[1]),
            logit_length=tf.fill([batch], frames),
            logits_time_major=False,
            blank_index=0,
        )
    )
