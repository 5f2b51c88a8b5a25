"""Compilation onnxruntime: a runner exports its model to ONNX (torch.onnx.export, tf2onnx) and an onnxruntime
InferenceSession runs it. The export is the runner's; the session, its device and the steps are the same for
every runner, so they live here. onnxruntime is no deep-learning framework: it is imported on first use, in a
runner environment that has it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .backend import MemoryReading, Workload, process_peak_memory
from .choices import DeviceKind, Layout, Mode, Precision, Strategy, Switch
from .devices import CompilationLimits, Device
from .errors import FailedPrecondition
from .runs import RunConfig

PROVIDERS = {DeviceKind.CPU: "CPUExecutionProvider", DeviceKind.GPU: "CUDAExecutionProvider"}


def onnxruntime_limits(layout: Layout) -> CompilationLimits:
    """Inference only. fp32 only: onnxruntime has no autocast, and a model converted to fp16 or bf16 is another
    network than the one the other runners run in mixed precision. Images in the one layout the runner's
    exported graph takes, and one process on one device."""
    return CompilationLimits(
        modes=frozenset({Mode.INFER}),
        precisions=frozenset({Precision.FP32}),
        layouts=frozenset({layout}),
        strategies=frozenset({Strategy.SINGLE}),
    )


def import_onnxruntime(*exporter_packages: str):
    """The onnxruntime module, once the exporter's own packages are known to import too; FailedPrecondition
    naming the package the environment lacks."""
    import importlib

    try:
        for package in exporter_packages:
            importlib.import_module(package)
        import onnxruntime
    except ImportError as error:
        raise FailedPrecondition(
            f"compilation onnxruntime needs the Python package {error.name}, which this runner's environment lacks"
        ) from None
    return onnxruntime


def provider_for(device: Device, available: Sequence[str], version: str) -> str:
    """The execution provider that runs on `device`, or FailedPrecondition naming the one missing."""
    provider = PROVIDERS[device.ref.kind]
    if provider not in available:
        gpu = device.ref.kind is DeviceKind.GPU
        hint = "; install onnxruntime-gpu (built for this CUDA) in place of onnxruntime" if gpu else ""
        raise FailedPrecondition(
            f"compilation onnxruntime on {device.ref} needs onnxruntime's {provider}, which this runner's "
            f"onnxruntime {version} lacks (it has {', '.join(available) or 'none'}){hint}"
        )
    return provider


class OnnxRuntimeWorkload(Workload):
    """An exported model (`model_onnx`: the serialized ModelProto, or the path of a file, which may keep its
    weights in files beside it; read here, once) run on `inputs` by an InferenceSession on the run's device.
    `exported_by` names the exporter for the run's flags."""

    def __init__(
        self,
        config: RunConfig,
        ort,
        model_onnx: bytes | str,
        inputs: np.ndarray,
        parameter_count: int,
        exported_by: str,
    ) -> None:
        device = config.device
        provider = provider_for(device, ort.get_available_providers(), ort.__version__)
        self.is_gpu = device.ref.kind is DeviceKind.GPU
        self.parameter_count = parameter_count
        options = ort.SessionOptions()
        options.intra_op_num_threads = config.intra_op_threads
        options.inter_op_num_threads = config.inter_op_threads
        provider_options = {}
        if self.is_gpu:
            provider_options = {
                "device_id": device.ref.index,
                "use_tf32": 0,  # strict fp32, as the other runners' fp32
                "cudnn_conv_algo_search": "EXHAUSTIVE" if config.cudnn_autotune is Switch.ON else "DEFAULT",
            }
        self.session = ort.InferenceSession(model_onnx, options, providers=[(provider, provider_options)])
        self.notes = (f"onnxruntime {ort.__version__} ({provider}), exported by {exported_by}",)
        (graph_input,) = self.session.get_inputs()
        # The inputs are copied to the device once, as every runner's are; outputs are allocated there at each run.
        where = ("cuda", device.ref.index) if self.is_gpu else ("cpu", 0)
        self.inputs = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(inputs), *where)
        self.binding = self.session.io_binding()
        self.binding.bind_ortvalue_input(graph_input.name, self.inputs)
        for output in self.session.get_outputs():
            self.binding.bind_output(output.name, *where)

    def train_step(self) -> None:
        raise AssertionError("compilation onnxruntime runs inference only; validation refuses mode train")

    def infer_step(self) -> None:
        # Returns once the device has finished: the CPU provider runs synchronously, and the CUDA provider
        # synchronizes its stream at the end of a run unless told not to.
        self.session.run_with_iobinding(self.binding)

    def synchronize(self) -> None:
        """Nothing is left running: each step returned when its device was done."""

    def peak_memory(self) -> MemoryReading:
        if self.is_gpu:
            return MemoryReading(None, "not read: onnxruntime reports no peak of its CUDA allocations")
        return process_peak_memory()

    def close(self) -> None:
        self.__dict__.clear()
