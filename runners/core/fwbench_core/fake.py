"""A runner backend with no framework: steps sleep for a set time.

It serves the catalog's models so that the conformance suite, the core's unit
tests and harness-overhead checks run without PyTorch or TensorFlow. Run it
with `python -m fwbench_core.fake --address 127.0.0.1:0`.
"""

from __future__ import annotations

import itertools
import math
import os
import socket
import time
from collections.abc import Mapping

import numpy as np

from .backend import Backend, MemoryReading, Workload
from .builtin import MODEL_SPECS
from .choices import Compilation, Layout, Precision, Strategy, Switch
from .devices import Capabilities, Device, RunnerInfo, RunnerSettings
from .errors import Aborted, Unavailable
from .models import ModelConfig, ModelReport, ReferenceReport
from .references import PARITY_NEW_TOKENS, compared_outputs, compared_tokens, expected_tokens, reference_tokens
from .registry import ModelRegistry
from .runs import RunConfig, WorkerPlace
from .sysinfo import cpu_device, python_version

STEP_TIME_ENV = "FWBENCH_FAKE_STEP_TIME_S"
# Step times for runs with a given setting, "layout=channels_first:0.001,compilation=eager:0.003" (the first that
# matches the run wins): how tests plant the fastest settings for a search to find.
SETTING_STEP_TIME_ENV = "FWBENCH_FAKE_STEP_TIME_BY_SETTING"
# A fraction (0.01): this process's runs take their step time alternately that much longer and shorter, first
# longer. Sleeping alone gives runs a spread that varies with the host; tests that need a close difference to stay
# unsettled for a few runs plant one that does not.
RUN_SPREAD_ENV = "FWBENCH_FAKE_RUN_SPREAD"
# The distributed rank whose steps hang (take HANG_S): how tests make a rank go silent.
HANG_RANK_ENV = "FWBENCH_FAKE_HANG_RANK"
FRAMEWORK_ENV = "FWBENCH_FAKE_FRAMEWORK"
FRAMEWORK_VERSION_ENV = "FWBENCH_FAKE_FRAMEWORK_VERSION"
HANG_S = 3600.0
# A generation request's decode step sleeps this fraction of the step time (its prefill sleeps the step time): a
# token costs less than a prompt.
DECODE_STEP_FRACTION = 0.25
# A run whose inputs would exceed this many bytes fails as out of memory.
MEMORY_LIMIT_BYTES = 1 << 34
# The same sums in the same process: anything but float32 rounding is a wrong reference.
REFERENCE_TOLERANCE = 1e-6

FAKE_MODELS: ModelRegistry = ModelRegistry("fake")
for _name in MODEL_SPECS:
    FAKE_MODELS.register(_name)(lambda: None)


def fake_parameter_count(model_name: str) -> int:
    """A stable made-up count: the fake has no weights."""
    return sum(map(ord, model_name)) * 1000


def fake_token(seed: int, prompt: int, position: int, vocab_size: int) -> int:
    """The fake's greedy choice: a token made from the inputs' seed, the prompt and the position alone, so that two
    fake runners generate the same tokens."""
    return (seed * 7919 + prompt * 104729 + position * 31) % max(vocab_size, 2)


def fake_tokens(seed: int, prompts: int, count: int, vocab_size: int) -> np.ndarray:
    return np.array([[fake_token(seed, p, i, vocab_size) for i in range(count)] for p in range(prompts)], np.int64)


def fake_output(inputs: np.ndarray, outputs: int) -> np.ndarray:
    """The fake's network: each sample's mean, repeated once per output."""
    means = inputs.reshape(len(inputs), -1).astype(np.float32).mean(axis=1, keepdims=True)
    return np.repeat(means, outputs, axis=1)


class SocketSum:
    """The fake's collective, for distributed runs without a framework: rank 0 hosts a socket at the
    rendezvous and sums every rank's votes; the others connect to it. Only the fake needs one."""

    def __init__(self, place: WorkerPlace, timeout_s: float) -> None:
        self.place = place
        host, port = place.rendezvous.rsplit(":", 1)
        give_up_s = time.monotonic() + timeout_s
        if place.rank == 0:
            with socket.create_server((host, int(port))) as server:
                server.settimeout(timeout_s)
                try:
                    self.peers = [server.accept()[0].makefile("rw") for _ in range(place.world_size - 1)]
                except TimeoutError:
                    raise Unavailable(
                        f"rendezvous at {place.rendezvous}: not every rank joined within {timeout_s:g} s"
                    ) from None
            return
        while True:
            try:
                self.peers = [socket.create_connection((host, int(port)), timeout=timeout_s).makefile("rw")]
                return
            except OSError:
                if time.monotonic() > give_up_s:
                    raise Unavailable(
                        f"rendezvous at {place.rendezvous} did not answer within {timeout_s:g} s"
                    ) from None
                time.sleep(0.05)

    def sum(self, votes: tuple[int, ...]) -> tuple[int, ...]:
        if self.place.rank:
            self._send(self.peers[0], votes)
            return self._read(self.peers[0])
        total = [sum(column) for column in zip(votes, *(self._read(peer) for peer in self.peers))]
        for peer in self.peers:
            self._send(peer, total)
        return tuple(total)

    @staticmethod
    def _send(peer, votes) -> None:
        peer.write(",".join(map(str, votes)) + "\n")
        peer.flush()

    def _read(self, peer) -> tuple[int, ...]:
        line = peer.readline()
        if not line:
            raise Aborted(f"rank {self.place.rank}: a peer rank left the job")
        return tuple(map(int, line.split(",")))

    def close(self) -> None:
        for peer in self.peers:
            peer.close()


_runs_planted = itertools.count()


def step_time_for(config: RunConfig, default_s: float) -> float:
    """The step time SETTING_STEP_TIME_ENV plants for this run's settings, else `default_s`; then this run's turn
    of RUN_SPREAD_ENV's spread."""
    planted_s = default_s
    for entry in filter(None, os.environ.get(SETTING_STEP_TIME_ENV, "").split(",")):
        setting, _, seconds = entry.partition(":")
        field_name, _, value = setting.partition("=")
        resolved = getattr(config, field_name.strip(), None)
        if resolved is not None and getattr(resolved, "value", resolved) == value.strip():
            planted_s = float(seconds)
            break
    spread = float(os.environ.get(RUN_SPREAD_ENV, "0"))
    sign = 1 if next(_runs_planted) % 2 == 0 else -1
    return planted_s * (1 + sign * spread)


def _input_bytes(config: RunConfig) -> int:
    input_bytes = 4 * config.batch_size * math.prod(config.input_shape)
    if input_bytes > MEMORY_LIMIT_BYTES:
        raise MemoryError(f"fake device: cannot allocate {input_bytes} bytes for the inputs")
    return input_bytes


class FakeWorkload(Workload):
    def __init__(self, config: RunConfig, step_time_s: float) -> None:
        self.peak_bytes = _input_bytes(config)
        self.parameter_count = fake_parameter_count(config.model.name)
        self.default_step_time_s = step_time_s
        self.step_time_s = step_time_for(config, step_time_s)
        self.steps_taken = 0  # the fake's state: what a reused workload must start from afresh
        self.vocab_size, self.batch_size, self.data_seed = config.model.vocab_size, config.batch_size, config.data_seed
        self.tokens: list[list[int]] = []
        self.collective = SocketSum(config.place, config.distributed_timeout_s) if config.place else None
        if config.place and config.place.rank == int(os.environ.get(HANG_RANK_ENV, "-1")):
            self.step_time_s = HANG_S

    def agree(self, votes: tuple[int, ...]) -> tuple[int, ...]:
        return self.collective.sum(votes) if self.collective else votes

    def close(self) -> None:
        if self.collective:
            self.collective.close()

    def reuse(self, config: RunConfig) -> bool:
        self.peak_bytes = _input_bytes(config)
        self.step_time_s = step_time_for(config, self.default_step_time_s)
        self.steps_taken = 0
        return True

    def train_step(self) -> None:
        self.steps_taken += 1
        time.sleep(self.step_time_s)

    def infer_step(self) -> None:
        self.steps_taken += 1
        time.sleep(self.step_time_s)

    def prefill(self) -> None:
        self.steps_taken += 1
        self.tokens = [[] for _ in range(self.batch_size)]
        time.sleep(self.step_time_s)
        self._choose_tokens()

    def decode_step(self) -> None:
        time.sleep(self.step_time_s * DECODE_STEP_FRACTION)
        self._choose_tokens()

    def _choose_tokens(self) -> None:
        for prompt, tokens in enumerate(self.tokens):
            tokens.append(fake_token(self.data_seed, prompt, len(tokens), self.vocab_size))

    def generated_tokens(self) -> list[list[int]]:
        return [list(tokens) for tokens in self.tokens]

    def synchronize(self) -> None:
        pass

    def peak_memory(self) -> MemoryReading:
        return MemoryReading(self.peak_bytes, "fake: size of the inputs")


class FakeBackend(Backend):
    framework = "fake"
    models = FAKE_MODELS

    def __init__(self, settings: RunnerSettings | None = None, step_time_s: float | None = None) -> None:
        self.settings = settings or RunnerSettings(1, 1)
        self.step_time_s = float(os.environ.get(STEP_TIME_ENV, "0.002")) if step_time_s is None else step_time_s
        self.builds = 0  # workloads built, not reused: what tests of reuse count

    def runner_info(self) -> RunnerInfo:
        # Which framework and version it reports: how tests stand two versions of one framework side by side.
        return RunnerInfo(
            os.environ.get(FRAMEWORK_ENV, "fake"),
            os.environ.get(FRAMEWORK_VERSION_ENV, "0.0"),
            python_version(),
            (cpu_device(),),
        )

    def capabilities(self, device: Device) -> Capabilities:
        return Capabilities(
            precisions=frozenset({Precision.FP32}),
            layouts=frozenset(Layout),
            compilations=frozenset({Compilation.EAGER}),
            default_compilation=Compilation.EAGER,
            # As PyTorch's: so that the NATIVE profile is seen to differ from EQUAL on the fake runner too.
            native_layout=Layout.CHANNELS_FIRST,
            cudnn_autotune=frozenset({Switch.OFF}),
            intra_op_threads=self.settings.intra_op_threads,
            inter_op_threads=self.settings.inter_op_threads,
            strategies=frozenset({Strategy.SINGLE, Strategy.DDP}),
            parallel_strategy=Strategy.DDP,
            multi_node_strategy=Strategy.DDP,
        )

    def worker_processes(self, config: RunConfig) -> int:
        return len(config.run_devices) if config.strategy is Strategy.DDP else 1

    def build(self, config: RunConfig) -> Workload:
        self.builds += 1
        return FakeWorkload(config, self.step_time_s)

    def inspect(self, config: ModelConfig) -> ModelReport:
        parameters = fake_parameter_count(config.model.name)
        return ModelReport(
            parameters, 2 * parameters, "fake: twice the made-up parameter count", (config.head.outputs,), 0.0
        )

    def export_reference(self, config: ModelConfig) -> tuple[dict[str, np.ndarray], ReferenceReport]:
        shape = (config.batch_size, *config.input_shape)
        random = np.random.default_rng(config.seed)
        inputs: np.ndarray  # token ids or an image's floats
        if config.model.vocab_size:
            inputs = random.integers(0, config.model.vocab_size, shape)
        else:
            inputs = random.standard_normal(shape, dtype=np.float32)
        output = fake_output(inputs, config.head.outputs)
        arrays = {"input": inputs, "output": output}
        if config.model.generates:
            tokens = fake_tokens(config.seed, len(inputs), PARITY_NEW_TOKENS, config.model.vocab_size)
            arrays.update(reference_tokens(config, tokens))
        return arrays, ReferenceReport(output_shape=output.shape)

    def compare_reference(self, config: ModelConfig, arrays: Mapping[str, np.ndarray]) -> ReferenceReport:
        output, expected = fake_output(arrays["input"], config.head.outputs), arrays["output"]
        report = compared_outputs(output, expected, REFERENCE_TOLERANCE)
        if config.model.generates:
            tokens = fake_tokens(config.seed, len(arrays["input"]), PARITY_NEW_TOKENS, config.model.vocab_size)
            report = compared_tokens(report, config, tokens, expected_tokens(config, arrays))
        return report


if __name__ == "__main__":
    from .server import serve

    serve(FakeBackend)
