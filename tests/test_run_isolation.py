"""Runs in a fresh worker process (--run-isolation), and TensorFlow's memory growth set before any GPU use.

A worker process gives all its device memory back when it exits: TensorFlow's allocator never does
while its process lives. These tests check that a run in a worker looks to the client exactly like a
run in the runner's own process (events, errors and their status codes, cancellation), over real gRPC
on the fake runner (cheap) and the TensorFlow runner on the CPU.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Iterator

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.fakes import Fake

# The session's in-process fake runner steps this long; the worker one matches it, so that their runs compare.
from support.processes import children
from support.runners import FAKE_STEP_TIME_S

from fwbench_aggregator.run import launch
from fwbench_core.backend import MemoryReading
from fwbench_core.choices import DeviceKind, Mode, Phase
from fwbench_core.devices import DeviceRef
from fwbench_core.errors import REASON_KEY, Cancelled, InvalidArgument, RunnerError, reason_for, status_for
from fwbench_core.fake import FakeBackend, FakeWorkload
from fwbench_core.isolation import BlockWorker, ProcessBlocks, RunIsolation
from fwbench_core.runs import RunRequest
from fwbench_core.service import RunnerService
from fwbench_core.timing import Progress, StepBatch

RUN_TIMEOUT_S = 120


# --- the service: a run in a worker process -----------------------------------------------------


class PidWorkload(FakeWorkload):
    def __init__(self, config, step_time_s: float, step_error: BaseException | None) -> None:
        super().__init__(config, step_time_s)
        self.step_error = step_error

    def infer_step(self) -> None:
        if self.step_error is not None:
            raise self.step_error
        super().infer_step()

    def peak_memory(self) -> MemoryReading:
        return MemoryReading(os.getpid(), "the pid of the process that ran the steps")


class PidBackend(FakeBackend):
    """The fake backend, telling which process ran the steps; an error to raise in build or in a step."""

    def __init__(self, error: BaseException | None = None, where: str = "build") -> None:
        super().__init__(step_time_s=0.0)
        self.error = error
        self.where = where

    def build(self, config):
        if self.where == "exit":
            os._exit(3)  # a worker that dies without a word: a crash, or the kernel's OOM killer
        if self.error is not None and self.where == "build":
            raise self.error
        return PidWorkload(config, self.step_time_s, self.error)


def small(**overrides) -> RunRequest:
    fields = dict(
        model="resnet18",
        mode=Mode.INFER,
        batch_size=2,
        input_shape=(3, 32, 32),
        warmup_steps=1,
        measured_steps=2,
        min_measure_s=0.0,
    )
    fields.update(overrides)
    return RunRequest(**fields)


def in_worker(make_backend=PidBackend) -> RunnerService:
    return RunnerService(make_backend(), isolation=RunIsolation.PROCESS, make_backend=make_backend)


def assert_device_free(service: RunnerService) -> None:
    """A new run starts building at once, not queued behind a lock the last run kept."""
    run = service.run(small(), lambda: False)
    try:
        assert next(run) == Progress(Phase.BUILD, 0, 3)
    finally:
        run.close()


@pytest.mark.parametrize(
    "isolation, kind, expected",
    [
        (RunIsolation.THREAD, DeviceKind.GPU, False),
        (RunIsolation.PROCESS, DeviceKind.CPU, True),
        (RunIsolation.PROCESS_ON_GPU, DeviceKind.GPU, True),
        (RunIsolation.PROCESS_ON_GPU, DeviceKind.CPU, False),
        (RunIsolation.PROCESS_PER_2_RUNS, DeviceKind.CPU, True),
        (RunIsolation.PROCESS_PER_2_RUNS, DeviceKind.GPU, True),
    ],
)
def test_which_runs_get_a_worker(isolation, kind, expected):
    assert isolation.in_worker(DeviceRef(kind, 0)) is expected


def test_a_worker_serves_two_cpu_runs_and_a_gpu_run_alone():
    # An idle worker between a GPU's runs would keep device memory from the runner measured next.
    assert RunIsolation.PROCESS_PER_2_RUNS.runs_per_worker(DeviceRef(DeviceKind.CPU, 0)) == 2
    assert RunIsolation.PROCESS_PER_2_RUNS.runs_per_worker(DeviceRef(DeviceKind.GPU, 0)) == 1
    assert RunIsolation.PROCESS.runs_per_worker(DeviceRef(DeviceKind.CPU, 0)) == 1


class FailingBatchBackend(PidBackend):
    """PidBackend whose build fails for batch size 3: a run that ends its worker's block early."""

    def build(self, config):
        if config.batch_size == 3:
            raise ZeroDivisionError("a failed build")
        return super().build(config)


def test_every_run_gets_a_fresh_process_and_the_same_events_as_in_process():
    worker_events = [list(in_worker().run(small(), lambda: False)) for _ in range(2)]
    thread_events = list(RunnerService(PidBackend()).run(small(), lambda: False))
    pids = [events[-1].peak_memory.bytes for events in worker_events]
    assert thread_events[-1].peak_memory.bytes == os.getpid()
    assert os.getpid() not in pids and pids[0] != pids[1]
    for events in worker_events:
        assert [type(e) for e in events] == [type(e) for e in thread_events]
        assert [e for e in events if isinstance(e, Progress)] == [e for e in thread_events if isinstance(e, Progress)]


def test_a_worker_serves_a_block_of_two_runs_then_a_fresh_one_takes_over():
    service = RunnerService(PidBackend(), isolation=RunIsolation.PROCESS_PER_2_RUNS, make_backend=PidBackend)
    pids = [list(service.run(small(), lambda: False))[-1].peak_memory.bytes for _ in range(5)]
    assert os.getpid() not in pids
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4] and pids[0] != pids[4]
    assert service.info.options["run_isolation"] == "process-per-2-runs"


def test_a_run_that_fails_ends_its_block_and_the_next_run_starts_a_fresh_one():
    service = RunnerService(
        FailingBatchBackend(), isolation=RunIsolation.PROCESS_PER_2_RUNS, make_backend=FailingBatchBackend
    )
    first = list(service.run(small(), lambda: False))[-1].peak_memory.bytes
    with pytest.raises(RunnerError, match="a failed build"):
        list(service.run(small(batch_size=3), lambda: False))
    after = [list(service.run(small(), lambda: False))[-1].peak_memory.bytes for _ in range(2)]
    assert after[0] == after[1] != first  # a fresh block of two


def blocked(**overrides) -> RunRequest:
    """A window of a process block: its build kept and continued under the block's name."""
    block = overrides.pop("block")
    return small(process_block=block, reuse_key=block, continue_reuse=True, **overrides)


def pid_of(service: RunnerService, run: RunRequest) -> int:
    summary = list(service.run(run, lambda: False))[-1]
    assert summary.process_id == summary.peak_memory.bytes  # the summary names the process that stepped
    return summary.process_id


def test_windows_of_one_process_block_share_a_worker_and_each_block_gets_a_fresh_one():
    service = RunnerService(PidBackend(), make_backend=PidBackend)
    first = [pid_of(service, blocked(block="k0")) for _ in range(3)]
    second = [pid_of(service, blocked(block="k1")) for _ in range(2)]
    alone = pid_of(service, small())
    assert len(set(first)) == 1 and len(set(second)) == 1 and first[0] != second[0]
    assert os.getpid() not in (*first, *second) and alone == os.getpid()  # a run outside blocks: the runner's thread


def test_a_blocks_last_window_ends_its_worker():
    service = RunnerService(PidBackend(), make_backend=PidBackend)
    pids = [pid_of(service, blocked(block="k0", end_reuse=last)) for last in (False, True)]
    again = pid_of(service, blocked(block="k0"))
    assert pids[0] == pids[1] != again
    assert not os.path.exists(f"/proc/{pids[0]}") or open(f"/proc/{pids[0]}/stat").read().split()[2] == "Z"


def test_every_blocks_worker_is_a_fresh_interpreter_the_runner_spawned():
    # Forked from one server per runner, every block's worker kept that server's offset (docs/verdict.md).
    service = RunnerService(PidBackend(), make_backend=PidBackend)
    for block in ("k0", "k1"):
        worker = pid_of(service, blocked(block=block))
        assert worker in children(os.getpid(), b"spawn_main")  # while it lives: the next block ends it


def test_an_opened_block_runs_in_the_worker_it_started_and_opening_another_ends_it():
    service = RunnerService(PidBackend(), make_backend=PidBackend)
    assert service.open_block("k0") > 0
    opened = pid_of(service, blocked(block="k0"))
    assert pid_of(service, blocked(block="k0")) == opened
    service.open_block("k1")
    assert not os.path.exists(f"/proc/{opened}") or open(f"/proc/{opened}/stat").read().split()[2] == "Z"
    assert pid_of(service, blocked(block="k1")) not in (opened, os.getpid())


def test_a_block_cannot_be_opened_while_its_worker_runs():
    # A CPU window holds the CPU, so that an OpenBlock waits for it; a GPU window does not.
    blocks = ProcessBlocks()
    window = blocks.stream("k0", False, _pids, (2,), lambda: False)
    next(window)
    with pytest.raises(RunnerError, match="'k0' has a run in its worker") as info:
        blocks.open("k1", _pids, (1,), lambda: False)
    assert status_for(info.value)[0].name == "FAILED_PRECONDITION"
    window.close()
    blocks.end()


def test_a_runner_that_starts_no_worker_processes_refuses_to_open_a_block():
    with pytest.raises(RunnerError, match="cannot start worker processes") as info:
        RunnerService(PidBackend()).open_block("k0")
    assert status_for(info.value)[0].name == "FAILED_PRECONDITION"


def test_a_runner_that_starts_no_worker_processes_refuses_a_process_block():
    with pytest.raises(RunnerError, match="cannot start worker processes") as info:
        list(RunnerService(PidBackend()).run(blocked(block="k0"), lambda: False))
    assert status_for(info.value)[0].name == "FAILED_PRECONDITION"


def test_a_window_that_fails_ends_its_block():
    service = RunnerService(FailingBatchBackend(), make_backend=FailingBatchBackend)
    first = pid_of(service, blocked(block="k0"))
    with pytest.raises(RunnerError, match="a failed build"):
        list(service.run(blocked(block="k0", batch_size=3, model="mobilenet_v2"), lambda: False))  # a build: fails
    assert pid_of(service, blocked(block="k0")) != first


def _pids(count: int, stop) -> Iterator[int]:
    for _ in range(count):
        yield os.getpid()


def test_a_run_that_finds_the_block_worker_busy_gets_a_fresh_worker_of_its_own():
    block = BlockWorker()
    first = block.stream(2, _pids, (2,), lambda: False)
    kept = next(first)  # the block's worker is busy with this run
    assert list(block.stream(2, _pids, (1,), lambda: False)) != [kept]
    assert list(first) == [kept]
    assert list(block.stream(2, _pids, (1,), lambda: False)) == [kept]  # the block's second run
    assert list(block.stream(2, _pids, (1,), lambda: False)) != [kept]  # and a fresh block after it


def test_describe_reports_the_isolation():
    assert RunnerService(PidBackend()).info.options["run_isolation"] == "thread"
    assert in_worker().info.options["run_isolation"] == "process"


class GpuShyBackend(FakeBackend):
    def __init__(self) -> None:
        super().__init__(step_time_s=0.0)
        self.kept_off_gpus = False

    def stay_off_gpus(self) -> None:
        self.kept_off_gpus = True

    def runner_info(self):
        self.listed_off_gpus = self.kept_off_gpus
        return super().runner_info()


@pytest.mark.parametrize(
    "isolation, kept_off",
    [(RunIsolation.THREAD, False), (RunIsolation.PROCESS_ON_GPU, True), (RunIsolation.PROCESS, True)],
)
def test_the_server_stays_off_gpus_whose_runs_go_to_workers(isolation, kept_off):
    backend = GpuShyBackend()
    RunnerService(backend, isolation=isolation, make_backend=GpuShyBackend)
    assert backend.kept_off_gpus is kept_off
    # Before the devices are listed: listing them in JAX would open every GPU.
    assert backend.listed_off_gpus is kept_off


def test_isolation_needs_a_backend_factory():
    with pytest.raises(ValueError, match="make_backend"):
        RunnerService(PidBackend(), isolation=RunIsolation.PROCESS_ON_GPU)


@pytest.mark.parametrize(
    "error, where, code",
    [
        (InvalidArgument("batch_size 2 cannot be trained by this model"), "build", grpc.StatusCode.INVALID_ARGUMENT),
        (MemoryError("device full"), "step", grpc.StatusCode.RESOURCE_EXHAUSTED),
        (ZeroDivisionError("oops"), "step", grpc.StatusCode.INTERNAL),
    ],
)
def test_worker_errors_keep_their_status_and_message(error, where, code):
    with pytest.raises(Exception) as in_thread:
        list(RunnerService(PidBackend(error, where)).run(small(), lambda: False))
    service = in_worker(functools.partial(PidBackend, error, where))
    with pytest.raises(RunnerError) as in_process:
        list(service.run(small(), lambda: False))
    assert status_for(in_process.value) == status_for(in_thread.value)
    assert status_for(in_process.value)[0] == code
    assert reason_for(in_process.value) == reason_for(in_thread.value)  # out of memory stays out of memory
    assert_device_free(service)


def test_a_worker_that_dies_is_an_error_and_frees_the_device():
    service = in_worker(functools.partial(PidBackend, where="exit"))
    with pytest.raises(RunnerError, match="exited with code 3 before the run ended"):
        list(service.run(small(), lambda: False))
    assert_device_free(service)


def test_cancelling_stops_the_worker_between_steps():
    cancelled = []
    service = in_worker(functools.partial(FakeBackend, step_time_s=0.01))
    run = service.run(small(measured_steps=10_000), lambda: bool(cancelled))
    with pytest.raises(Cancelled, match="cancelled by the client after"):
        for event in run:
            if isinstance(event, StepBatch):
                cancelled.append(True)
    assert_device_free(service)


def test_abandoned_run_stops_its_worker():
    # gRPC drops the generator of a run whose client went away: closing it must stop the worker.
    service = in_worker(functools.partial(FakeBackend, step_time_s=0.01))
    run = service.run(small(measured_steps=10_000), lambda: False)
    while not isinstance(next(run), StepBatch):
        pass
    run.close()
    assert_device_free(service)


# --- over gRPC: the fake and the TensorFlow runner with --run-isolation process ------------------


def rpc_request(**overrides) -> pb.RunRequest:
    fields = dict(
        model="resnet18",
        mode=pb.MODE_INFER,
        batch_size=2,
        input_shape=[3, 32, 32],
        warmup_steps=1,
        measured_steps=3,
        min_measure_s=0.0,
    )
    fields.update(overrides)
    return pb.RunRequest(**fields)


def outline(events: list[pb.RunEvent]) -> dict:
    """What a run's events say, without its timings."""
    steps = [s for e in events if e.WhichOneof("event") == "steps" for s in e.steps.steps]
    # Waiting for the device (QUEUED) depends on what ran before, not on the run.
    progress = [e.progress.phase for e in events if e.WhichOneof("event") == "progress"]
    phases = [p for p in progress if p != pb.PHASE_QUEUED]
    summary = events[-1].summary
    return {
        "phases": [p for i, p in enumerate(phases) if i == 0 or p != phases[i - 1]],
        "config": [e.config for e in events if e.WhichOneof("event") == "config"],
        "steps": [(s.index, s.warmup) for s in steps],
        "summary": (summary.measured_steps, summary.warmup_steps_run, summary.peak_memory_source),
    }


def rpc_error(stub, request: pb.RunRequest) -> tuple[grpc.StatusCode, str, str]:
    """The status code, message and reason (trailing metadata) of a run that fails."""
    with pytest.raises(grpc.RpcError) as info:
        list(stub.Run(request, timeout=RUN_TIMEOUT_S))
    return info.value.code(), info.value.details(), dict(info.value.trailing_metadata()).get(REASON_KEY, "")


# A run that would take this long unless cancelled; the run after it must end well within it.
CANCELLED_RUN_S = 600
NEXT_RUN_TIMEOUT_S = 60


def cancel_after_first_steps(stub) -> None:
    call = stub.Run(rpc_request(measured_steps=1_000_000, min_measure_s=CANCELLED_RUN_S), timeout=RUN_TIMEOUT_S)
    for event in call:
        if event.WhichOneof("event") == "steps":
            call.cancel()
            break
    assert call.code() == grpc.StatusCode.CANCELLED


def assert_next_run_completes(stub) -> None:
    """The next run (queued at most while the cancelled one stops) finishes: the cancelled run's worker
    stopped between steps and released the device, long before its measuring would have ended."""
    events = list(stub.Run(rpc_request(), timeout=NEXT_RUN_TIMEOUT_S))
    assert events[-1].summary.measured_steps == 3


@pytest.fixture(scope="module")
def fake_in_worker(module_fakes):
    in_worker = Fake("fake-process", step_s=float(FAKE_STEP_TIME_S), flags=("--run-isolation", "process"))
    with grpc.insecure_channel(module_fakes(in_worker).addresses["fake-process"]) as channel:
        yield pb_grpc.RunnerStub(channel)


@pytest.fixture(scope="module")
def fake_in_thread(runner_pool):
    with grpc.insecure_channel(runner_pool.get("fake").address) as channel:
        yield pb_grpc.RunnerStub(channel)


def test_fake_runner_describes_its_isolation(fake_in_worker, fake_in_thread):
    assert fake_in_worker.Describe(pb.DescribeRequest(), timeout=RUN_TIMEOUT_S).options["run_isolation"] == "process"
    assert fake_in_thread.Describe(pb.DescribeRequest(), timeout=RUN_TIMEOUT_S).options["run_isolation"] == "thread"


def test_fake_run_in_a_worker_gives_what_an_in_process_run_gives(fake_in_worker, fake_in_thread):
    in_worker_events = list(fake_in_worker.Run(rpc_request(), timeout=RUN_TIMEOUT_S))
    in_thread_events = list(fake_in_thread.Run(rpc_request(), timeout=RUN_TIMEOUT_S))
    assert outline(in_worker_events) == outline(in_thread_events)


@pytest.mark.parametrize(
    "overrides, code, reason",
    [
        ({"batch_size": 0}, grpc.StatusCode.INVALID_ARGUMENT, ""),
        # The fake device cannot hold 4096 images of 3x1024x1024 floats: the worker runs out of memory.
        ({"batch_size": 4096, "input_shape": [3, 1024, 1024]}, grpc.StatusCode.RESOURCE_EXHAUSTED, "out-of-memory"),
    ],
)
def test_fake_errors_in_a_worker_have_the_in_process_status(fake_in_worker, fake_in_thread, overrides, code, reason):
    in_worker_error = rpc_error(fake_in_worker, rpc_request(**overrides))
    assert in_worker_error[0] == code and in_worker_error[2] == reason
    assert in_worker_error == rpc_error(fake_in_thread, rpc_request(**overrides))


def test_fake_cancelled_run_stops_its_worker(fake_in_worker):
    cancel_after_first_steps(fake_in_worker)
    assert_next_run_completes(fake_in_worker)


@pytest.fixture(scope="module")
def tensorflow_in_worker(runner_logs):
    command = [*launch.embedded_command("tensorflow", launch.default_venvs()), "--run-isolation", "process"]
    log_path = runner_logs / "tensorflow-process.log"
    with launch.LocalRunner("tensorflow-process", command, log_path=log_path) as local:
        with grpc.insecure_channel(local.address) as channel:
            yield pb_grpc.RunnerStub(channel)


@pytest.fixture(scope="module")
def tensorflow_default(runner_pool):
    """The TensorFlow runner as the session starts it: its default isolation, so CPU runs stay in-process."""
    with grpc.insecure_channel(runner_pool.get("tensorflow").address) as channel:
        yield pb_grpc.RunnerStub(channel)


@pytest.mark.frameworks
def test_tensorflow_in_a_worker_refuses_cancels_and_runs_as_in_process(tensorflow_in_worker, tensorflow_default):
    # One test, so that CI starts TensorFlow worker processes twice, not four times.
    default_options = tensorflow_default.Describe(pb.DescribeRequest(), timeout=RUN_TIMEOUT_S).options
    assert default_options["run_isolation"] == "process-on-gpu"
    code, details, _ = rpc_error(tensorflow_in_worker, rpc_request(input_shape=[3, 2, 2]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "input_shape" in details
    cancel_after_first_steps(tensorflow_in_worker)
    in_worker_events = list(tensorflow_in_worker.Run(rpc_request(), timeout=NEXT_RUN_TIMEOUT_S))
    in_process_events = list(tensorflow_default.Run(rpc_request(), timeout=RUN_TIMEOUT_S))
    assert outline(in_worker_events) == outline(in_process_events)
    assert in_worker_events[-1].summary.throughput_samples_per_s > 0


# --- TensorFlow's memory growth: set on every GPU before anything creates a GPU context ----------

# Runs in the TensorFlow environment. Two fake GPUs; every call that sets memory growth or hides the
# GPUs, and the one that creates TensorFlow's device context (which maps GPU memory), recorded in order.
# The backend is built as the server and every worker process build it, the service as the server
# builds it by default (GPU runs in workers), then it does what InspectModel does for a model.
MEMORY_GROWTH_PROBE = """
import functools
import json

import tensorflow as tf
from tensorflow.python.eager import context

calls = []
fake_gpus = [tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(2)]
list_devices = tf.config.list_physical_devices
tf.config.list_physical_devices = lambda kind=None: fake_gpus if kind == "GPU" else list_devices(kind)
tf.config.experimental.get_device_details = lambda device: {"device_name": "probe GPU"}
tf.config.experimental.set_memory_growth = lambda device, enable: calls.append(["memory_growth", device.name, enable])
set_visible_devices = tf.config.set_visible_devices


def recording_set_visible_devices(devices, kind=None):
    calls.append(["visible", kind, [device.name for device in devices]])
    set_visible_devices(devices, kind)


tf.config.set_visible_devices = recording_set_visible_devices
ensure_initialized = context.Context.ensure_initialized


def recording_ensure_initialized(self):
    if self._context_handle is None:
        calls.append(["context_created"])
    return ensure_initialized(self)


context.Context.ensure_initialized = recording_ensure_initialized

from fwbench_core.isolation import BlockWorker, ProcessBlocks, RunIsolation
from fwbench_core.service import RunnerService
from fwbench_core.devices import RunnerSettings
from fwbench_tensorflow.backend import TensorFlowBackend

make_backend = functools.partial(TensorFlowBackend, RunnerSettings(1, 1))
service = RunnerService(make_backend(), isolation=RunIsolation.PROCESS_ON_GPU, make_backend=make_backend)
calls.append(["devices", [str(device.ref) for device in service.info.devices]])
service.on_cpu(lambda: service.backend.inspect(service.model_config("resnet18", (3, 32, 32), {})))
print(json.dumps(calls))
"""


@pytest.mark.frameworks
def test_tensorflow_sets_memory_growth_and_hides_gpus_from_the_server_before_the_first_gpu_context():
    python = launch.default_venvs() / "tensorflow" / "bin" / "python"
    done = subprocess.run([str(python), "-c", MEMORY_GROWTH_PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = json.loads(done.stdout.strip().splitlines()[-1])
    assert ["context_created"] in calls, f"the probe never reached a call that creates the context: {calls}"
    before_context = calls[: calls.index(["context_created"])]
    assert ["devices", ["cpu:0", "gpu:0", "gpu:1"]] in before_context
    growth = [call for call in calls if call[0] == "memory_growth"]
    assert growth == [["memory_growth", f"/physical_device:GPU:{i}", True] for i in range(2)], calls
    assert all(call in before_context for call in growth), f"memory growth set after the context was created: {calls}"
    # GPU runs go to worker processes: the server itself never opens a GPU.
    assert ["visible", "GPU", []] in before_context, calls
