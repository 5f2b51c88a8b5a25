"""Compilation onnxruntime: the model exported by torch.onnx.export and run by an onnxruntime InferenceSession."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from fwbench_core.backend import MemoryReading, Workload
from fwbench_core.errors import FailedPrecondition
from fwbench_core.spec import CompilationLimits, Device, DeviceKind, Layout, Mode, Precision, RunConfig, Strategy, Switch
from fwbench_core.sysinfo import process_peak_rss_bytes

from .compilation import first_line
from .objectives import random_inputs

# Inference only. fp32 only: onnxruntime has no autocast, and a model converted to fp16 or bf16 is another
# network than the one the other runners run in mixed precision. The exported graph takes NCHW images, and one
# process on one device.
ONNXRUNTIME_LIMITS = CompilationLimits(
    modes=frozenset({Mode.INFER}),
    precisions=frozenset({Precision.FP32}),
    layouts=frozenset({Layout.CHANNELS_FIRST}),
    strategies=frozenset({Strategy.SINGLE}),
)
PROVIDERS = {DeviceKind.CPU: "CPUExecutionProvider", DeviceKind.GPU: "CUDAExecutionProvider"}
ELEMENT_TYPES = {torch.float32: np.float32, torch.int64: np.int64}


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


def _import_onnxruntime():
    try:
        import onnx  # noqa: F401  torch.onnx.export writes the model with it
        import onnxruntime
        import onnxscript  # noqa: F401  torch.onnx.export's exporter translates operators with it
    except ImportError as error:
        raise FailedPrecondition(
            f"compilation onnxruntime needs the Python package {error.name}, which this runner's environment lacks"
        ) from None
    return onnxruntime


class OnnxRuntimeWorkload(Workload):
    def __init__(self, config: RunConfig, build_model: Callable[[RunConfig], torch.nn.Module]) -> None:
        ort = _import_onnxruntime()
        device = config.device
        provider = provider_for(device, ort.get_available_providers(), ort.__version__)
        self.is_gpu = device.ref.kind is DeviceKind.GPU
        self.gpu = torch.device("cuda", device.ref.index) if self.is_gpu else None
        torch.manual_seed(config.seed)
        torch.set_num_threads(config.intra_op_threads)  # for the export; the session has its own threads
        model = build_model(config).eval()
        self.parameter_count = sum(p.numel() for p in model.parameters() if p.requires_grad)
        self.inputs = random_inputs(config.model, config.batch_size, config.input_shape, self.gpu or "cpu")
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
        with tempfile.TemporaryDirectory(prefix="fwbench-onnx-") as folder:
            path = Path(folder) / "model.onnx"
            try:
                torch.onnx.export(model, (self.inputs.cpu(),), path, dynamo=True, verbose=False)
            except Exception as error:  # the exporter's failures (unsupported operators, tracing) share no base class
                raise FailedPrecondition(
                    f"compilation onnxruntime: torch.onnx.export cannot export {config.model.name}: {first_line(error)}"
                ) from None
            self.session = ort.InferenceSession(str(path), options, providers=[(provider, provider_options)])
        del model
        self.notes = (f"onnxruntime {ort.__version__} ({provider}), exported by torch.onnx.export",)
        (graph_input,) = self.session.get_inputs()
        if self.is_gpu:
            # The inputs stay on the GPU; outputs are allocated there by onnxruntime at each run.
            self.binding = self.session.io_binding()
            self.binding.bind_input(
                graph_input.name, "cuda", device.ref.index, ELEMENT_TYPES[self.inputs.dtype],
                tuple(self.inputs.shape), self.inputs.data_ptr(),
            )
            for output in self.session.get_outputs():
                self.binding.bind_output(output.name, "cuda", device.ref.index)
        else:
            self.feed = {graph_input.name: self.inputs.numpy()}

    def train_step(self) -> None:
        raise AssertionError("compilation onnxruntime runs inference only; validation refuses mode train")

    def infer_step(self) -> None:
        # Both return once the device has finished: the CPU provider runs synchronously, and the CUDA provider
        # synchronizes its stream at the end of a run unless told not to.
        if self.is_gpu:
            self.session.run_with_iobinding(self.binding)
        else:
            self.session.run(None, self.feed)

    def synchronize(self) -> None:
        if self.is_gpu:
            torch.cuda.synchronize(self.gpu)

    def peak_memory(self) -> MemoryReading:
        if self.is_gpu:
            return MemoryReading(None, "not read: onnxruntime's CUDA allocations are not visible to torch.cuda")
        return MemoryReading(process_peak_rss_bytes(), "process peak RSS (whole runner process, CPU)")

    def close(self) -> None:
        self.__dict__.clear()
