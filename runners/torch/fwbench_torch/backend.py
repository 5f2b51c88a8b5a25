"""The PyTorch side of a run: model, optimizer, random inputs, steps, synchronization."""

from __future__ import annotations

import re
import time

import numpy as np
import torch
import torchvision
from torch.utils.flop_counter import FlopCounterMode

from fwbench_core.backend import Backend, MemoryReading, Workload, process_peak_memory
from fwbench_core.choices import Compilation, DeviceKind, Layout, Mode, Objective, Precision, Strategy, Switch, Tf32
from fwbench_core.devices import Capabilities, CompilationLimits, Device, DeviceRef, RunnerInfo, RunnerSettings
from fwbench_core.errors import InvalidArgument, RunnerError
from fwbench_core.fairness import LEARNING_RATE, MOMENTUM
from fwbench_core.models import ModelConfig, ModelReport, ReferenceReport
from fwbench_core.onnx_runtime import onnxruntime_limits
from fwbench_core.references import PARITY_NEW_TOKENS, parity_prompt_length, reference_tokens
from fwbench_core.runs import RunConfig
from fwbench_core.sysinfo import cpu_device, gpu_driver_version, python_version

from .compilation import torchscript, torchscript_note
from .generation import Generation, generate
from .models import MODELS
from .objectives import loss, random_inputs, random_targets
from .onnx_runtime import onnxruntime_workload
from .parallel import all_sum, join_process_group, leave_process_group, peer_failure, wrap

FLOPS_METHOD = (
    "torch.utils.flop_counter.FlopCounterMode, batch 1, oneDNN off so recurrent layers decompose into counted matmuls"
)


def torch_device(device: Device) -> torch.device:
    return torch.device("cuda", device.ref.index) if device.ref.kind is DeviceKind.GPU else torch.device("cpu")


AUTOCAST_DTYPES = {Precision.AMP_FP16: torch.float16, Precision.AMP_BF16: torch.bfloat16}


def apply_settings(config: RunConfig) -> None:
    """Every process-wide switch a run depends on, set explicitly for each run."""
    # TF32 as the run resolved it (strict fp32 turns it off for matmuls and convolutions alike), set every run: a
    # reused process may hold the last run's.
    torch.backends.cuda.matmul.allow_tf32 = config.tf32 is Tf32.ON
    torch.backends.cudnn.allow_tf32 = config.tf32 in (Tf32.ON, Tf32.CONVOLUTIONS)
    torch.backends.cudnn.benchmark = config.cudnn_autotune is Switch.ON
    torch.set_num_threads(config.intra_op_threads)


def count_trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build_model(config: RunConfig | ModelConfig) -> torch.nn.Module:
    return MODELS.builder(config.model)(config.model, config.input_shape, config.model_options)


def _onednn_version() -> str:
    """The oneDNN (MKL-DNN) torch was built with, which does its CPU convolutions; torch says it only in its
    build summary."""
    found = re.search(r"(?:oneDNN\)|MKL-DNN) v([0-9][\w.]*)", torch.__config__.show())
    return found.group(1) if found else ""


def parity_prompts(inputs: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    """The prompts a reference's tokens are generated from: its input, cut where the tokens would pass the model's
    longest sequence (a reference at gpt2_small's default 1024 tokens: its first 1016)."""
    return inputs[:, : parity_prompt_length(config.model, inputs.shape[1])]


class TorchWorkload(Workload):
    def __init__(self, config: RunConfig, script_failures: dict[tuple, str]) -> None:
        # Under DDP this process's own device; under DataParallel the first of its GPUs, where batches start.
        self.device = torch_device(config.process_devices[0])
        self.is_gpu = self.device.type == "cuda"
        self.head = config.head
        self.in_process_group = config.strategy is Strategy.DDP
        if self.in_process_group:
            join_process_group(config, self.device)
        torch.manual_seed(config.seed)  # the same weights on every rank
        apply_settings(config)
        if self.in_process_group and not self.is_gpu:
            # The CPU workers share the run's threads rather than each taking them all.
            torch.set_num_threads(max(1, config.intra_op_threads // len(config.run_devices)))
        # DataParallel replicates the model on every GPU of the run; the peak is the fullest one.
        self.gpus = [torch_device(d) for d in config.process_devices] if self.is_gpu else []
        for gpu in self.gpus:
            torch.cuda.reset_peak_memory_stats(gpu)
        self.memory_format = torch.channels_last if config.layout is Layout.CHANNELS_LAST else torch.contiguous_format
        model = build_model(config).to(self.device, memory_format=self.memory_format)
        self.parameter_count = count_trainable(model)
        # torch.compile would compile again for a new batch size, or mark the batch dimension dynamic and
        # compile code for any size: either way not what a fresh build measures; a trace may hold the batch size
        # too. Eager only, one device.
        self.reusable = bool(config.reuse_key) and not config.distributed and config.compilation is Compilation.EAGER
        # TorchScript's profiling executor records the shapes of the first call and optimizes the graph for them.
        self.first_step_traces = config.compilation in (Compilation.TORCH_COMPILE, Compilation.TORCHSCRIPT)
        if config.data_seed != config.seed:
            torch.manual_seed(config.data_seed)  # inputs of their own seed; from the seed, they follow the weights
        if self.reusable:
            # What a reuse restores: the initial weights (a host copy, taking no device memory from the run),
            # and the generators as they stood for the inputs.
            self.initial_state = {
                name: value.detach().to("cpu", copy=True) for name, value in model.state_dict().items()
            }
            self.generators_after_build = self._generators()
        if config.place is not None:
            torch.manual_seed(config.data_seed + config.place.rank)  # different inputs on every rank
        self.autocast = torch.autocast(
            self.device.type, dtype=AUTOCAST_DTYPES.get(config.precision), enabled=config.precision in AUTOCAST_DTYPES
        )
        if config.mode is Mode.TRAIN:
            model.train()
        else:
            model.eval()
        self.inputs = self._inputs(config)
        # TorchScript shares a class's optimized graph between the modules of that class, and one optimized while
        # training saves tensors for backward, which inference mode's tensors refuse: no_grad has none.
        self.no_autograd = torch.no_grad if config.compilation is Compilation.TORCHSCRIPT else torch.inference_mode
        if config.compilation is Compilation.TORCHSCRIPT:
            # Trained in place: a scripted or traced module holds the original's parameters.
            key = (config.model.name, tuple(sorted(config.model_options.items())))
            model, failure = torchscript(model, self.inputs, script_failures.get(key))
            if failure is not None:
                script_failures[key] = failure
            self.notes = (torchscript_note(failure),)
        self.module = model
        model = wrap(model, config, self.device)
        self.model = torch.compile(model) if config.compilation is Compilation.TORCH_COMPILE else model
        self._start(config)
        self.generation = self._generation(config)
        # On a GPU each step is also timed by CUDA events, to cross-check the wall clock.
        self.events = (
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if self.is_gpu else None
        )

    def _inputs(self, config: RunConfig) -> torch.Tensor:
        """Inputs for `config`'s batch size, from the generators as they stand."""
        inputs = random_inputs(config.model, config.samples_per_step, config.input_shape, self.device)
        return inputs.contiguous(memory_format=self.memory_format) if config.layout is not None else inputs

    def _start(self, config: RunConfig) -> None:
        """A new optimizer and targets for the inputs, from the generators as they stand."""
        # fp16 gradients underflow without loss scaling; bf16 needs none.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=config.precision is Precision.AMP_FP16)
        if config.mode is Mode.TRAIN:
            self.optimizer = torch.optim.SGD(self.module.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
            self.targets = random_targets(self.head, self._output_like())

    def _generation(self, config: RunConfig) -> Generation | None:
        """Mode.GENERATE: the inputs as prompts, the cache in autocast's dtype where the run autocasts."""
        if config.mode is not Mode.GENERATE:
            return None
        compiled = config.compilation is Compilation.TORCH_COMPILE
        cache_dtype = AUTOCAST_DTYPES.get(config.precision)
        return Generation(self.module, self.inputs, config.new_tokens, cache_dtype, compiled)

    def _generators(self) -> tuple[torch.Tensor, ...]:
        return (torch.get_rng_state(), *(torch.cuda.get_rng_state(self.device) for _ in self.gpus))

    def reuse(self, config: RunConfig) -> bool:
        if not self.reusable:
            return False
        # Freed before the new batch's are made.
        self.inputs = self.targets = self.optimizer = self.generation = None
        apply_settings(config)
        for gpu in self.gpus:
            torch.cuda.reset_peak_memory_stats(gpu)
        self.module.load_state_dict(self.initial_state)
        for parameter in self.module.parameters():
            parameter.grad = None
        cpu_state, *gpu_state = self.generators_after_build
        torch.set_rng_state(cpu_state)
        for state in gpu_state:
            torch.cuda.set_rng_state(state, self.device)
        self.inputs = self._inputs(config)
        self._start(config)
        self.generation = self._generation(config)
        return True

    def _output_like(self) -> torch.Tensor:
        """Targets need the output's shape; only CTC's (frames) is not known without a forward pass."""
        if self.head.objective is not Objective.CTC:
            batch = self.inputs.shape[0]
            shape = (batch,) if self.head.objective is Objective.CLASSIFY else (batch, self.inputs.shape[1])
            return torch.empty(shape, device=self.device)
        with torch.no_grad(), self.autocast:
            return self.model(self.inputs)

    def train_step(self) -> None:
        if self.events:
            self.events[0].record()
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast:
            value = loss(self.head, self.model(self.inputs).float(), self.targets)
        self.scaler.scale(value).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.events:
            self.events[1].record()

    def infer_step(self) -> None:
        if self.events:
            self.events[0].record()
        with self.no_autograd(), self.autocast:
            self.model(self.inputs)
        if self.events:
            self.events[1].record()

    def prefill(self) -> None:
        with self.no_autograd(), self.autocast:
            self.generation.prefill()

    def decode_step(self) -> None:
        with self.no_autograd(), self.autocast:
            self.generation.decode_step()

    def generated_tokens(self) -> list[list[int]]:
        return self.generation.tokens().tolist()

    def synchronize(self) -> None:
        for gpu in self.gpus:
            torch.cuda.synchronize(gpu)

    def device_time_s(self) -> float | None:
        return self.events[0].elapsed_time(self.events[1]) / 1e3 if self.events else None

    def peak_memory(self) -> MemoryReading:
        if self.is_gpu:
            peak_bytes = max(torch.cuda.max_memory_allocated(gpu) for gpu in self.gpus)
            return MemoryReading(peak_bytes, "torch.cuda.max_memory_allocated")
        return process_peak_memory()

    def agree(self, votes: tuple[int, ...]) -> tuple[int, ...]:
        return all_sum(votes, self.device) if self.in_process_group else votes

    def close(self) -> None:
        in_process_group = self.in_process_group
        self.__dict__.clear()
        if in_process_group:
            leave_process_group()


class TorchBackend(Backend):
    framework = "torch"
    models = MODELS

    def __init__(self, settings: RunnerSettings) -> None:
        self.settings = settings
        # Why torch.jit.script failed, per model and options, in this process (see torchscript).
        self.script_failures: dict[tuple, str] = {}
        # The inter-op pool can only be sized before it first runs work.
        torch.set_num_interop_threads(settings.inter_op_threads)
        torch.set_num_threads(settings.intra_op_threads)

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
            options={"torchvision_version": torchvision.__version__, "onednn_version": _onednn_version()},
        )

    def capabilities(self, device: Device) -> Capabilities:
        gpu = device.ref.kind is DeviceKind.GPU
        return Capabilities(
            # TF32 and fp16 autocast are GPU features; bf16 autocast runs on both.
            precisions=frozenset(Precision) if gpu else frozenset({Precision.FP32, Precision.AMP_BF16}),
            layouts=frozenset(Layout),
            compilations=frozenset(
                {Compilation.EAGER, Compilation.TORCH_COMPILE, Compilation.TORCHSCRIPT, Compilation.ONNXRUNTIME}
            ),
            default_compilation=Compilation.EAGER,
            # PyTorch's tensors are NCHW unless a user converts them (memory_format=torch.channels_last).
            native_layout=Layout.CHANNELS_FIRST,
            # Out of the box, PyTorch lets cuDNN's convolutions use TF32 but not matmuls, and does not autotune.
            native_tf32=Tf32.CONVOLUTIONS,
            native_cudnn_autotune=Switch.OFF,
            # torch.onnx.export's graph takes NCHW images.
            compilation_limits={
                Compilation.ONNXRUNTIME: onnxruntime_limits(Layout.CHANNELS_FIRST),
                # A scripted or traced forward takes tokens alone, not the caches a generation passes.
                Compilation.TORCHSCRIPT: CompilationLimits(modes=frozenset({Mode.TRAIN, Mode.INFER})),
            },
            cudnn_autotune=frozenset(Switch) if gpu else frozenset({Switch.OFF}),
            intra_op_threads=self.settings.intra_op_threads,
            inter_op_threads=self.settings.inter_op_threads,
            intra_op_threads_adjustable=True,
            # DataParallel is a GPU feature; DDP runs gloo CPU workers as well as NCCL GPU ones.
            strategies=frozenset(
                {Strategy.SINGLE, Strategy.DP, Strategy.DDP} if gpu else {Strategy.SINGLE, Strategy.DDP}
            ),
            parallel_strategy=Strategy.DDP,
            multi_node_strategy=Strategy.DDP,
        )

    def worker_processes(self, config: RunConfig) -> int:
        return len(config.run_devices) if config.strategy is Strategy.DDP else 1

    def build(self, config: RunConfig) -> Workload:
        if config.compilation is Compilation.ONNXRUNTIME:
            return onnxruntime_workload(config, build_model)
        return TorchWorkload(config, self.script_failures)

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

    def export_reference(self, config: ModelConfig) -> tuple[dict[str, np.ndarray], ReferenceReport]:
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
        arrays = {"input": inputs.numpy(), "output": output.numpy(), **weights}
        if config.model.generates:
            dtype = AUTOCAST_DTYPES.get(config.token_precision)
            tokens = generate(model, parity_prompts(inputs, config), PARITY_NEW_TOKENS, dtype)
            arrays.update(reference_tokens(config, tokens.numpy()))
        return arrays, ReferenceReport(output_shape=tuple(output.shape))

    def user_error(self, exc: BaseException) -> RunnerError | None:
        failure = peer_failure(exc)
        if failure is not None:
            return failure
        if isinstance(exc, ValueError) and "Expected more than 1 value per channel when training" in str(exc):
            return InvalidArgument(
                "batch_size and input_shape leave one value per channel in a BatchNorm layer, which PyTorch "
                "cannot normalise while training; use batch_size 2 or more, or a larger input_shape"
            )
        return None

    def is_out_of_memory(self, exc: BaseException) -> bool:
        if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
            return True
        # The CPU allocator reports a failed allocation as a plain RuntimeError.
        return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)

    def release_memory(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
