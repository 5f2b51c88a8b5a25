"""The core's distributed runs, on the fake backend (no framework): worker processes per rank, their streams
merged into one run, and every fault (a rank that dies, hangs, errs, a rendezvous nobody answers, the client's
cancellation) ending the run with the rank named and no process left behind."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from dataclasses import replace

import pytest
from support.distributed import spawned_children

from fwbench_core.catalog import load_catalog
from fwbench_core.choices import DeviceKind, Mode, Phase, Strategy
from fwbench_core.devices import DeviceRef
from fwbench_core.distributed import (
    POWER_FLAG,
    SILENCE_MARGIN_S,
    STOP_GRACE_S,
    TERMINATE_GRACE_S,
    merge_step,
    straggler_spread,
    worker_places,
)
from fwbench_core.errors import Aborted, Cancelled, FailedPrecondition, InvalidArgument, OutOfMemory, Unavailable
from fwbench_core.fake import HANG_RANK_ENV, FakeBackend
from fwbench_core.run_path import Resolved
from fwbench_core.runs import Cluster, RunRequest
from fwbench_core.service import RunnerService
from fwbench_core.timing import Progress, StepBatch, StepSample, Summary
from fwbench_core.validation import resolve

STEP_TIME_S = 0.01
# A stopped run's workers are gone within the stop bounds; the rest is spawning and reading pipes.
STOP_BOUND_S = STOP_GRACE_S + TERMINATE_GRACE_S + 5.0


def make_fake() -> FakeBackend:
    return FakeBackend(step_time_s=STEP_TIME_S)


def service() -> RunnerService:
    return RunnerService(make_fake(), make_backend=make_fake)


def cpus(count: int) -> tuple[DeviceRef, ...]:
    return tuple(DeviceRef(DeviceKind.CPU, i) for i in range(count))


def ddp_request(**overrides) -> RunRequest:
    fields = dict(
        model="lstm_lm",
        mode=Mode.TRAIN,
        batch_size=4,
        input_shape=(4,),
        devices=cpus(2),
        strategy=Strategy.DDP,
        warmup_steps=2,
        measured_steps=5,
        min_measure_s=0.0,
        distributed_timeout_s=10.0,
    )
    fields.update(overrides)
    return RunRequest(**fields)


def service_config(request: RunRequest):
    backend = make_fake()
    return resolve(request, backend.runner_info().devices, backend.capabilities, load_catalog(backend.models), "fake")


def spawned_workers() -> list[int]:
    """This process's children that multiprocessing spawned to run something (not its resource tracker)."""
    return spawned_children(os.getpid())


@pytest.fixture(autouse=True)
def no_spawned_workers_left():
    yield
    assert spawned_workers() == []


def test_merge_step_takes_the_slowest_rank_and_keeps_each_ranks_time():
    a = StepSample(3, False, 10.0, 0.2, 0.19)
    b = StepSample(3, False, 9.5, 0.3, None)
    step = merge_step([a, b])
    assert (step.index, step.start_s, step.step_time_s, step.device_time_s) == (3, 9.5, 0.3, None)
    assert step.rank_step_time_s == (0.2, 0.3)
    assert merge_step([a, StepSample(3, False, 10.0, 0.1, 0.25)]).device_time_s == 0.25
    assert straggler_spread([step, merge_step([a, a])]) == pytest.approx((1 / 3 + 0) / 2)
    alone = merge_step([a])
    assert alone.rank_step_time_s == () and straggler_spread([alone]) is None


def test_each_worker_gets_its_global_rank_and_the_jobs_rendezvous():
    endpoints = ("10.0.0.1:29500", "10.0.0.2:29500", "10.0.0.3:29500")
    config = replace(service_config(ddp_request()), cluster=Cluster(2, 3, endpoints))
    places = worker_places(config, 2)
    assert [(p.local_rank, p.rank, p.world_size) for p in places] == [(0, 4, 6), (1, 5, 6)]
    assert {(p.rendezvous, p.workers) for p in places} == {("10.0.0.1:29500", endpoints)}
    (alone,) = worker_places(service_config(ddp_request(devices=cpus(1))), 1)
    assert (alone.rank, alone.world_size, alone.workers) == (0, 1, ())
    assert alone.rendezvous.startswith("127.0.0.1:")


def test_ddp_on_two_cpu_workers_is_one_run_of_merged_steps():
    events = list(service().run(ddp_request(), lambda: False))
    resolved = [e for e in events if isinstance(e, Resolved)]
    assert len(resolved) == 1
    config = resolved[0].config
    assert (config.strategy, config.world_size, config.global_batch_size, config.place) == (Strategy.DDP, 2, 8, None)
    steps = [s for e in events if isinstance(e, StepBatch) for s in e.steps]
    assert [s.index for s in steps] == list(range(7))
    assert [s.warmup for s in steps] == [True] * 2 + [False] * 5
    assert all(len(s.rank_step_time_s) == 2 and s.step_time_s == max(s.rank_step_time_s) for s in steps)
    summary = events[-1]
    assert isinstance(summary, Summary) and summary.measured_steps == 5
    measured_s = sum(s.step_time_s for s in steps[2:])
    assert summary.throughput_samples_per_s == pytest.approx(8 * 5 / measured_s)
    assert summary.straggler_spread is not None and 0 <= summary.straggler_spread < 1
    assert POWER_FLAG in summary.flags
    assert isinstance(events[-2], Progress) and events[-2].phase is Phase.DONE
    assert [e.phase for e in events if isinstance(e, Progress)][0] is Phase.BUILD


def test_two_runners_form_one_job_through_the_rendezvous():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        endpoints = (f"127.0.0.1:{probe.getsockname()[1]}", "127.0.0.1:1")
    results: dict[int, object] = {}

    def node(rank: int) -> None:
        request = ddp_request(devices=cpus(1), cluster=Cluster(rank, 2, endpoints))
        try:
            results[rank] = list(service().run(request, lambda: False))
        except Exception as error:
            results[rank] = error

    threads = [threading.Thread(target=node, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for rank in (0, 1):
        events = results[rank]
        assert isinstance(events, list), events
        config = next(e.config for e in events if isinstance(e, Resolved))
        assert (config.world_size, config.global_batch_size, config.cluster.node_rank) == (2, 8, rank)
        assert isinstance(events[-1], Summary) and events[-1].measured_steps == 5


def test_a_rendezvous_nobody_hosts_is_unavailable_within_the_timeout():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        unused = f"127.0.0.1:{probe.getsockname()[1]}"
    request = ddp_request(devices=cpus(1), cluster=Cluster(1, 2, (unused, "127.0.0.1:2")), distributed_timeout_s=2.0)
    started_s = time.monotonic()
    with pytest.raises(Unavailable, match=f"rank 1: rendezvous at {unused}"):
        list(service().run(request, lambda: False))
    assert time.monotonic() - started_s < 2.0 + STOP_BOUND_S


def test_a_rank_that_dies_aborts_the_run_naming_it_and_stops_the_others():
    run = service().run(ddp_request(measured_steps=100_000), lambda: False)
    for event in run:
        if isinstance(event, StepBatch):
            break
    victim = spawned_workers()[-1]
    os.kill(victim, signal.SIGKILL)
    killed_s = time.monotonic()
    with pytest.raises(Aborted, match=rf"rank \d \(pid {victim}\) exited with code -9 before the run ended"):
        for _ in run:
            pass
    assert time.monotonic() - killed_s < STOP_BOUND_S


@pytest.mark.slow
def test_a_silent_rank_aborts_the_run_after_the_timeout(monkeypatch):
    monkeypatch.setenv(HANG_RANK_ENV, "1")
    started_s = time.monotonic()
    with pytest.raises(Aborted, match=r"rank \d \(pid \d+\) sent nothing for"):
        list(service().run(ddp_request(distributed_timeout_s=1.0), lambda: False))
    assert time.monotonic() - started_s < 1.0 + SILENCE_MARGIN_S + STOP_BOUND_S + 5.0


def test_a_rank_error_keeps_its_status_and_names_the_rank():
    # Inputs too large for the fake device: each rank runs out of memory in its build.
    request = ddp_request(model="resnet18", batch_size=1024, input_shape=(3, 4096, 4096))
    with pytest.raises(OutOfMemory, match=r"^rank \d: out of memory on cpu:0"):
        list(service().run(request, lambda: False))


def test_cancelling_stops_every_rank():
    cancelled = threading.Event()
    run = service().run(ddp_request(measured_steps=100_000), cancelled.is_set)
    for event in run:
        if isinstance(event, StepBatch):
            break
    assert len(spawned_workers()) == 2
    cancelled.set()
    cancelled_s = time.monotonic()
    with pytest.raises(Cancelled):
        for _ in run:
            pass
    assert time.monotonic() - cancelled_s < STOP_BOUND_S


def test_a_client_that_stops_listening_stops_every_rank():
    run = service().run(ddp_request(measured_steps=100_000), lambda: False)
    for event in run:
        if isinstance(event, StepBatch):
            break
    run.close()
    assert spawned_workers() == []


def test_bad_distributed_requests_are_refused_before_any_worker_starts():
    with pytest.raises(InvalidArgument, match="names cpu:0 twice"):
        list(service().run(ddp_request(devices=(DeviceRef(DeviceKind.CPU), DeviceRef(DeviceKind.CPU))), lambda: False))
    with pytest.raises(FailedPrecondition, match="supports ddp"):
        list(service().run(ddp_request(strategy=Strategy.DP), lambda: False))
    with pytest.raises(FailedPrecondition, match="cannot start worker processes"):
        list(RunnerService(make_fake()).run(ddp_request(), lambda: False))


def test_a_distributed_run_holds_the_cpu_so_a_second_run_queues():
    shared = service()
    cancelled = threading.Event()
    first = shared.run(ddp_request(measured_steps=100_000), cancelled.is_set)
    for event in first:
        if isinstance(event, StepBatch):
            break
    second = shared.run(RunRequest(model="lstm_lm", mode=Mode.TRAIN, batch_size=1), cancelled.is_set)
    assert next(second).phase is Phase.QUEUED
    cancelled.set()
    with pytest.raises(Cancelled):
        list(second)
    with pytest.raises(Cancelled):
        list(first)
