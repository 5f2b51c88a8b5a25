"""Build once, run several batch sizes (RunRequest.reuse_key): the core's part, with the fake backend.

A kept workload is reused only under the same key and a configuration that differs in batch size and
measurement settings alone; anything else, a failure or a cancellation frees it first.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from support.core import RecordingBackend, expect_error, request, resolve_request, small
from support.runners import REAL_RUNNERS

from fwbench_aggregator.base import frameworks
from fwbench_aggregator.run import launch
from fwbench_core.choices import Mode
from fwbench_core.errors import Cancelled, InvalidArgument, OutOfMemory
from fwbench_core.limits import MAX_REUSE_KEY_LENGTH
from fwbench_core.server import create_server
from fwbench_core.service import RunnerService
from fwbench_core.timing import StepBatch, Summary

HERE = Path(__file__).parent
FRAMEWORK_TIMEOUT_S = 180


def summary_of(service: RunnerService, run) -> Summary:
    events = list(service.run(run, lambda: False))
    assert isinstance(events[-1], Summary)
    return events[-1]


def test_a_chain_under_one_key_builds_once_and_restarts_the_state_for_each_batch_size():
    backend = RecordingBackend()
    service = RunnerService(backend)
    first = summary_of(service, small(batch_size=1, reuse_key="chain"))
    second = summary_of(service, small(batch_size=4, reuse_key="chain", measured_steps=3))
    assert len(backend.workloads) == 1
    assert (first.build_reused, second.build_reused) == (False, True)
    workload = backend.workloads[0]
    # Kept between runs, not closed nor released; its state restarted: only the second run's steps.
    assert workload.closed == 0 and backend.released == 0
    assert workload.steps_taken == 1 + 3
    assert second.peak_memory.bytes == 4 * 4 * 3 * 32 * 32  # the new batch's inputs
    assert not second.first_step_traced  # the fake steps eagerly


def test_without_a_key_every_run_builds_and_frees():
    backend = RecordingBackend()
    service = RunnerService(backend)
    summaries = [summary_of(service, small(batch_size=b)) for b in (1, 2)]
    assert len(backend.workloads) == 2 and [w.closed for w in backend.workloads] == [1, 1]
    assert backend.released == 2 and not any(s.build_reused for s in summaries)


@pytest.mark.parametrize(
    "second",
    [
        small(batch_size=2, reuse_key="other"),
        small(batch_size=2),
        small(batch_size=2, reuse_key="chain", mode=Mode.TRAIN),
        small(batch_size=2, reuse_key="chain", model="mobilenet_v2"),
        small(batch_size=2, reuse_key="chain", input_shape=(3, 40, 40)),
        small(batch_size=2, reuse_key="chain", seed=1),
    ],
    ids=["other key", "no key", "mode", "model", "shape", "seed"],
)
def test_another_key_or_configuration_frees_the_kept_workload_before_building(second):
    backend = RecordingBackend()
    service = RunnerService(backend)
    summary_of(service, small(batch_size=1, reuse_key="chain"))
    summary = summary_of(service, second)
    assert len(backend.workloads) == 2 and not summary.build_reused
    assert backend.workloads[0].closed == 1 and backend.released >= 1


def test_a_workload_that_cannot_be_reused_is_freed_and_built_afresh():
    backend = RecordingBackend()
    service = RunnerService(backend)
    summary_of(service, small(batch_size=1, reuse_key="chain"))
    backend.workloads[0].reuse = lambda config: False  # as torch.compile's, or a backend without reuse
    summary = summary_of(service, small(batch_size=2, reuse_key="chain"))
    assert len(backend.workloads) == 2 and not summary.build_reused
    assert backend.workloads[0].closed == 1 and backend.released == 1


def test_measurement_settings_may_differ_within_a_chain():
    kept = resolve_request(request(reuse_key="k", batch_size=1))
    longer = resolve_request(
        request(
            reuse_key="k",
            batch_size=8,
            warmup_steps=3,
            measured_steps=7,
            min_measure_s=2.0,
            power_sample_rate_hz=0.0,
            idle_baseline_s=0.0,
            end_reuse=True,
        )
    )
    assert longer.reuses(kept)
    assert not resolve_request(request(reuse_key="k", batch_size=8, mode=Mode.INFER)).reuses(kept)
    assert not resolve_request(request(batch_size=8)).reuses(resolve_request(request(batch_size=1)))


def test_the_last_run_of_a_chain_frees_its_workload():
    backend = RecordingBackend()
    service = RunnerService(backend)
    summary_of(service, small(batch_size=1, reuse_key="chain"))
    last = summary_of(service, small(batch_size=2, reuse_key="chain", end_reuse=True))
    assert last.build_reused and backend.workloads[0].closed == 1 and backend.released == 1
    assert not summary_of(service, small(batch_size=4, reuse_key="chain")).build_reused
    assert len(backend.workloads) == 2


def test_a_failed_run_frees_the_workload_and_the_next_builds_afresh():
    backend = RecordingBackend()
    service = RunnerService(backend)
    summary_of(service, small(batch_size=1, reuse_key="chain"))
    backend.workloads[0].step_error = ValueError("bad kernel")
    with pytest.raises(ValueError, match="bad kernel"):
        list(service.run(small(batch_size=2, reuse_key="chain"), lambda: False))
    assert backend.workloads[0].closed == 1 and backend.released == 1
    assert not summary_of(service, small(batch_size=2, reuse_key="chain")).build_reused
    assert len(backend.workloads) == 2


def test_running_out_of_memory_while_reusing_frees_the_workload():
    backend = RecordingBackend()
    service = RunnerService(backend)
    large = (3, 256, 256)
    summary_of(service, small(batch_size=1, input_shape=large, reuse_key="chain"))
    with pytest.raises(OutOfMemory, match="batch_size 65536"):
        list(service.run(small(batch_size=65536, input_shape=large, reuse_key="chain"), lambda: False))
    assert backend.workloads[0].closed == 1 and backend.released == 1
    assert not summary_of(service, small(batch_size=2, input_shape=large, reuse_key="chain")).build_reused


def test_a_cancelled_run_keeps_nothing():
    backend = RecordingBackend(step_time_s=0.001)
    service = RunnerService(backend)
    summary_of(service, small(batch_size=1, reuse_key="chain"))
    cancel = threading.Event()
    run = service.run(small(batch_size=2, reuse_key="chain", measured_steps=100_000), cancel.is_set)
    while not isinstance(next(run), StepBatch):
        pass
    cancel.set()
    with pytest.raises(Cancelled):
        list(run)
    assert backend.workloads[0].closed == 1
    assert not summary_of(service, small(batch_size=2, reuse_key="chain")).build_reused


def test_other_work_on_the_framework_thread_frees_the_kept_workload():
    backend = RecordingBackend()
    service = RunnerService(backend)
    summary_of(service, small(batch_size=1, reuse_key="chain"))
    assert service.on_cpu(lambda: "inspected") == "inspected"
    assert backend.workloads[0].closed == 1


def test_a_window_steps_the_kept_workload_on_as_it_is_with_nothing_restored():
    backend = RecordingBackend()
    service = RunnerService(backend)
    first = summary_of(service, small(reuse_key="w", continue_reuse=True))
    backend.workloads[0].reuse = lambda config: pytest.fail("a window restores nothing")
    second = summary_of(service, small(reuse_key="w", continue_reuse=True, measured_steps=3))
    assert len(backend.workloads) == 1 and backend.workloads[0].closed == 0
    assert (first.build_continued, second.build_continued) == (False, True)
    assert (first.build_reused, second.build_reused) == (False, True) and not second.first_step_traced
    # Its steps go on from the first window's: nothing restarted.
    assert backend.workloads[0].steps_taken == (
        first.warmup_steps_run + first.measured_steps + second.warmup_steps_run + second.measured_steps
    )


def test_a_window_with_nothing_to_continue_warms_its_fresh_build_up_by_the_default_rule_first():
    service = RunnerService(RecordingBackend())
    first = summary_of(service, small(reuse_key="w", continue_reuse=True, warmup_steps=1))
    later = summary_of(service, small(reuse_key="w", continue_reuse=True, warmup_steps=1))
    # Until stable (the last 5 steps within 5%, at most 50 more), as a run that asks no warm-up would.
    assert 5 <= first.warmup_steps_run <= 1 + 50
    assert later.warmup_steps_run == 1


def test_a_window_at_another_batch_size_restarts_the_kept_workload():
    backend = RecordingBackend()
    service = RunnerService(backend)
    summary_of(service, small(batch_size=1, reuse_key="w", continue_reuse=True))
    other = summary_of(service, small(batch_size=2, reuse_key="w", continue_reuse=True))
    assert len(backend.workloads) == 1 and other.build_reused and not other.build_continued
    assert backend.workloads[0].steps_taken == other.warmup_steps_run + other.measured_steps


def test_a_window_needs_a_reuse_key():
    message = expect_error(InvalidArgument, request(continue_reuse=True))
    assert "continue_reuse" in message and "reuse_key" in message


@pytest.mark.parametrize(
    "key", ["x" * (MAX_REUSE_KEY_LENGTH + 1), "tab\there", "caf\u00e9"], ids=["long", "control", "non-ascii"]
)
def test_a_reuse_key_must_be_short_printable_ascii(key):
    message = expect_error(InvalidArgument, request(reuse_key=key))
    assert message.startswith("reuse_key ") and f"at most {MAX_REUSE_KEY_LENGTH} characters" in message


@pytest.mark.parametrize("key", ["x" * (MAX_REUSE_KEY_LENGTH + 1), "new\nline"], ids=["long", "control"])
def test_a_process_block_must_be_short_printable_ascii(key):
    message = expect_error(InvalidArgument, request(process_block=key))
    assert message.startswith("process_block ") and "empty runs as the runner's run isolation says" in message


def test_reuse_over_grpc_reports_it_in_the_summary():
    server, port, _ = create_server(RunnerService(RecordingBackend()), "127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc

            stub = pb_grpc.RunnerStub(channel)

            def run(batch_size: int, **fields) -> pb.Summary:
                request = pb.RunRequest(
                    model="resnet18",
                    mode=pb.MODE_INFER,
                    batch_size=batch_size,
                    input_shape=[3, 32, 32],
                    warmup_steps=1,
                    measured_steps=2,
                    min_measure_s=0.0,
                    **fields,
                )
                return list(stub.Run(request, timeout=30))[-1].summary

            assert [run(b, reuse_key="chain").build_reused for b in (1, 2)] == [False, True]
            windows = [run(2, reuse_key="window", continue_reuse=True) for _ in range(2)]
            assert [w.build_continued for w in windows] == [False, True]
            assert {w.process_id for w in windows} == {os.getpid()}  # this test's process serves the runner
            with pytest.raises(grpc.RpcError) as info:
                run(1, reuse_key="\n")
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "reuse_key" in info.value.details()
    finally:
        server.stop(None).wait(5)


@pytest.mark.frameworks
@pytest.mark.parametrize("framework", REAL_RUNNERS)
def test_a_reused_workload_equals_a_fresh_build_at_the_new_batch_size(framework):
    """Weights, optimizer state, inputs and targets, and the weights after a training step: the same numbers."""
    environment = next(f.environment for f in frameworks.shipped() if f.name == framework)
    python = launch.default_venvs() / environment / "bin" / "python"
    done = subprocess.run(
        [str(python), str(HERE / "reuse_equals_fresh.py"), framework],
        capture_output=True,
        text=True,
        timeout=FRAMEWORK_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["reused"] is True
    assert {name: result[name] for name in ("state", "inputs", "targets", "after_step")} == {
        "state": 0.0,
        "inputs": 0.0,
        "targets": 0.0,
        "after_step": 0.0,
    }
    # TensorFlow's default (graph) and JAX's (jit) trace the step again for the new shape; PyTorch eager traces nothing.
    assert result["first_step_traces"] is (framework in ("tensorflow", "jax"))
