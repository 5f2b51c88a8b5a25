"""A TensorFlow run on one device: the Keras model, its optimizer, random inputs and tf.function steps."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from functools import partial

import keras
import numpy as np
import tensorflow as tf
from fwbench_keras.objectives import keras_input_shape

from fwbench_core.backend import MemoryReading, Workload, process_peak_memory
from fwbench_core.choices import Compilation, DeviceKind, Mode, Objective, Precision, Tf32
from fwbench_core.devices import Device
from fwbench_core.fairness import LEARNING_RATE, MOMENTUM
from fwbench_core.models import ModelConfig
from fwbench_core.runs import RunConfig

from .generation import CACHE_COPY_NOTE, Generation, decoder_for
from .models import MODELS
from .objectives import loss, random_inputs, random_targets


def tf_device_name(device: Device) -> str:
    return f"/GPU:{device.ref.index}" if device.ref.kind is DeviceKind.GPU else "/CPU:0"


def count_trainable(model: keras.Model) -> int:
    return int(sum(np.prod(v.shape) for v in model.trainable_weights))


def build_model(config: RunConfig | ModelConfig) -> keras.Model:
    shape = keras_input_shape(config.model, config.input_shape)
    return MODELS.builder(config.model).build(config.model, shape, config.model_options)


def built_optimizer(config: RunConfig, model: keras.Model) -> keras.optimizers.Optimizer:
    """The training optimizer, its variables built (under the caller's device or strategy scope)."""
    optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    if config.precision is Precision.AMP_FP16:
        # fp16 gradients underflow without loss scaling; bf16 needs none.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    return optimizer


MIXED_POLICIES = {Precision.AMP_FP16: "mixed_float16", Precision.AMP_BF16: "mixed_bfloat16"}


def reset_device_state(config: RunConfig, gpus: Sequence[str]) -> None:
    """TF32 as the run asks (TensorFlow enables it by default; strict fp32 must turn it off) and fresh peak-memory
    counters on the run's GPUs (TensorFlow's names, GPU:N): for every build, and every reuse of one."""
    tf.config.experimental.enable_tensor_float_32_execution(config.tf32 is Tf32.ON)
    for gpu in gpus:
        tf.config.experimental.reset_memory_stats(gpu)


def build_in(
    config: RunConfig, scope: AbstractContextManager, gpus: Sequence[str]
) -> tuple[keras.Model, keras.optimizers.Optimizer | None]:
    """The model and, for training, its optimizer, built under `scope` (a device's or a strategy's) from the seed,
    with the run's device state. Keras reads the precision policy when layers are made: it is set for the build only."""
    keras.utils.set_random_seed(config.seed)
    reset_device_state(config, gpus)
    keras.mixed_precision.set_global_policy(MIXED_POLICIES.get(config.precision, "float32"))
    try:
        with scope:
            model = build_model(config)
            optimizer = built_optimizer(config, model) if config.mode is Mode.TRAIN else None
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return model, optimizer


def gpu_peak_memory(gpus: Sequence[str]) -> MemoryReading:
    """The largest peak of the run's GPUs, since the build reset their counters."""
    source = "tf get_memory_info peak" + (" (the largest of this process's GPUs)" if len(gpus) > 1 else "")
    return MemoryReading(max(tf.config.experimental.get_memory_info(gpu)["peak"] for gpu in gpus), source)


def compiled(function, compilation: Compilation):
    if compilation is Compilation.EAGER:
        return function
    return tf.function(function, jit_compile=compilation is Compilation.XLA)


class TensorFlowWorkload(Workload):
    def __init__(self, config: RunConfig) -> None:
        self.device_name = tf_device_name(config.device)
        self.is_gpu = config.device.ref.kind is DeviceKind.GPU
        self.gpus = [self.device_name.lstrip("/")] if self.is_gpu else []
        self.head = config.head
        self.model, self.optimizer = build_in(config, tf.device(self.device_name), self.gpus)
        self.parameter_count = count_trainable(self.model)
        # A traced step function is specific to its input shape: graph and XLA trace (and compile) again in the
        # first step of every fresh build and of every reuse at a new batch size.
        self.first_step_traces = config.compilation is not Compilation.EAGER
        if config.mode is Mode.GENERATE and config.compilation is not Compilation.XLA:
            self.notes = (CACHE_COPY_NOTE,)
        self.initial_values = None
        if config.reuse_key:
            # What a reuse restores: every variable of the model (seed generators included) and of the optimizer.
            variables = [*self.model.variables, *(self.optimizer.variables if self.optimizer else ())]
            self.initial_values = [(variable, variable.numpy()) for variable in variables]
        self._start(config)

    def _start(self, config: RunConfig) -> None:
        """Inputs and targets for `config`'s batch size, and new step functions for them to trace. The inputs
        come from the input seed alone (TensorFlow's op seeds restart with it), so a reuse makes a fresh build's."""
        tf.random.set_seed(config.data_seed)
        with tf.device(self.device_name):
            self.inputs = random_inputs(config.model, config.batch_size, config.input_shape)
            if config.mode is Mode.TRAIN:
                self.targets = random_targets(self.head, self._output_shape())
        # New functions: a traced one holds the inputs it was traced with.
        self._train = compiled(self._train_graph, config.compilation)
        self._infer = compiled(self._infer_graph, config.compilation)
        self._last = None
        self.generation = None
        if config.mode is Mode.GENERATE:
            # The prompts are the inputs; the cache is sized for them and the new tokens, reused by every request.
            with tf.device(self.device_name):
                self.generation = Generation(
                    decoder_for(config.model, self.model),
                    self.inputs,
                    config.new_tokens,
                    partial(compiled, compilation=config.compilation),
                )

    def reuse(self, config: RunConfig) -> bool:
        if self.initial_values is None:
            return False
        # Freed before the new batch's are made.
        self.inputs = self.targets = self._train = self._infer = self.generation = None
        reset_device_state(config, self.gpus)
        for variable, value in self.initial_values:
            variable.assign(value)
        self._start(config)
        return True

    def _output_shape(self) -> tuple[int, ...]:
        return output_shape(self.head, self.model, self.inputs)

    def _train_graph(self):
        with tf.GradientTape() as tape:
            output = tf.cast(self.model(self.inputs, training=True), tf.float32)
            value = loss(self.head, output, self.targets)
            scaled = self.optimizer.scale_loss(value)
        variables = self.model.trainable_variables
        self.optimizer.apply(tape.gradient(scaled, variables), variables)
        return value

    def _infer_graph(self):
        return self.model(self.inputs, training=False)

    def train_step(self) -> None:
        with tf.device(self.device_name):
            self._last = self._train()

    def infer_step(self) -> None:
        with tf.device(self.device_name):
            self._last = self._infer()

    def prefill(self) -> None:
        with tf.device(self.device_name):
            self._last = self.generation.prefill()

    def decode_step(self) -> None:
        with tf.device(self.device_name):
            self._last = self.generation.decode_step()

    def generated_tokens(self) -> list[list[int]]:
        return self.generation.tokens().tolist()

    def synchronize(self) -> None:
        if self.is_gpu:
            tf.test.experimental.sync_devices()
        else:
            # A host tensor's numpy view needs no copy; reading it waits for the value.
            self._last.numpy()

    def peak_memory(self) -> MemoryReading:
        return gpu_peak_memory(self.gpus) if self.gpus else process_peak_memory()

    def close(self) -> None:
        self.__dict__.clear()


def output_shape(head, model: keras.Model, inputs: tf.Tensor) -> tuple[int, ...]:
    """Targets need the output's shape; only CTC's (frames) is not known without a forward pass."""
    batch = inputs.shape[0]
    if head.objective is Objective.CLASSIFY:
        return (batch,)
    if head.objective is Objective.TOKEN_CE:
        return (batch, inputs.shape[1])
    return tuple(model(inputs, training=False).shape)
