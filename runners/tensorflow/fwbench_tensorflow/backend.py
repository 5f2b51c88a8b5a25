"""The TensorFlow side of a run: Keras model, optimizer, random inputs, tf.function steps."""

from __future__ import annotations

import keras
import tensorflow as tf
from fwbench_core.backend import Backend, MemoryReading, Workload
from fwbench_core.catalog import get_spec
from fwbench_core.spec import Device, DeviceKind, DeviceRef, Mode, Precision, RunConfig, RunnerInfo
from fwbench_core.sysinfo import cpu_device, gpu_driver_version, process_peak_rss_bytes, python_version

from .models import MODELS

LEARNING_RATE = 0.01
MOMENTUM = 0.9


def tf_device_name(device: Device) -> str:
    return f"/GPU:{device.ref.index}" if device.ref.kind is DeviceKind.GPU else "/CPU:0"


def hwc(shape_chw: tuple[int, ...]) -> tuple[int, ...]:
    """The user's channels-first sample shape in Keras' channels-last layout."""
    channels, *spatial = shape_chw
    return (*spatial, channels)


def count_trainable(model: keras.Model) -> int:
    return int(sum(v.numpy().size for v in model.trainable_weights))


class TensorFlowWorkload(Workload):
    def __init__(self, config: RunConfig) -> None:
        self.device_name = tf_device_name(config.device)
        self.is_gpu = config.device.ref.kind is DeviceKind.GPU
        keras.utils.set_random_seed(config.seed)
        # TensorFlow enables TF32 by default; strict fp32 must turn it off.
        tf.config.experimental.enable_tensor_float_32_execution(config.precision is Precision.TF32)
        if self.is_gpu:
            tf.config.experimental.reset_memory_stats(f"GPU:{config.device.ref.index}")
        num_classes = config.model.num_classes
        batch_shape = (config.batch_size, *hwc(config.input_shape))
        with tf.device(self.device_name):
            self.model = MODELS.builder(config.model.name)(hwc(config.input_shape), num_classes)
            self.inputs = tf.random.normal(batch_shape)
            self.targets = tf.random.uniform((config.batch_size,), 0, num_classes, dtype=tf.int32)
            if config.mode is Mode.TRAIN:
                self.optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)
                self.optimizer.build(self.model.trainable_variables)
        self.parameter_count = count_trainable(self.model)
        self._train = tf.function(self._train_graph)
        self._infer = tf.function(self._infer_graph)
        self._last = None

    def _train_graph(self):
        with tf.GradientTape() as tape:
            logits = self.model(self.inputs, training=True)
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(self.targets, logits, from_logits=True)
            )
        variables = self.model.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

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


class TensorFlowBackend(Backend):
    framework = "tensorflow"
    models = MODELS

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
                "intra_op_threads": str(tf.config.threading.get_intra_op_parallelism_threads()),
                "inter_op_threads": str(tf.config.threading.get_inter_op_parallelism_threads()),
            },
        )

    def supported_precisions(self, device: Device) -> frozenset[Precision]:
        if device.ref.kind is DeviceKind.GPU:
            return frozenset({Precision.FP32, Precision.TF32})
        return frozenset({Precision.FP32})

    def build(self, config: RunConfig) -> Workload:
        return TensorFlowWorkload(config)

    def count_parameters(self, model_name: str) -> int:
        spec = get_spec(model_name)
        with tf.device("/CPU:0"):
            model = MODELS.builder(model_name)(hwc(spec.default_input_shape), spec.num_classes)
        count = count_trainable(model)
        keras.backend.clear_session()
        return count

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return isinstance(exc, (tf.errors.ResourceExhaustedError, MemoryError))

    def release_memory(self) -> None:
        keras.backend.clear_session()
