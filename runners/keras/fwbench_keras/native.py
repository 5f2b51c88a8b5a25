"""What a Keras runner takes from the framework under Keras: its native runner's backend (start-up settings, devices,
versions, memory), and the few things Keras leaves to each framework: TF32, the GPU's peak memory, and the forward
FLOPs, counted as that framework's native runner counts them (2 x multiply-accumulates of convolutions and matrix
products). Imported only once KERAS_BACKEND is set; each function imports its framework, which is the environment's."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import keras

from fwbench_core.backend import Backend, MemoryReading
from fwbench_core.choices import Tf32
from fwbench_core.devices import RunnerSettings

# The native runner of each backend, whose process-wide settings (threads, GPU memory growth) and devices a Keras
# runner on it shares.
NATIVE_BACKENDS = {
    "tensorflow": ("fwbench_tensorflow.backend", "TensorFlowBackend"),
    "jax": ("fwbench_jax.backend", "JaxBackend"),
    "torch": ("fwbench_torch.backend", "TorchBackend"),
}


def native_backend(name: str, settings: RunnerSettings) -> Backend:
    module, cls = NATIVE_BACKENDS[name]
    return getattr(importlib.import_module(module), cls)(settings)


def set_tf32(name: str, tf32: Tf32 | None) -> None:
    """float32 matrix products (and convolutions) as TF32 where the run says so, as each native runner sets it; a
    device without TF32 (None) runs exact float32."""
    if name == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(tf32 is Tf32.ON)
    elif name == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 is Tf32.ON else "highest")
    else:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = tf32 is Tf32.ON
        torch.backends.cudnn.allow_tf32 = tf32 in (Tf32.ON, Tf32.CONVOLUTIONS)


def reset_gpu_peak(name: str, gpu_index: int) -> None:
    """Start the GPU's peak-memory counter afresh where the framework can (JAX cannot: its peak is the process's,
    which is the run's in a GPU run's own worker process)."""
    if name == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.reset_memory_stats(f"GPU:{gpu_index}")
    elif name == "torch":
        import torch

        torch.cuda.reset_peak_memory_stats(gpu_index)


def gpu_peak(name: str, gpu_index: int) -> MemoryReading:
    if name == "tensorflow":
        import tensorflow as tf

        peak = tf.config.experimental.get_memory_info(f"GPU:{gpu_index}")["peak"]
        return MemoryReading(peak, "tf get_memory_info peak")
    if name == "jax":
        import jax

        stats = jax.devices("gpu")[gpu_index].memory_stats() or {}
        return MemoryReading(
            stats.get("peak_bytes_in_use"), "jax memory_stats peak_bytes_in_use (since the process started)"
        )
    import torch

    return MemoryReading(torch.cuda.max_memory_allocated(gpu_index), "torch.cuda.max_memory_allocated")


def forward_flops(name: str, model: keras.Model, sample) -> tuple[int, str]:
    """The per-sample forward FLOPs of `model` at `sample` (batch 1), and how they were counted."""
    return FLOP_COUNTERS[name](model, sample)


def _tensorflow_flops(model, sample) -> tuple[int, str]:
    from fwbench_tensorflow.flops import FLOPS_METHOD
    from fwbench_tensorflow.flops import forward_flops as graph_flops

    return graph_flops(model, sample), FLOPS_METHOD


def _jax_flops(model, sample) -> tuple[int, str]:
    from fwbench_jax.flops import FLOPS_METHOD
    from fwbench_jax.flops import forward_flops as jaxpr_flops

    def forward(trainable, non_trainable, x):
        return model.stateless_call(trainable, non_trainable, x, training=False)[0]

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    return jaxpr_flops(forward, trainable, non_trainable, sample), FLOPS_METHOD


def _torch_flops(model, sample) -> tuple[int, str]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from fwbench_torch.backend import FLOPS_METHOD

    with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter:
        model(sample, training=False)
    return counter.get_total_flops(), FLOPS_METHOD


FLOP_COUNTERS: dict[str, Callable] = {"tensorflow": _tensorflow_flops, "jax": _jax_flops, "torch": _torch_flops}
