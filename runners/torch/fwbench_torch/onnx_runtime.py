"""Compilation onnxruntime, torch's part: the model exported by torch.onnx.export; the core's session runs it."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from fwbench_core.errors import FailedPrecondition
from fwbench_core.onnx_runtime import OnnxRuntimeWorkload, import_onnxruntime
from fwbench_core.runs import RunConfig

from .compilation import first_line
from .objectives import random_inputs


def onnxruntime_workload(config: RunConfig, build_model: Callable[[RunConfig], torch.nn.Module]) -> OnnxRuntimeWorkload:
    # torch.onnx.export's default exporter writes the model with onnx and translates operators with onnxscript.
    ort = import_onnxruntime("onnx", "onnxscript")
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.intra_op_threads)  # for the export; the session has its own threads
    model = build_model(config).eval()
    if config.data_seed != config.seed:
        torch.manual_seed(config.data_seed)  # inputs of their own seed; from the seed, they follow the weights
    inputs = random_inputs(config.model, config.batch_size, config.input_shape, "cpu")
    parameter_count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    with tempfile.TemporaryDirectory(prefix="fwbench-onnx-") as folder:
        # The exporter writes the weights to a file beside the model's: the session reads both from the folder.
        path = Path(folder) / "model.onnx"
        try:
            torch.onnx.export(model, (inputs,), path, dynamo=True, verbose=False)
        except Exception as error:  # the exporter's failures (unsupported operators, tracing) share no base class
            raise FailedPrecondition(
                f"compilation onnxruntime: torch.onnx.export cannot export {config.model.name}: {first_line(error)}"
            ) from None
        return OnnxRuntimeWorkload(config, ort, str(path), inputs.numpy(), parameter_count, "torch.onnx.export")
