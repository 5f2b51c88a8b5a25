"""The TensorFlow runner's backend: what it runs on, what it can do, and its builds, inspections and references."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import keras
import numpy as np
import tensorflow as tf
from fwbench_keras.torch_weights import load_reference, reference_weights

from fwbench_core.backend import Backend, Workload
from fwbench_core.choices import Compilation, DeviceKind, InputKind, Layout, Precision, Strategy, Switch, Tf32
from fwbench_core.devices import Capabilities, Device, DeviceRef, RunnerInfo, RunnerSettings
from fwbench_core.errors import FailedPrecondition
from fwbench_core.fairness import REFERENCE_TOLERANCE
from fwbench_core.models import ModelConfig, ModelReport, ReferenceReport
from fwbench_core.onnx_runtime import onnxruntime_limits
from fwbench_core.references import (
    PARITY_NEW_TOKENS,
    compared_outputs,
    compared_tokens,
    expected_tokens,
    parity_prompt_length,
)
from fwbench_core.runs import RunConfig
from fwbench_core.sysinfo import cpu_device, gpu_driver_version, python_version

from .flops import FLOPS_METHOD, forward_flops
from .generation import decoder_for, generate
from .models import MODELS
from .objectives import random_inputs
from .onnx_runtime import onnxruntime_workload
from .strategies import STRATEGIES, configure_worker
from .strategy_workload import StrategyWorkload
from .workload import MIXED_POLICIES, TensorFlowWorkload, build_model, count_trainable


def allow_memory_growth() -> None:
    """Let TensorFlow take GPU memory as it needs it instead of nearly all of every GPU at its first GPU
    op, so that the other runner on a shared GPU finds its memory. Only possible before TensorFlow first
    touches a GPU; TF_FORCE_GPU_ALLOW_GROWTH in the image is the second guard."""
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)


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
        weights = reference_weights(arrays)
        inputs = _to_keras_layout(config.model, arrays["input"])
        reference_tokens = expected_tokens(config, arrays) if config.model.generates else None

        def loaded(policy: str) -> keras.Model:
            """The model under Keras' precision `policy` (read when its layers are made), the reference's weights in."""
            keras.mixed_precision.set_global_policy(policy)
            try:
                model = build_model(config)
            finally:
                keras.mixed_precision.set_global_policy("float32")
            load_reference(load, model, weights, config.model.name)
            return model

        try:
            with tf.device("/CPU:0"):
                model = loaded("float32")
                output = model(tf.constant(inputs), training=False).numpy()
                if reference_tokens is not None:
                    # The prompts the exporter generated from, greedy (eager here) in the tokens' precision.
                    prompts = tf.constant(inputs[:, : parity_prompt_length(config.model, inputs.shape[1])], tf.int32)
                    if config.token_precision is not Precision.FP32:
                        model = loaded(MIXED_POLICIES[config.token_precision])
                    tokens = generate(decoder_for(config.model, model), prompts, PARITY_NEW_TOKENS)
        finally:
            keras.backend.clear_session()
        report = compared_outputs(output, arrays["output"], REFERENCE_TOLERANCE)
        return report if reference_tokens is None else compared_tokens(report, config, tokens, reference_tokens)

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return isinstance(exc, (tf.errors.ResourceExhaustedError, MemoryError))

    def release_memory(self) -> None:
        # The core has just collected garbage: Keras need not collect again.
        keras.backend.clear_session(free_memory=False)

    def stay_off_gpus(self) -> None:
        # The GPUs stay listed (Describe reads the physical devices); TensorFlow just never opens them here.
        tf.config.set_visible_devices([], "GPU")
