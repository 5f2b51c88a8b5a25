"""A runner never starves and never outlives its aggregator: real processes, real gRPC on loopback.

However much work is running or queued, Describe, ListModels and health checks are answered within a second,
and work beyond the runner's limit is refused as busy (never taken for out of memory). Runners the aggregator
started end when it ends, kill -9 included, and a run's worker process ends with its runner.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.cli import fwbench
from support.fakes import Fake
from support.processes import assert_all_end, children, descendants

from fwbench_aggregator.base import frameworks
from fwbench_aggregator.run.launch import LocalRunner
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_core.admission import DEFAULT_MAX_QUEUED_REQUESTS
from fwbench_core.errors import REASON_KEY
from fwbench_core.fake import STEP_TIME_ENV
from fwbench_core.server import OPEN_STREAMS

# Every test here runs the command line, runners or generated requests end to end: seconds each.
pytestmark = pytest.mark.slow

# What the runner promises for Describe, ListModels and health, however busy it is.
QUICK_ANSWER_S = 1.0
SLOW_STEP_S = "0.05"
# Processes that should end have this long (the machine is shared and loaded).
GONE_WITHIN_S = 15.0
START_WITHIN_S = 120.0

# The fake runner declared as two frameworks: the aggregator starts both as its embedded runners.
TWO_FAKES = """\
[fake]
module = "fwbench_core.fake"
folder = "runners/core"
environment = "aggregator"

[fake-2]
module = "fwbench_core.fake"
folder = "runners/core"
environment = "aggregator"
"""


def long_run(**overrides) -> pb.RunRequest:
    """A run that lasts minutes unless cancelled."""
    fields = dict(
        model="resnet18",
        mode=pb.MODE_INFER,
        batch_size=1,
        input_shape=[3, 32, 32],
        warmup_steps=0,
        measured_steps=100_000,
        min_measure_s=0.0,
    )
    fields.update(overrides)
    return pb.RunRequest(**fields)


def slow_fake(tmp_path: Path, *flags: str, step_s: str = SLOW_STEP_S) -> LocalRunner:
    return Fake(step_s=float(step_s), flags=flags).runner(tmp_path / "fake.log")


def open_runs(stub, count: int) -> list:
    """`count` runs, each admitted by the runner: the first building, the others queued behind it."""
    calls = []
    for number in range(count):
        calls.append(stub.Run(long_run(), timeout=300))
        assert next(calls[-1]).progress.phase == (pb.PHASE_QUEUED if number else pb.PHASE_BUILD)
    return calls


def assert_answers_at_once(channel) -> None:
    stub = pb_grpc.RunnerStub(channel)
    health = health_pb2_grpc.HealthStub(channel)
    assert health.Check(health_pb2.HealthCheckRequest(service=""), timeout=QUICK_ANSWER_S).status == (
        health_pb2.HealthCheckResponse.SERVING
    )
    assert stub.Describe(pb.DescribeRequest(), timeout=QUICK_ANSWER_S).framework == "fake"
    assert "resnet18" in [m.name for m in stub.ListModels(pb.ListModelsRequest(), timeout=QUICK_ANSWER_S).models]


def refusal(call) -> tuple[grpc.StatusCode, str, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details(), dict(info.value.trailing_metadata() or ()).get(REASON_KEY, "")


def test_a_full_queue_leaves_health_describe_and_list_models_answering_and_refuses_more_work_as_busy(tmp_path):
    with slow_fake(tmp_path) as runner, grpc.insecure_channel(runner.address) as channel:
        stub = pb_grpc.RunnerStub(channel)
        calls = open_runs(stub, DEFAULT_MAX_QUEUED_REQUESTS)  # one running, the rest waiting for the CPU
        try:
            for _ in range(3):
                assert_answers_at_once(channel)
            code, message, reason = refusal(lambda: next(stub.Run(long_run(), timeout=30)))
            assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "busy"), message
            assert f"1 running and {DEFAULT_MAX_QUEUED_REQUESTS - 1} waiting" in message and "retry later" in message
            assert refusal(lambda: stub.InspectModel(pb.InspectRequest(model="resnet18"), timeout=30))[2] == "busy"
            # The runner goes on: the health check answers, and the running run still streams.
            assert_answers_at_once(channel)
            assert next(calls[0]).WhichOneof("event")
        finally:
            for call in calls:
                call.cancel()
        # Once the cancelled runs have ended (each notices between steps or polls), the runner takes work again.
        deadline = time.monotonic() + GONE_WITHIN_S
        while True:
            try:
                events = list(stub.Run(long_run(measured_steps=2), timeout=60))
                break
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert events[-1].summary.measured_steps == 2


def test_open_health_watches_beside_a_full_queue_leave_the_quick_requests_answering(tmp_path):
    with slow_fake(tmp_path) as runner, grpc.insecure_channel(runner.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        calls = open_runs(pb_grpc.RunnerStub(channel), DEFAULT_MAX_QUEUED_REQUESTS)
        watches = []
        try:
            for _ in range(OPEN_STREAMS):
                watches.append(health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=300))
                assert next(watches[-1]).status == health_pb2.HealthCheckResponse.SERVING
            code, message, reason = refusal(
                lambda: next(health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30))
            )
            assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "busy"), message
            assert_answers_at_once(channel)
            watches.pop().cancel()
            # A closed watch gives its place back.
            deadline = time.monotonic() + GONE_WITHIN_S
            while True:
                try:
                    watches.append(health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=300))
                    assert next(watches[-1]).status == health_pb2.HealthCheckResponse.SERVING
                    break
                except grpc.RpcError as error:
                    watches.pop()
                    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            assert_answers_at_once(channel)
        finally:
            for call in [*calls, *watches]:
                call.cancel()


def test_max_batch_does_not_take_a_busy_runner_for_a_full_device(tmp_path):
    with slow_fake(tmp_path, "--max-queued-requests", "1") as runner, grpc.insecure_channel(runner.address) as channel:
        (call,) = open_runs(pb_grpc.RunnerStub(channel), 1)
        try:
            done = fwbench(
                "max-batch",
                "--mode",
                "infer",
                "--shape",
                "3x32x32",
                "--limit",
                "8",
                "--runner",
                f"fake={runner.address}",
                timeout=120,
            )
        finally:
            call.cancel()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "RESOURCE_EXHAUSTED" in done.stderr and "busy" in done.stderr
    assert "none fits" not in done.stdout and "(OOM)" not in done.stdout


# --- processes: the aggregator's runners end with it, a runner's worker ends with the runner ---------------


def runner_children(pid: int) -> list[int]:
    return children(pid, b"fwbench_core.fake")


def start_fwbench(tmp_path: Path, *args: str, **popen) -> subprocess.Popen:
    declaration = tmp_path / "two-fakes.toml"
    declaration.write_text(TWO_FAKES)
    # TMPDIR: a comparison keeps its runners' logs in a temporary folder until it has run; here, under tmp_path.
    env = {
        **os.environ,
        "COLUMNS": "200",
        frameworks.EXTRA_ENV: str(declaration),
        STEP_TIME_ENV: SLOW_STEP_S,
        "TMPDIR": str(tmp_path),
    }
    return subprocess.Popen([sys.executable, "-m", "fwbench_aggregator", *args], env=env, **popen)


def wait_for_its_runners(process: subprocess.Popen, folder: Path) -> list[int]:
    """The two embedded runners' pids, once both listen (their logs are somewhere under `folder`)."""
    deadline = time.monotonic() + START_WITHIN_S
    while time.monotonic() < deadline:
        assert process.poll() is None, "fwbench ended before it could be killed"
        listening = [p for p in folder.glob("**/*-runner.log") if "listening" in p.read_text(errors="replace")]
        pids = runner_children(process.pid)
        if len(listening) == 2 and len(pids) == 2:
            return pids
        time.sleep(0.1)
    pytest.fail("the embedded runners did not start")


def sweep_file(tmp_path: Path, steps: int) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "runners: [fake, fake-2]\nmodels: [resnet18]\nmodes: [infer]\nbatch_sizes: [1, 2, 4]\nshapes: [3x32x32]\n"
        f"warmup: 0\nsteps: {steps}\nmin_measure_s: 0\nrepetitions: 1\n"
    )
    return path


def aggregator_args(tmp_path: Path, command: str, steps: int) -> list[str]:
    """A `compare` or a `sweep` of 3 runs per runner on the two embedded fakes, each stored in tmp_path/store."""
    store = ["--store", str(tmp_path / "store")]
    if command == "compare":
        return [
            "compare",
            "--frameworks",
            "fake,fake-2",
            "--batch-size",
            "1",
            "--shape",
            "3x32x32",
            "--warmup",
            "0",
            "--steps",
            str(steps),
            "--min-measure-s",
            "0",
            "--repetitions",
            "3",
            "--power-rate-hz",
            "0",
            "--out",
            str(tmp_path / "out"),
            *store,
        ]
    return ["sweep", str(sweep_file(tmp_path, steps)), *store, "--no-report"]


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_kill_9_of_the_aggregator_ends_its_runners(tmp_path, command):
    process = start_fwbench(
        tmp_path,
        *aggregator_args(tmp_path, command, steps=100_000),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        runners = wait_for_its_runners(process, tmp_path)
        time.sleep(1.0)  # a run is in flight
    finally:
        process.kill()
        process.wait()
    assert_all_end(runners, f"the runners of a killed `fwbench {command}`", GONE_WITHIN_S)


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_sigterm_keeps_finished_runs_and_stops_the_runners(tmp_path, command):
    process = start_fwbench(
        tmp_path,
        *aggregator_args(tmp_path, command, steps=20),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        runners = wait_for_its_runners(process, tmp_path)
        store = ResultStore(tmp_path / "store")
        deadline = time.monotonic() + START_WITHIN_S
        while not store.keys() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the next run is in flight
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "interrupted" in stderr and "kept" in stderr
    assert 1 <= len(store.keys()) < 6
    assert_all_end(runners, f"the runners of `fwbench {command}` ended by SIGTERM", GONE_WITHIN_S)


@pytest.mark.parametrize(
    "flags, request_fields",
    [
        (["--run-isolation", "process"], {}),
        ([], {"process_block": "block-1", "reuse_key": "block-1", "continue_reuse": True}),
    ],
    ids=["a fresh process per run", "a process block"],
)
def test_a_runner_killed_mid_run_takes_its_worker_process_with_it(tmp_path, flags, request_fields):
    # A step far longer than the worker may outlive its runner: the worker sends nothing meanwhile, so it
    # cannot learn from a broken pipe that the runner is gone.
    step_s = str(4 * GONE_WITHIN_S)
    with slow_fake(tmp_path, *flags, step_s=step_s) as runner, grpc.insecure_channel(runner.address) as channel:
        call = pb_grpc.RunnerStub(channel).Run(long_run(**request_fields), timeout=120)
        for event in call:
            if event.WhichOneof("event") == "config":
                break  # the worker has built the model and is in its first step
        spawned = descendants(runner.process.pid)
        assert any(b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in spawned), spawned
        runner.process.kill()
        runner.process.wait()
        call.cancel()
    assert_all_end(spawned, "the worker of a runner killed by kill -9", GONE_WITHIN_S)
