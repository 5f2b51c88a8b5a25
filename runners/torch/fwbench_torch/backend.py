"""The PyTorch side of a run: model, optimizer, random inputs, steps, synchronization."""

from __future__ import annotations

import time

import numpy as np
import torch
import torchvision
from fwbench_core.backend import Backend, MemoryReading, Workload
from fwbench_core.catalog import get_spec
from fwbench_core.spec import (
    Device,
    DeviceKind,
    DeviceRef,
    Mode,
    ModelConfig,
    ModelReport,
    Objective,
    Precision,
    ReferenceReport,
    RunConfig,
    RunnerInfo,
)
from fwbench_core.sysinfo import cpu_device, gpu_driver_version, process_peak_rss_bytes, python_version
from torch.utils.flop_counter import FlopCounterMode

from .models import MODELS
from .objectives import loss, random_inputs, random_targets

LEARNING_RATE = 0.01
MOMENTUM = 0.9
FLOPS_METHOD = "torch.utils.flop_counter.FlopCounterMode, batch 1, oneDNN off so recurrent layers decompose into counted matmuls"


def torch_device(device: Device) -> torch.device:
    return torch.device("cuda", device.ref.index) if device.ref.kind is DeviceKind.GPU else torch.device("cpu")


def apply_precision(precision: Precision) -> None:
    """Make TF32 use explicit: strict fp32 turns it off for matmuls and convolutions alike."""
    allow_tf32 = precision is Precision.TF32
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32


def count_trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build_model(config: RunConfig | ModelConfig) -> torch.nn.Module:
    return MODELS.builder(config.model.name)(config.model, config.input_shape, config.model_options)


class TorchWorkload(Workload):
    def __init__(self, config: RunConfig) -> None:
        self.device = torch_device(config.device)
        self.is_gpu = self.device.type == "cuda"
        self.head = config.head
        torch.manual_seed(config.seed)
        apply_precision(config.precision)
        if self.is_gpu:
            torch.cuda.reset_peak_memory_stats(self.device)
        self.model = build_model(config).to(self.device)
        self.parameter_count = count_trainable(self.model)
        self.inputs = random_inputs(config.model, config.batch_size, config.input_shape, self.device)
        if config.mode is Mode.TRAIN:
            self.model.train()
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
            self.targets = random_targets(self.head, self._output_like())
        else:
            self.model.eval()

    def _output_like(self) -> torch.Tensor:
        """Targets need the output's shape; only CTC's (frames) is not known without a forward pass."""
        if self.head.objective is not Objective.CTC:
            batch = self.inputs.shape[0]
            shape = (batch,) if self.head.objective is Objective.CLASSIFY else (batch, self.inputs.shape[1])
            return torch.empty(shape, device=self.device)
        with torch.no_grad():
            return self.model(self.inputs)

    def train_step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss(self.head, self.model(self.inputs), self.targets).backward()
        self.optimizer.step()

    def infer_step(self) -> None:
        with torch.inference_mode():
            self.model(self.inputs)

    def synchronize(self) -> None:
        if self.is_gpu:
            torch.cuda.synchronize(self.device)

    def peak_memory(self) -> MemoryReading:
        if self.is_gpu:
            return MemoryReading(torch.cuda.max_memory_allocated(self.device), "torch.cuda.max_memory_allocated")
        return MemoryReading(process_peak_rss_bytes(), "process peak RSS (whole runner process, CPU)")

    def close(self) -> None:
        self.__dict__.clear()


class TorchBackend(Backend):
    framework = "torch"
    models = MODELS

    def runner_info(self) -> RunnerInfo:
        devices = [cpu_device()]
        driver = gpu_driver_version()
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append(Device(DeviceRef(DeviceKind.GPU, index), props.name, props.total_memory, driver))
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        return RunnerInfo(
            framework=self.framework,
            framework_version=torch.__version__,
            python_version=python_version(),
            devices=tuple(devices),
            cuda_version=torch.version.cuda or "",
            cudnn_version=str(cudnn) if cudnn else "",
            options={
                "torchvision_version": torchvision.__version__,
                "intra_op_threads": str(torch.get_num_threads()),
                "inter_op_threads": str(torch.get_num_interop_threads()),
            },
        )

    def supported_precisions(self, device: Device) -> frozenset[Precision]:
        if device.ref.kind is DeviceKind.GPU:
            return frozenset({Precision.FP32, Precision.TF32})
        return frozenset({Precision.FP32})

    def build(self, config: RunConfig) -> Workload:
        return TorchWorkload(config)

    def count_parameters(self, model_name: str) -> int:
        spec = get_spec(model_name)
        return count_trainable(MODELS.builder(model_name)(spec, spec.default_input_shape, {}))

    def inspect(self, config: ModelConfig) -> ModelReport:
        started = time.perf_counter()
        torch.manual_seed(config.seed)
        model = build_model(config).eval()
        build_time_s = time.perf_counter() - started
        inputs = random_inputs(config.model, 1, config.input_shape, "cpu")
        with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter:
            output = model(inputs)
        return ModelReport(
            parameter_count=count_trainable(model),
            forward_flops=counter.get_total_flops(),
            flops_method=FLOPS_METHOD,
            output_shape=tuple(output.shape[1:]),
            build_time_s=build_time_s,
        )

    def export_reference(self, config: ModelConfig, path: str) -> ReferenceReport:
        torch.manual_seed(config.seed)
        model = build_model(config).eval()
        inputs = random_inputs(config.model, config.batch_size, config.input_shape, "cpu")
        with torch.no_grad():
            output = model(inputs)
        weights = {
            f"weights/{name}": tensor.numpy()
            for name, tensor in model.state_dict().items()
            if tensor.is_floating_point()
        }
        np.savez(path, input=inputs.numpy(), output=output.numpy(), **weights)
        return ReferenceReport(path=path, output_shape=tuple(output.shape))

    def is_out_of_memory(self, exc: BaseException) -> bool:
        if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
            return True
        # The CPU allocator reports a failed allocation as a plain RuntimeError.
        return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)

    def release_memory(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
