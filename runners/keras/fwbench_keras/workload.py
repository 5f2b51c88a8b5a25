"""A run of a Keras runner on one device: the model from its Keras definition, compiled by Keras with the native
runners' optimizer and loss, stepped by Keras' own compiled functions (train_on_batch, predict_on_batch) as a Keras
user's fit and predict step them: Keras' way of running a model on the backend is what these runners measure."""

from __future__ import annotations

import keras
import numpy as np

from fwbench_core.backend import MemoryReading, Workload, process_peak_memory
from fwbench_core.choices import Compilation, DeviceKind, Mode, Objective, Precision
from fwbench_core.fairness import LEARNING_RATE, MOMENTUM
from fwbench_core.models import ModelConfig
from fwbench_core.runs import RunConfig

from . import native
from .models import MODELS
from .objectives import keras_input_shape, loss, random_inputs, random_targets

# Each compilation as Model.compile's arguments: eager (every op dispatched as it comes), the framework's graph
# without XLA (TensorFlow's tf.function), XLA (jit_compile: tf.function(jit_compile=True), jax.jit), torch.compile
# (the PyTorch backend's jit_compile).
COMPILE_ARGUMENTS = {
    Compilation.EAGER: dict(run_eagerly=True, jit_compile=False),
    Compilation.GRAPH: dict(run_eagerly=False, jit_compile=False),
    Compilation.XLA: dict(run_eagerly=False, jit_compile=True),
    Compilation.TORCH_COMPILE: dict(run_eagerly=False, jit_compile=True),
}
# What each backend compiles a step into: on JAX a step without jit_compile is eager too, so JAX has no graph.
COMPILATIONS = {
    "tensorflow": frozenset({Compilation.EAGER, Compilation.GRAPH, Compilation.XLA}),
    "jax": frozenset({Compilation.EAGER, Compilation.XLA}),
    "torch": frozenset({Compilation.EAGER, Compilation.TORCH_COMPILE}),
}
MIXED_POLICIES = {Precision.AMP_FP16: "mixed_float16", Precision.AMP_BF16: "mixed_bfloat16"}


def count_trainable(model: keras.Model) -> int:
    return int(sum(np.prod(v.shape) for v in model.trainable_weights))


def build_model(config: RunConfig | ModelConfig) -> keras.Model:
    shape = keras_input_shape(config.model, config.input_shape)
    return MODELS.builder(config.model).build(config.model, shape, config.model_options)


def keras_device(config: RunConfig) -> str:
    """The run's device as keras.device names it: "cpu", not "cpu:0" (Keras 3.15 on PyTorch moves variables made
    under "cpu:0", which then get no gradients)."""
    ref = config.device.ref
    return f"gpu:{ref.index}" if ref.kind is DeviceKind.GPU else "cpu"


def optimizer(precision: Precision) -> keras.optimizers.Optimizer:
    chosen = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    # fp16 gradients underflow without loss scaling; bf16 needs none.
    return keras.optimizers.LossScaleOptimizer(chosen) if precision is Precision.AMP_FP16 else chosen


class KerasWorkload(Workload):
    # What Keras' steps do that the native runners' do not (the run's flags show it).
    notes = ("Keras' train_on_batch and predict_on_batch: each step returns its loss or outputs to the host",)

    def __init__(self, config: RunConfig, backend: str) -> None:
        self.backend = backend
        self.device = keras_device(config)
        self.gpu_index = config.device.ref.index if config.device.ref.kind is DeviceKind.GPU else None
        # Traced and compiled for its input shape in the first step, except eager.
        self.first_step_traces = config.compilation is not Compilation.EAGER
        keras.utils.set_random_seed(config.seed)
        self._reset_device_state(config)
        # Keras reads the precision policy when layers are made: set for the build only.
        keras.mixed_precision.set_global_policy(MIXED_POLICIES.get(config.precision, "float32"))
        try:
            with keras.device(self.device):
                self.model = build_model(config)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        self.parameter_count = count_trainable(self.model)
        arguments = COMPILE_ARGUMENTS[config.compilation]
        with keras.device(self.device):
            if config.mode is Mode.TRAIN:
                self.model.compile(optimizer=optimizer(config.precision), loss=loss(config.head), **arguments)
                # Its variables now, not at the first step: a reuse restores them.
                self.model.optimizer.build(self.model.trainable_variables)
            else:
                self.model.compile(**arguments)
        self.initial_values = None
        if config.reuse_key:
            # What a reuse restores: every variable of the model (seed generators included) and of the optimizer.
            optimizer_variables = self.model.optimizer.variables if config.mode is Mode.TRAIN else []
            self.initial_values = [
                (variable, keras.ops.convert_to_numpy(variable.value))
                for variable in (*self.model.variables, *optimizer_variables)
            ]
        self._start(config)

    def _reset_device_state(self, config: RunConfig) -> None:
        """TF32 as the run asks and a fresh GPU peak-memory counter: for every build, and every reuse of one."""
        native.set_tf32(self.backend, config.tf32)
        if self.gpu_index is not None:
            native.reset_gpu_peak(self.backend, self.gpu_index)

    def _start(self, config: RunConfig) -> None:
        """Inputs and targets for `config`'s batch size, from the data seed alone, on the run's device: a reuse
        makes a fresh build's. Keras' step functions trace (and compile) again for a new batch size."""
        rng = np.random.default_rng(config.data_seed)
        with keras.device(self.device):
            self.inputs = keras.ops.convert_to_tensor(
                random_inputs(config.model, config.batch_size, config.input_shape, rng)
            )
            if config.mode is Mode.TRAIN:
                self.targets = keras.ops.convert_to_tensor(random_targets(config.head, self._output_shape(config), rng))

    def reuse(self, config: RunConfig) -> bool:
        if self.initial_values is None:
            return False
        self.inputs = self.targets = None  # freed before the new batch's are made
        self._reset_device_state(config)
        for variable, value in self.initial_values:
            variable.assign(value)
        self._start(config)
        return True

    def _output_shape(self, config: RunConfig) -> tuple[int, ...]:
        """Targets need the output's shape; only CTC's (frames) is not known without a forward pass."""
        batch = config.batch_size
        if config.head.objective is Objective.CLASSIFY:
            return (batch,)
        if config.head.objective is Objective.TOKEN_CE:
            return (batch, self.inputs.shape[1])
        return tuple(self.model(self.inputs, training=False).shape)

    def train_step(self) -> None:
        # Returns the loss as a host value: the step has ended on the device when it returns.
        with keras.device(self.device):
            self.model.train_on_batch(self.inputs, self.targets)

    def infer_step(self) -> None:
        # Returns the outputs as host arrays, as predict does: the step has ended when it returns.
        with keras.device(self.device):
            self.model.predict_on_batch(self.inputs)

    def synchronize(self) -> None:
        """Nothing is left running: Keras' steps return host values."""

    def peak_memory(self) -> MemoryReading:
        if self.gpu_index is None:
            return process_peak_memory()
        return native.gpu_peak(self.backend, self.gpu_index)

    def close(self) -> None:
        self.__dict__.clear()
