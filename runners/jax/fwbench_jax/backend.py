"""The JAX side of a run: a Flax model, an Optax optimizer, random inputs, jitted steps."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

import flax
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import optax

from fwbench_core.backend import Backend, MemoryReading, Workload, process_peak_memory
from fwbench_core.choices import Compilation, DeviceKind, InputKind, Layout, Mode, Precision, Strategy, Switch, Tf32
from fwbench_core.devices import Capabilities, Device, DeviceRef, RunnerInfo, RunnerSettings
from fwbench_core.fairness import LEARNING_RATE, MOMENTUM, REFERENCE_TOLERANCE
from fwbench_core.models import Head, ModelConfig, ModelReport, ReferenceReport
from fwbench_core.placement import cpu_worker_limit
from fwbench_core.references import compared_outputs, compared_tokens, expected_tokens
from fwbench_core.runs import RunConfig
from fwbench_core.sysinfo import cpu_device, gpu_driver_version, python_version

from .flops import FLOPS_METHOD, forward_flops
from .generation import EAGER_CACHE_NOTE, Generation, parity_tokens
from .models import MODELS
from .objectives import jax_input_shape, loss, random_inputs, random_targets
from .weights import initial_variables, load_torch_weights, variable_shapes

# Dynamic loss scaling for fp16 training, with torch.amp.GradScaler's defaults: start at 2**16, halve
# on a step whose gradients overflow (and skip its update), double after 2000 steps without overflow.
INITIAL_LOSS_SCALE = 2.0**16
LOSS_SCALE_GROWTH_INTERVAL = 2000

# Mixed precision: activations and matrix products in the compute type, parameters kept in float32.
COMPUTE_DTYPES = {Precision.AMP_FP16: jnp.float16, Precision.AMP_BF16: jnp.bfloat16}
# float32 matrix products and convolutions as the run resolved TF32: exact fp32 ("highest"), or TF32 on the GPU's
# tensor cores (JAX's own default there); a device without TF32 computes exact fp32.
STRICT_FP32 = "highest"
MATMUL_PRECISIONS = {Tf32.ON: "tensorfloat32", Tf32.OFF: STRICT_FP32, None: STRICT_FP32}


def gpu_devices() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:  # no GPU backend: PyPI's CPU-only jaxlib, or no usable GPU
        return []


# Prints the names of the GPUs JAX sees, one a line (none without a GPU backend).
GPU_LISTING = (
    "import jax\n"
    "try:\n    print('\\n'.join(d.device_kind for d in jax.devices('gpu')))\n"
    "except RuntimeError:\n    pass\n"
)


def gpu_names_apart() -> list[str]:
    """The names of the GPUs JAX sees, read in a short-lived process: starting JAX's GPU backend in this one
    would open a context, holding memory, on every GPU for the runner's life."""
    done = subprocess.run([sys.executable, "-c", GPU_LISTING], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"listing JAX's GPUs failed: {done.stderr.strip()[-2000:]}")
    return done.stdout.splitlines()


def jax_device(device: Device):
    if device.ref.kind is DeviceKind.GPU:
        return gpu_devices()[device.ref.index]
    return jax.devices("cpu")[device.ref.index]


def count_parameters(params) -> int:
    return int(sum(np.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(params)))


def build_module(config: RunConfig | ModelConfig, dtype: Any = jnp.float32) -> flax.linen.Module:
    return MODELS.builder(config.model).build(config.model, config.model_options, dtype)


def sample_spec(config: RunConfig | ModelConfig, batch_size: int) -> jax.ShapeDtypeStruct:
    shape = (batch_size, *jax_input_shape(config.model, config.input_shape))
    dtype = jnp.int32 if config.model.input_kind is InputKind.TOKENS else jnp.float32
    return jax.ShapeDtypeStruct(shape, dtype)


def all_finite(tree) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(tree)]))


def make_train_step(module: flax.linen.Module, optimizer: optax.GradientTransformation, head: Head, loss_scaling: bool):
    """One training step as a pure function of (state, inputs, targets) -> (state, loss)."""

    def step(state: dict, inputs: jax.Array, targets: jax.Array):
        rng, dropout = jax.random.split(state["rng"])
        scale = state["loss_scale"] if loss_scaling else 1.0

        def objective(params):
            logits, updated = module.apply(
                {"params": params, "batch_stats": state["batch_stats"]},
                inputs,
                train=True,
                rngs={"dropout": dropout},
                mutable=["batch_stats"],
            )
            value = loss(head, logits, targets)
            return value * scale, (value, updated.get("batch_stats", {}))

        grads, (value, batch_stats) = jax.grad(objective, has_aux=True)(state["params"])
        new = dict(state, rng=rng, batch_stats=batch_stats)
        if loss_scaling:
            grads = jax.tree_util.tree_map(lambda grad: grad / scale, grads)
        updates, new["opt_state"] = optimizer.update(grads, state["opt_state"], state["params"])
        new["params"] = optax.apply_updates(state["params"], updates)
        if loss_scaling:
            finite = all_finite(grads)
            for key in ("params", "opt_state"):  # an overflowing step changes no weight
                new[key] = jax.tree_util.tree_map(
                    lambda fresh, old: jnp.where(finite, fresh, old), new[key], state[key]
                )
            good_steps = jnp.where(finite, state["good_steps"] + 1, 0)
            grow = good_steps >= LOSS_SCALE_GROWTH_INTERVAL
            new["loss_scale"] = jnp.where(finite, jnp.where(grow, scale * 2, scale), scale / 2)
            new["good_steps"] = jnp.where(grow, 0, good_steps)
        return new, value

    return step


class JaxWorkload(Workload):
    def __init__(self, config: RunConfig) -> None:
        self.devices = [jax_device(device) for device in config.run_devices]
        self.module = build_module(config, COMPUTE_DTYPES.get(config.precision, jnp.float32))
        self.shapes = variable_shapes(self.module, sample_spec(config, 1))
        self.parameter_count = count_parameters(self.shapes["params"])
        # jax.jit traces and compiles the step for its input shapes in the first step of every fresh build and
        # of every reuse (which makes new step functions).
        self.first_step_traces = config.compilation is Compilation.XLA
        self._start(config)

    def _start(self, config: RunConfig) -> None:
        """Weights, optimizer state, inputs and targets as the seed gives them for `config`'s batch size, and
        new step functions. The host draws the weights afresh: a step gives its state's buffers to the next."""
        # Read when a step is traced (jit) or dispatched (eager): set for this run's steps.
        jax.config.update("jax_default_matmul_precision", MATMUL_PRECISIONS[config.tf32])
        variables = initial_variables(self.shapes, config.seed, MODELS.builder(config.model).init_std)
        params, batch_stats = variables["params"], variables.get("batch_stats", {})
        dropout_key = jax.random.split(jax.random.key(config.seed), 3)[2]
        input_key, target_key, _ = jax.random.split(jax.random.key(config.data_seed), 3)
        # Under MIRRORED, one global batch split across the devices (the batch size is per device) and the
        # weights replicated on each: XLA sums the gradients across devices (and BatchNorm's statistics are the
        # global batch's). One device: everything on it.
        mesh = jax.sharding.Mesh(np.array(self.devices), ("batch",))
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        batched = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
        with jax.default_device(self.devices[0]):
            inputs = random_inputs(input_key, config.model, config.samples_per_step, config.input_shape)
        jit = config.compilation is Compilation.XLA
        self._last = None
        if config.mode is Mode.TRAIN:
            optimizer = optax.sgd(LEARNING_RATE, momentum=MOMENTUM)
            state = dict(params=params, batch_stats=batch_stats, opt_state=optimizer.init(params), rng=dropout_key)
            loss_scaling = config.precision is Precision.AMP_FP16  # fp16 gradients underflow without it; bf16's do not
            if loss_scaling:
                state.update(loss_scale=jnp.float32(INITIAL_LOSS_SCALE), good_steps=jnp.int32(0))
            output_shape = jax.eval_shape(partial(self.module.apply, train=False), self.shapes, inputs).shape
            targets = random_targets(target_key, config.head, output_shape)
            self.state = jax.device_put(state, replicated)
            self.inputs, self.targets = jax.device_put((inputs, targets), batched)
            step = make_train_step(self.module, optimizer, config.head, loss_scaling)
            # The old state's buffers are given to the new one: no second copy of the weights per step.
            self._train = jax.jit(step, donate_argnums=0, out_shardings=replicated) if jit else step
        else:
            self.variables = jax.device_put({"params": params, "batch_stats": batch_stats}, replicated)
            self.inputs = jax.device_put(inputs, batched)
            if config.mode is Mode.GENERATE:  # the inputs are the prompts
                with jax.default_device(self.devices[0]):  # the cache made where it stays
                    self.generation = Generation(
                        self.module, self.variables, self.inputs, config.new_tokens, jit, replicated
                    )
                self.notes = () if jit else (EAGER_CACHE_NOTE,)
            else:

                def forward(variables, x):
                    return self.module.apply(variables, x, train=False)

                self._infer = jax.jit(forward) if jit else forward

    def reuse(self, config: RunConfig) -> bool:
        # Freed before the new batch's are made.
        self.state = self.variables = self.inputs = self.targets = self._last = self.generation = None
        self._start(config)
        return True

    def train_step(self) -> None:
        self.state, value = self._train(self.state, self.inputs, self.targets)
        # Eager steps run op by op: the last weight update may end after the loss.
        self._last = (self.state, value)

    def infer_step(self) -> None:
        self._last = self._infer(self.variables, self.inputs)

    def prefill(self) -> None:
        self.generation.prefill()
        self._last = self.generation.state

    def decode_step(self) -> None:
        self.generation.decode_step()
        self._last = self.generation.state

    def generated_tokens(self) -> list[list[int]]:
        return self.generation.tokens().tolist()

    def synchronize(self) -> None:
        jax.block_until_ready(self._last)

    def peak_memory(self) -> MemoryReading:
        peaks = [(device.memory_stats() or {}).get("peak_bytes_in_use") for device in self.devices]
        if None not in peaks:
            # JAX cannot reset it: the process's peak, which is the run's in a run's own worker process.
            return MemoryReading(
                max(peaks),
                "jax memory_stats peak_bytes_in_use, the largest of the run's devices (since the process started)",
            )
        return process_peak_memory()

    def close(self) -> None:
        self.__dict__.clear()


class JaxBackend(Backend):
    framework = "jax"
    models = MODELS

    def __init__(self, settings: RunnerSettings) -> None:
        cores = os.cpu_count() or 1
        if (settings.intra_op_threads, settings.inter_op_threads) != (cores, cores):
            # XLA's CPU runtime sizes its thread pool by the cores and has no setting for it.
            raise ValueError(
                f"the JAX runner uses every core ({cores}) within and across ops; it cannot run with "
                f"--intra-op-threads {settings.intra_op_threads} --inter-op-threads {settings.inter_op_threads}"
            )
        self.settings = settings
        self._off_gpus = False  # stay_off_gpus was called
        # Read when JAX starts its CPU backend: cpu:0 to cpu:N-1 are XLA host devices, as many as the core lets
        # a run name, so that a MIRRORED run can spread over several.
        os.environ["XLA_FLAGS"] = (
            f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={cpu_worker_limit()}".strip()
        )
        # Read when JAX starts its GPU backend, so before any JAX op: XLA's autotuner picks the convolution
        # (cuDNN) and matrix product algorithms by timing them, as cuDNN autotuning does in the other runners.
        if settings.cudnn_autotune is Switch.OFF:
            os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_gpu_autotune_level=0".strip()

    def runner_info(self) -> RunnerInfo:
        driver = gpu_driver_version()
        devices = [cpu_device()]
        if not self._off_gpus:
            names = [gpu.device_kind for gpu in gpu_devices()]
        else:  # without an NVIDIA driver there is no GPU to list, and no second JAX start-up to pay
            names = gpu_names_apart() if driver else []
        for index, name in enumerate(names):
            devices.append(Device(DeviceRef(DeviceKind.GPU, index), name, 0, driver))
        return RunnerInfo(
            framework=self.framework,
            framework_version=jax.__version__,
            python_version=python_version(),
            devices=tuple(devices),
            options={
                "jaxlib_version": jaxlib.__version__,
                "flax_version": flax.__version__,
                "optax_version": optax.__version__,
                "xla_python_client_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "default"),
                # Flags change what XLA compiles (NVIDIA's image sets its own): part of what was measured.
                "xla_flags": os.environ.get("XLA_FLAGS", ""),
            },
        )

    def capabilities(self, device: Device) -> Capabilities:
        gpu = device.ref.kind is DeviceKind.GPU
        return Capabilities(
            # TF32 and fp16 mixed precision are GPU features; bf16 runs on both.
            precisions=frozenset(Precision) if gpu else frozenset({Precision.FP32, Precision.AMP_BF16}),
            # Flax's convolutions take NHWC; XLA may still pick another layout on a GPU.
            layouts=frozenset({Layout.CHANNELS_LAST}),
            # Eager: the step's operations dispatched one by one; XLA: the step jitted (JAX's usual way).
            compilations=frozenset({Compilation.EAGER, Compilation.XLA}),
            default_compilation=Compilation.XLA,
            cudnn_autotune=frozenset({self.settings.cudnn_autotune}) if gpu else frozenset({Switch.OFF}),
            # Out of the box JAX runs float32 matmuls as TF32 on GPUs and XLA autotunes its GPU kernels.
            native_tf32=Tf32.ON,
            native_cudnn_autotune=Switch.ON,
            intra_op_threads=self.settings.intra_op_threads,
            inter_op_threads=self.settings.inter_op_threads,
            # Data parallel in one process over this runner's devices (jit over a device mesh); not across runners.
            strategies=frozenset({Strategy.SINGLE, Strategy.MIRRORED}),
            parallel_strategy=Strategy.MIRRORED,
        )

    def build(self, config: RunConfig) -> Workload:
        return JaxWorkload(config)

    def inspect(self, config: ModelConfig) -> ModelReport:
        # Shapes only: nothing is computed, so no device is needed.
        started = time.perf_counter()
        module = build_module(config)
        sample = sample_spec(config, 1)
        variables = variable_shapes(module, sample)
        build_time_s = time.perf_counter() - started

        def forward(variables, x):
            return module.apply(variables, x, train=False)

        output = jax.eval_shape(forward, variables, sample)
        return ModelReport(
            parameter_count=count_parameters(variables["params"]),
            forward_flops=forward_flops(forward, variables, sample),
            flops_method=FLOPS_METHOD,
            output_shape=tuple(output.shape[1:]),
            build_time_s=build_time_s,
        )

    def compare_reference(self, config: ModelConfig, arrays: Mapping[str, np.ndarray]) -> ReferenceReport:
        weights = {key.removeprefix("weights/"): value for key, value in arrays.items() if key.startswith("weights/")}
        inputs = arrays["input"]
        if config.model.input_kind is InputKind.IMAGE:
            inputs = inputs.transpose(0, 2, 3, 1)  # stored in PyTorch's NCHW
        reference_tokens = expected_tokens(config, arrays) if config.model.generates else None
        module = build_module(config)
        cpu = jax.devices("cpu")[0]
        shapes = variable_shapes(module, sample_spec(config, 1))
        with jax.default_device(cpu), jax.default_matmul_precision(STRICT_FP32):
            variables = load_torch_weights(shapes, weights, config.model.name)
            output = np.asarray(jax.jit(lambda v, x: module.apply(v, x, train=False))(variables, jnp.asarray(inputs)))
            report = compared_outputs(output, arrays["output"], REFERENCE_TOLERANCE)
            if reference_tokens is None:
                return report
            # In a lower precision the same parameters (float32 as a run keeps them), computing in its dtype.
            compute = build_module(config, COMPUTE_DTYPES.get(config.token_precision, jnp.float32))
            tokens = parity_tokens(compute, variables, inputs, config.model, cpu)
        return compared_tokens(report, config, tokens, reference_tokens)

    def is_out_of_memory(self, exc: BaseException) -> bool:
        # XLA reports a failed allocation as a JaxRuntimeError: RESOURCE_EXHAUSTED, or INTERNAL when it fails
        # while dispatching a computation ("Out of memory allocating N bytes").
        if isinstance(exc, MemoryError):
            return True
        message = str(exc)
        return isinstance(exc, jax.errors.JaxRuntimeError) and (
            "RESOURCE_EXHAUSTED" in message or "Out of memory" in message
        )

    def stay_off_gpus(self) -> None:
        # JAX starts no backend but the CPU's here; the worker processes, started afresh, see every GPU.
        jax.config.update("jax_platforms", "cpu")
        self._off_gpus = True

    def release_memory(self) -> None:
        # Compiled steps hold no buffers, but their cache would grow with every new shape.
        jax.clear_caches()
