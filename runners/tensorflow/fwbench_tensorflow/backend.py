"""The TensorFlow side of a run: Keras model, optimizer, random inputs, tf.function steps."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import keras
import numpy as np
import tensorflow as tf
from fwbench_core.backend import Backend, MemoryReading, Workload
from fwbench_core.errors import FailedPrecondition, InvalidArgument
from fwbench_core.fairness import LEARNING_RATE, MOMENTUM, REFERENCE_TOLERANCE
from fwbench_core.references import compared_outputs
from fwbench_core.onnx_runtime import onnxruntime_limits
from fwbench_core.choices import (
    Compilation, DeviceKind, InputKind, Layout, Mode, Objective, Precision, Strategy, Switch, Tf32,
)
from fwbench_core.spec import (
    Capabilities, Device, DeviceRef, ModelConfig, ModelReport, ReferenceReport, RunConfig, RunnerInfo, RunnerSettings,
)
from fwbench_core.sysinfo import cpu_device, gpu_driver_version, process_peak_rss_bytes, python_version

from .flops import FLOPS_METHOD, forward_flops
from .models import MODELS
from .objectives import keras_input_shape, loss, random_inputs, random_targets
from .onnx_runtime import onnxruntime_workload
from .strategies import STRATEGIES, configure_worker, make_strategy, peer_error


def allow_memory_growth() -> None:
    """Let TensorFlow take GPU memory as it needs it instead of nearly all of every GPU at its first GPU
    op, so that the other runner on a shared GPU finds its memory. Only possible before TensorFlow first
    touches a GPU; TF_FORCE_GPU_ALLOW_GROWTH in the image is the second guard."""
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)


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


def compiled(function, compilation: Compilation):
    if compilation is Compilation.EAGER:
        return function
    return tf.function(function, jit_compile=compilation is Compilation.XLA)


class TensorFlowWorkload(Workload):
    def __init__(self, config: RunConfig) -> None:
        self.device_name = tf_device_name(config.device)
        self.is_gpu = config.device.ref.kind is DeviceKind.GPU
        self.head = config.head
        keras.utils.set_random_seed(config.seed)
        # TensorFlow enables TF32 by default; strict fp32 must turn it off.
        tf.config.experimental.enable_tensor_float_32_execution(config.tf32 is Tf32.ON)
        if self.is_gpu:
            tf.config.experimental.reset_memory_stats(f"GPU:{config.device.ref.index}")
        # Keras reads the precision policy when layers are made, so it is set for the build only.
        keras.mixed_precision.set_global_policy(MIXED_POLICIES.get(config.precision, "float32"))
        self.optimizer = None
        try:
            with tf.device(self.device_name):
                self.model = build_model(config)
                if config.mode is Mode.TRAIN:
                    self.optimizer = built_optimizer(config, self.model)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        self.parameter_count = count_trainable(self.model)
        # A traced step function is specific to its input shape: graph and XLA trace (and compile) again in the
        # first step of every fresh build and of every reuse at a new batch size.
        self.first_step_traces = config.compilation is not Compilation.EAGER
        self.initial_values = None
        if config.reuse_key:
            # What a reuse restores: every variable of the model (seed generators included) and of the optimizer.
            variables = [*self.model.variables, *(self.optimizer.variables if self.optimizer else ())]
            self.initial_values = [(variable, variable.numpy()) for variable in variables]
        self._start(config)

    def _start(self, config: RunConfig) -> None:
        """Inputs and targets for `config`'s batch size, and new step functions for them to trace. The inputs
        come from the seed alone (TensorFlow's op seeds restart with it), so a reuse makes a fresh build's."""
        tf.random.set_seed(config.seed)
        with tf.device(self.device_name):
            self.inputs = random_inputs(config.model, config.batch_size, config.input_shape)
            if config.mode is Mode.TRAIN:
                self.targets = random_targets(self.head, self._output_shape())
        # New functions: a traced one holds the inputs it was traced with.
        self._train = compiled(self._train_graph, config.compilation)
        self._infer = compiled(self._infer_graph, config.compilation)
        self._last = None

    def reuse(self, config: RunConfig) -> bool:
        if self.initial_values is None:
            return False
        self.inputs = self.targets = self._train = self._infer = None  # freed before the new batch's are made
        tf.config.experimental.enable_tensor_float_32_execution(config.tf32 is Tf32.ON)
        if self.is_gpu:
            tf.config.experimental.reset_memory_stats(f"GPU:{config.device.ref.index}")
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

    def synchronize(self) -> None:
        if self.is_gpu:
            tf.test.experimental.sync_devices()
        else:
            # A host tensor's numpy view needs no copy; reading it waits for the value.
            self._last.numpy()

    def peak_memory(self) -> MemoryReading:
        if self.is_gpu:
            device = self.device_name.lstrip("/")
            return MemoryReading(tf.config.experimental.get_memory_info(device)["peak"], "tf get_memory_info peak")
        return MemoryReading(process_peak_rss_bytes(), "process peak RSS (whole runner process, CPU)")

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


class StrategyWorkload(Workload):
    """A run under a tf.distribute strategy: the model, optimizer and their variables mirrored on every replica
    (identical weights, from the seed), each replica stepping config.batch_size samples of its own (seeded by
    its global replica id), and the gradients summed across replicas by the strategy's all-reduce."""

    def __init__(self, config: RunConfig) -> None:
        if config.compilation is Compilation.XLA and config.device.ref.kind is DeviceKind.CPU:
            raise FailedPrecondition(
                f"compilation xla cannot run strategy {config.strategy.value} on CPU devices: TensorFlow's XLA has "
                "no collectives on CPUs; use compilation graph or eager"
            )
        # First TensorFlow op: MultiWorkerMirroredStrategy configures the collective runtime, only possible before it starts.
        self.strategy = make_strategy(config)
        self.local_replicas = len(self.strategy.extended.worker_devices)
        self.config = config
        self.head = config.head
        self.is_gpu = config.device.ref.kind is DeviceKind.GPU
        keras.utils.set_random_seed(config.seed)
        tf.config.experimental.enable_tensor_float_32_execution(config.tf32 is Tf32.ON)
        for gpu in self._gpus():
            tf.config.experimental.reset_memory_stats(gpu)
        keras.mixed_precision.set_global_policy(MIXED_POLICIES.get(config.precision, "float32"))
        try:
            with self.strategy.scope():
                self.model = build_model(config)
                if config.mode is Mode.TRAIN:
                    self.optimizer = built_optimizer(config, self.model)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        self.inputs = self.strategy.experimental_distribute_values_from_function(self._replica_inputs)
        if config.mode is Mode.TRAIN:
            self.targets = self.strategy.experimental_distribute_values_from_function(self._replica_targets)
        self.parameter_count = count_trainable(self.model)
        self.first_step_traces = config.compilation is not Compilation.EAGER
        # XLA compiles what one replica runs, on its device; the strategy's step around it stays a graph.
        self._replica_step = compiled(self._replica_train, config.compilation)
        self._replica_forward = compiled(self._forward, config.compilation)
        outer = Compilation.EAGER if config.compilation is Compilation.EAGER else Compilation.GRAPH
        self._train = compiled(self._train_graph, outer)
        self._infer = compiled(self._infer_graph, outer)
        self._last = None

    def _replica_device(self, context: tf.distribute.experimental.ValueContext) -> str:
        return self.strategy.extended.worker_devices[context.replica_id_in_sync_group % self.local_replicas]

    def _replica_inputs(self, context) -> tf.Tensor:
        """The replica's own inputs, seeded by seed + its replica id across the job, on its device."""
        tf.random.set_seed(self.config.seed + context.replica_id_in_sync_group)
        with tf.device(self._replica_device(context)):
            return random_inputs(self.config.model, self.config.batch_size, self.config.input_shape)

    def _replica_targets(self, context) -> tf.Tensor:
        inputs = self.strategy.experimental_local_results(self.inputs)[0]
        with tf.device(self._replica_device(context)):
            return random_targets(self.head, output_shape(self.head, self.model, inputs))

    def _replica_train(self, inputs, targets):
        with tf.GradientTape() as tape:
            output = tf.cast(self.model(inputs, training=True), tf.float32)
            # The optimizer sums the replicas' gradients: each replica's share of the global mean loss.
            value = loss(self.head, output, targets) / self.strategy.num_replicas_in_sync
            scaled = self.optimizer.scale_loss(value)
        variables = self.model.trainable_variables
        self.optimizer.apply(tape.gradient(scaled, variables), variables)
        return value

    def _forward(self, inputs):
        return self.model(inputs, training=False)

    def _train_graph(self):
        return self.strategy.run(self._replica_step, args=(self.inputs, self.targets))

    def _infer_graph(self):
        return self.strategy.run(self._replica_forward, args=(self.inputs,))

    def train_step(self) -> None:
        with self._peers():
            self._last = self._train()

    def infer_step(self) -> None:
        with self._peers():
            self._last = self._infer()

    def synchronize(self) -> None:
        with self._peers():
            if self.is_gpu:
                tf.test.experimental.sync_devices()
            else:
                for value in self.strategy.experimental_local_results(self._last):
                    value.numpy()

    def agree(self, votes: tuple[int, ...]) -> tuple[int, ...]:
        if self.config.strategy is not Strategy.MULTI_WORKER_MIRRORED:
            return votes  # one process: nothing to agree with

        def vote(context):
            # Each worker process votes once, through its first local replica; the others add zeros.
            first = context.replica_id_in_sync_group % self.local_replicas == 0
            return tf.constant(votes if first else [0] * len(votes), tf.int32)

        with self._peers():
            per_replica = self.strategy.experimental_distribute_values_from_function(vote)
            total = self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            return tuple(int(value) for value in total.numpy())

    @contextmanager
    def _peers(self) -> Iterator[None]:
        """A collective that failed because another worker is gone, as an error naming the workers."""
        try:
            yield
        except Exception as error:
            lost = peer_error(self.config, error)
            if lost is None:
                raise
            raise lost from None

    def _gpus(self) -> list[str]:
        """The replicas' GPUs as TensorFlow's memory statistics name them (GPU:N, numbered among visible GPUs)."""
        if not self.is_gpu:
            return []
        specs = [tf.DeviceSpec.from_string(name) for name in self.strategy.extended.worker_devices]
        return [f"GPU:{spec.device_index}" for spec in specs]

    def peak_memory(self) -> MemoryReading:
        if self.is_gpu:
            peaks = [tf.config.experimental.get_memory_info(gpu)["peak"] for gpu in self._gpus()]
            return MemoryReading(max(peaks), "tf get_memory_info peak (the largest of this process's GPUs)")
        return MemoryReading(process_peak_rss_bytes(), "process peak RSS (whole worker process, CPU)")

    def close(self) -> None:
        self.__dict__.clear()


def _to_keras_layout(spec, array: np.ndarray) -> np.ndarray:
    """A reference input, stored in PyTorch's layout, in Keras' (images: NCHW -> NHWC)."""
    return array.transpose(0, 2, 3, 1) if spec.input_kind is InputKind.IMAGE else array


class TensorFlowBackend(Backend):
    framework = "tensorflow"
    models = MODELS

    def __init__(self, settings: RunnerSettings) -> None:
        # First of all: the server and every run's worker process build their backend here, and
        # anything after this line may touch a GPU.
        allow_memory_growth()
        self.settings = settings
        # TensorFlow fixes these when its runtime starts, so only at start-up, before any op.
        tf.config.threading.set_intra_op_parallelism_threads(settings.intra_op_threads)
        tf.config.threading.set_inter_op_parallelism_threads(settings.inter_op_threads)
        os.environ["TF_CUDNN_USE_AUTOTUNE"] = "1" if settings.cudnn_autotune is Switch.ON else "0"

    def runner_info(self) -> RunnerInfo:
        devices = [cpu_device()]
        driver = gpu_driver_version()
        for index, gpu in enumerate(tf.config.list_physical_devices("GPU")):
            details = tf.config.experimental.get_device_details(gpu)
            devices.append(Device(DeviceRef(DeviceKind.GPU, index), details.get("device_name", gpu.name), 0, driver))
        build = tf.sysconfig.get_build_info()
        on_gpu = len(devices) > 1
        return RunnerInfo(
            framework=self.framework,
            framework_version=tf.__version__,
            python_version=python_version(),
            devices=tuple(devices),
            cuda_version=build.get("cuda_version", "") if on_gpu else "",
            cudnn_version=build.get("cudnn_version", "") if on_gpu else "",
            options={
                "keras_version": keras.__version__,
                "cuda_build": str(build.get("is_cuda_build", False)),
                "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
            },
        )

    def capabilities(self, device: Device) -> Capabilities:
        gpu = device.ref.kind is DeviceKind.GPU
        return Capabilities(
            # TF32 and fp16 mixed precision are GPU features; bf16 runs on both.
            precisions=frozenset(Precision) if gpu else frozenset({Precision.FP32, Precision.AMP_BF16}),
            # The models are built channels-last (TensorFlow's CPU convolutions take no other); on a GPU
            # TensorFlow's layout optimizer may still run them as NCHW.
            layouts=frozenset({Layout.CHANNELS_LAST}),
            compilations=frozenset({Compilation.EAGER, Compilation.GRAPH, Compilation.XLA, Compilation.ONNXRUNTIME}),
            default_compilation=Compilation.GRAPH,
            # tf2onnx converts the channels-last Keras model as it is.
            compilation_limits={Compilation.ONNXRUNTIME: onnxruntime_limits(Layout.CHANNELS_LAST)},
            cudnn_autotune=frozenset({self.settings.cudnn_autotune}) if gpu else frozenset({Switch.OFF}),
            # Out of the box TensorFlow runs float32 as TF32 and autotunes cuDNN (TF_CUDNN_USE_AUTOTUNE).
            native_tf32=Tf32.ON,
            native_cudnn_autotune=Switch.ON,
            intra_op_threads=self.settings.intra_op_threads,
            inter_op_threads=self.settings.inter_op_threads,
            strategies=STRATEGIES,
            parallel_strategy=Strategy.MIRRORED,
            multi_node_strategy=Strategy.MULTI_WORKER_MIRRORED,
        )

    def prepare_worker(self, config: RunConfig) -> None:
        configure_worker(config)

    def build(self, config: RunConfig) -> Workload:
        if config.compilation is Compilation.ONNXRUNTIME:
            return onnxruntime_workload(config, build_model)
        if config.distributed:
            return StrategyWorkload(config)
        return TensorFlowWorkload(config)

    def inspect(self, config: ModelConfig) -> ModelReport:
        keras.utils.set_random_seed(config.seed)
        with tf.device("/CPU:0"):
            started = time.perf_counter()
            model = build_model(config)
            build_time_s = time.perf_counter() - started
            sample = random_inputs(config.model, 1, config.input_shape)
            output = model(sample, training=False)
            flops = forward_flops(model, sample)
        report = ModelReport(
            parameter_count=count_trainable(model),
            forward_flops=flops,
            flops_method=FLOPS_METHOD,
            output_shape=tuple(output.shape[1:]),
            build_time_s=build_time_s,
        )
        keras.backend.clear_session()
        return report

    def compare_reference(self, config: ModelConfig, arrays: Mapping[str, np.ndarray]) -> ReferenceReport:
        load = MODELS.builder(config.model).load_torch_weights
        if load is None:
            raise FailedPrecondition(f"{config.model.name} has no loader for PyTorch weights in the TensorFlow runner")
        weights = {key.removeprefix("weights/"): value for key, value in arrays.items() if key.startswith("weights/")}
        inputs = _to_keras_layout(config.model, arrays["input"])
        expected = arrays["output"]
        try:
            with tf.device("/CPU:0"):
                model = build_model(config)
                try:
                    load(model, weights)
                except KeyError as missing:
                    raise InvalidArgument(
                        f"the reference lacks the weight {missing.args[0]!r} that {config.model.name} needs"
                    ) from None
                except ValueError as error:
                    reason = (str(error).strip() or "ValueError").splitlines()[0][:200]
                    raise InvalidArgument(f"the reference's weights do not fit {config.model.name}: {reason}") from None
                output = model(tf.constant(inputs), training=False).numpy()
        finally:
            keras.backend.clear_session()
        return compared_outputs(output, expected, REFERENCE_TOLERANCE)

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return isinstance(exc, (tf.errors.ResourceExhaustedError, MemoryError))

    def release_memory(self) -> None:
        # The core has just collected garbage: Keras need not collect again.
        keras.backend.clear_session(free_memory=False)

    def stay_off_gpus(self) -> None:
        # The GPUs stay listed (Describe reads the physical devices); TensorFlow just never opens them here.
        tf.config.set_visible_devices([], "GPU")
