"""A Keras runner: Keras 3 on the backend KERAS_BACKEND names (serve.py sets it), building the built-in models from
their one Keras definition (models) and plug-ins from their build_keras.py, and training and serving them with Keras'
own compiled steps (workload). What is the framework's rather than Keras' (start-up settings, devices, versions,
memory) comes from that framework's native runner, whose environment and image this runner shares (native)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

import keras
import numpy as np

from fwbench_core.backend import Backend, Workload
from fwbench_core.choices import Compilation, DeviceKind, InputKind, Layout, Mode, Precision, Strategy, Switch
from fwbench_core.devices import Capabilities, Device, RunnerInfo, RunnerSettings
from fwbench_core.errors import FailedPrecondition
from fwbench_core.fairness import REFERENCE_TOLERANCE
from fwbench_core.models import ModelConfig, ModelReport, ReferenceReport
from fwbench_core.references import compared_outputs
from fwbench_core.runs import RunConfig

from . import native
from .models import MODELS
from .objectives import random_inputs
from .torch_weights import load_reference, reference_weights
from .workload import COMPILATIONS, KerasWorkload, build_model, count_trainable

# Not "cpu:0": Keras 3.15 on PyTorch moves variables made under that scope, which then get no gradients.
CPU = "cpu"


def default_compilation(backend: str, gpu: bool) -> Compilation:
    """Keras' own choice, jit_compile="auto" (Model.compile): XLA wherever the model supports it, except on the
    PyTorch backend (eager) and on TensorFlow without a GPU (its graph, not XLA)."""
    if backend == "torch":
        return Compilation.EAGER
    if backend == "tensorflow" and not gpu:
        return Compilation.GRAPH
    return Compilation.XLA


class KerasBackend(Backend):
    models = MODELS

    def __init__(self, settings: RunnerSettings) -> None:
        self.backend = keras.backend.backend()
        self.framework = f"keras-{self.backend}"
        # First of all, as in the native runner: anything after this may touch a GPU.
        self.native = native.native_backend(self.backend, settings)

    def runner_info(self) -> RunnerInfo:
        info = self.native.runner_info()
        return dataclasses.replace(
            info,
            framework=self.framework,
            framework_version=keras.__version__,
            options={
                **info.options,
                "keras_backend": self.backend,
                "backend_version": info.framework_version,
                "keras_version": keras.__version__,
            },
        )

    def capabilities(self, device: Device) -> Capabilities:
        gpu = device.ref.kind is DeviceKind.GPU
        own = self.native.capabilities(device)
        return dataclasses.replace(
            own,
            # Keras' mixed precision policies: fp16 (with loss scaling) a GPU's, bf16 on both.
            precisions=frozenset(Precision) if gpu else frozenset({Precision.FP32, Precision.AMP_BF16}),
            # Keras builds every model channels-last (image_data_format's default) on every backend.
            layouts=frozenset({Layout.CHANNELS_LAST}),
            native_layout=Layout.CHANNELS_LAST,
            compilations=COMPILATIONS[self.backend],
            default_compilation=default_compilation(self.backend, gpu),
            compilation_limits={},
            # cuDNN autotuning as the framework has it: Keras sets none.
            cudnn_autotune=frozenset({own.native_cudnn_autotune}) if gpu else frozenset({Switch.OFF}),
            strategies=frozenset({Strategy.SINGLE}),
            parallel_strategy=Strategy.SINGLE,
            multi_node_strategy=Strategy.SINGLE,
        )

    def build(self, config: RunConfig) -> Workload:
        if config.mode is Mode.GENERATE:
            raise FailedPrecondition(
                f"the {self.framework} runner does not generate: mode generate runs on the native runners "
                f"({self.backend} among them)"
            )
        return KerasWorkload(config, self.backend)

    def inspect(self, config: ModelConfig) -> ModelReport:
        keras.utils.set_random_seed(config.seed)
        with keras.device(CPU):
            started = time.perf_counter()
            model = build_model(config)
            build_time_s = time.perf_counter() - started
            sample = keras.ops.convert_to_tensor(
                random_inputs(config.model, 1, config.input_shape, np.random.default_rng(config.seed))
            )
            output = model(sample, training=False)
            flops, method = native.forward_flops(self.backend, model, sample)
        report = ModelReport(
            parameter_count=count_trainable(model),
            forward_flops=flops,
            flops_method=method,
            output_shape=tuple(output.shape[1:]),
            build_time_s=build_time_s,
        )
        keras.backend.clear_session()
        return report

    def compare_reference(self, config: ModelConfig, arrays: Mapping[str, np.ndarray]) -> ReferenceReport:
        """The reference's weights in the float32 model, its input through it on the CPU, the outputs compared. A
        Keras runner does not generate: a decoder's tokens are not compared here."""
        load = MODELS.builder(config.model).load_torch_weights
        if load is None:
            raise FailedPrecondition(
                f"{config.model.name} has no loader for PyTorch weights in the {self.framework} runner"
            )
        weights = reference_weights(arrays)
        inputs = arrays["input"]
        if config.model.input_kind is InputKind.IMAGE:
            inputs = inputs.transpose(0, 2, 3, 1)  # stored in PyTorch's layout (NCHW); Keras' is NHWC
        try:
            with keras.device(CPU):
                model = build_model(config)
                load_reference(load, model, weights, config.model.name)
                output = keras.ops.convert_to_numpy(model(keras.ops.convert_to_tensor(inputs), training=False))
        finally:
            keras.backend.clear_session()
        return compared_outputs(output, arrays["output"], REFERENCE_TOLERANCE)

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return self.native.is_out_of_memory(exc)

    def user_error(self, exc: BaseException):
        return self.native.user_error(exc)

    def release_memory(self) -> None:
        keras.backend.clear_session(free_memory=False)
        self.native.release_memory()

    def stay_off_gpus(self) -> None:
        self.native.stay_off_gpus()
