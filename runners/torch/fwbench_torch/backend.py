"""The PyTorch side of a run: model, optimizer, random inputs, steps, synchronization."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torchvision
from fwbench_core.catalog import get_spec
from fwbench_core.backend import Backend, MemoryReading, Workload
from fwbench_core.spec import Device, DeviceKind, DeviceRef, Mode, Precision, RunConfig, RunnerInfo
from fwbench_core.sysinfo import cpu_device, gpu_driver_version, process_peak_rss_bytes, python_version

from .models import MODELS

LEARNING_RATE = 0.01
MOMENTUM = 0.9


def torch_device(device: Device) -> torch.device:
    return torch.device("cuda", device.ref.index) if device.ref.kind is DeviceKind.GPU else torch.device("cpu")


def apply_precision(precision: Precision) -> None:
    """Make TF32 use explicit: strict fp32 turns it off for matmuls and convolutions alike."""
    allow_tf32 = precision is Precision.TF32
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32


def count_trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class TorchWorkload(Workload):
    def __init__(self, config: RunConfig) -> None:
        self.device = torch_device(config.device)
        self.is_gpu = self.device.type == "cuda"
        torch.manual_seed(config.seed)
        apply_precision(config.precision)
        if self.is_gpu:
            torch.cuda.reset_peak_memory_stats(self.device)
        self.model = MODELS.builder(config.model.name)(config.model.num_classes).to(self.device)
        self.parameter_count = count_trainable(self.model)
        self.inputs = torch.randn(config.batch_size, *config.input_shape, device=self.device)
        self.targets = torch.randint(0, config.model.num_classes, (config.batch_size,), device=self.device)
        if config.mode is Mode.TRAIN:
            self.model.train()
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
        else:
            self.model.eval()

    def train_step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(self.inputs), self.targets)
        loss.backward()
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
        return count_trainable(MODELS.builder(model_name)(get_spec(model_name).num_classes))

    def is_out_of_memory(self, exc: BaseException) -> bool:
        if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
            return True
        # The CPU allocator reports a failed allocation as a plain RuntimeError.
        return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)

    def release_memory(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
