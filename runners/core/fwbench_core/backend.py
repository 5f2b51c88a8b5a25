"""What a framework runner supplies: building a model, its steps, and device synchronization.

Everything else (server, validation, timing, statistics, errors) is the core's.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .devices import Capabilities, Device, RunnerInfo
from .errors import FailedPrecondition, RunnerError
from .models import ModelConfig, ModelReport, ReferenceReport
from .registry import ModelRegistry
from .runs import RunConfig
from .sysinfo import process_peak_rss_bytes


@dataclass(frozen=True)
class MemoryReading:
    """Peak memory of a run, and where it was read; bytes is None where it cannot be read."""

    bytes: int | None
    source: str


def process_peak_memory(process: str = "runner") -> MemoryReading:
    """A CPU run's peak: the resident set of the whole process it ran in, not of the run alone."""
    return MemoryReading(process_peak_rss_bytes(), f"process peak RSS (whole {process} process, CPU)")


class Workload(abc.ABC):
    """One model with its optimizer and random inputs, built on the run's device."""

    parameter_count: int
    # The first step traces or compiles the step function for its input shape (a graph, XLA, torch.compile):
    # the run reports it, as that first warm-up step is then far longer than the others.
    first_step_traces: bool = False
    # How the workload was built where the configuration leaves a choice (e.g. "torchscript (scripted)"): the
    # run's summary lists them among its flags.
    notes: tuple[str, ...] = ()

    def reuse(self, config: RunConfig) -> bool:
        """Make this workload what a fresh build for `config` would be, without building: `config` differs from
        the one it was built for only in batch size and measurement settings (RunConfig.reuses). Weights,
        optimizer state and random generators as the seed gives them, inputs and targets for the batch size.
        False where it cannot (the default): the core then closes it and builds afresh."""
        return False

    @abc.abstractmethod
    def train_step(self) -> None:
        """Forward, loss, backward, optimizer step. May return before the device is done."""

    @abc.abstractmethod
    def infer_step(self) -> None:
        """Forward without gradients. May return before the device is done."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Return only once the device has finished every step issued so far."""

    @abc.abstractmethod
    def peak_memory(self) -> MemoryReading:
        """Peak memory since the workload was built."""

    def prefill(self) -> None:
        """Mode.GENERATE: start a request afresh: the batch's prompts through the model, filling the key-value cache
        from its start, and each prompt's first new token chosen (the largest logit). May return before the device
        is done. Only a workload of a model that declares `generates` is asked."""
        raise FailedPrecondition(f"{type(self).__name__} does not generate: its builder provides no prefill")

    def decode_step(self) -> None:
        """Mode.GENERATE: one token more for every prompt, from the cache: the token chosen last fed back at the next
        position, its keys and values added to the cache, the next token chosen greedily. May return before the
        device is done."""
        raise FailedPrecondition(f"{type(self).__name__} does not generate: its builder provides no decode step")

    def generated_tokens(self) -> list[list[int]]:
        """Mode.GENERATE: the tokens the last request chose, per prompt, in order (read after synchronize)."""
        raise FailedPrecondition(f"{type(self).__name__} does not generate: it keeps no generated tokens")

    def device_time_s(self) -> float | None:
        """The last step as the device timed it (CUDA events), after synchronize; None where it cannot."""
        return None

    def agree(self, votes: tuple[int, ...]) -> tuple[int, ...]:
        """Each vote summed over every worker process of a distributed run (config.place.world_size of
        them), by a collective that runs between steps, outside their timings: how the ranks decide
        together when a phase ends or the run is cancelled. A one-process run: the votes themselves."""
        return votes

    def close(self) -> None:
        """Drop references to device memory (and leave a distributed run's process group); the core
        collects garbage afterwards."""


class Backend(abc.ABC):
    framework: str
    models: ModelRegistry

    @abc.abstractmethod
    def runner_info(self) -> RunnerInfo:
        """Versions and devices, read once at start-up."""

    @abc.abstractmethod
    def capabilities(self, device: Device) -> Capabilities:
        """The settings this runner honours exactly on `device`."""

    @abc.abstractmethod
    def build(self, config: RunConfig) -> Workload:
        """Seed, build the model, optimizer and random inputs on the device, ready to step."""

    @abc.abstractmethod
    def inspect(self, config: ModelConfig) -> ModelReport:
        """Build the model on the CPU; count its trainable parameters and per-sample forward FLOPs
        (2 x multiply-accumulates of convolutions and matrix products, nothing else) and its output shape."""

    def export_reference(self, config: ModelConfig) -> tuple[dict[str, np.ndarray], ReferenceReport]:
        """Build the model on the CPU and run a random input: the arrays to store (`weights/<PyTorch parameter
        name>`, `input` in PyTorch's layout, `output`) and the report. The core writes the file."""
        raise FailedPrecondition(f"the {self.framework} runner cannot export reference weights")

    def compare_reference(self, config: ModelConfig, arrays: Mapping[str, np.ndarray]) -> ReferenceReport:
        """Load a reference's weights into the model on the CPU, run its input, and compare with its output.
        The core has read the arrays and checked that `input` and `output` are there and that the input fits
        `config`; weights that do not fit the model are an InvalidArgument."""
        raise FailedPrecondition(f"the {self.framework} runner cannot load reference weights")

    def worker_processes(self, config: RunConfig) -> int:
        """Worker processes this runner starts for a distributed run (one per device under DDP)."""
        return 1

    def prepare_worker(self, config: RunConfig) -> None:
        """First thing in a distributed run's fresh worker process, before any framework op: process-wide
        settings the run needs (TensorFlow: logical CPU devices, TF_CONFIG)."""

    def user_error(self, exc: BaseException) -> RunnerError | None:
        """A framework exception that the request caused and the user can fix, as the error to return."""
        return None

    def is_out_of_memory(self, exc: BaseException) -> bool:
        """Whether a framework exception means the device ran out of memory."""
        return isinstance(exc, MemoryError)

    def release_memory(self) -> None:
        """Return cached device memory to the device after a run (allocator caches)."""

    def stay_off_gpus(self) -> None:
        """This process will run nothing on a GPU (worker processes run its GPU runs): keep the framework
        from taking GPU memory or a GPU context here. Called at start-up, before any framework op and
        before runner_info, which still lists the GPUs."""
