"""A distributed run: the runner's worker processes (one per device under DDP, else one), each a rank of the
job, started fresh and stopped together; their event streams merged into the one run the client sees.

Framework-neutral: the backend builds the strategy in each worker (`Backend.prepare_worker`, `build`); the
ranks agree between steps on when a phase ends (timing.py), so every rank sends the same step indices."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from typing import Any, cast

from .backend import Backend, MemoryReading
from .choices import Phase
from .errors import Aborted, Cancelled, error_from_status
from .runs import RunConfig, WorkerPlace
from .timing import Progress, StepBatch, StepSample, Summary, summarize
from .worker_process import _END, _ERROR, CANCEL_POLL_S, _worker_main

log = logging.getLogger("fwbench.runner.distributed")

# A rank's framework reports its own timeouts (rendezvous, collectives) after distributed_timeout_s; the runner
# calls a rank silent only this much later, so that the framework's more precise error arrives first. torch's
# rendezvous reports a 5 s timeout after 6 s on a quiet host, and once took over 10 s in a CI run on a loaded one.
SILENCE_MARGIN_S = 15.0
# Stopping the workers: a stop request, then SIGTERM, then SIGKILL, each after this long.
STOP_GRACE_S = 3.0
TERMINATE_GRACE_S = 2.0
_EXITED = "exited"  # a worker's pipe closed before it sent its end: the process died
POWER_FLAG = "power is not sampled in distributed runs yet: telemetry was off for this run"


def free_local_endpoint() -> str:
    """A 127.0.0.1 port free right now, for the rendezvous of a run on one runner (rank 0 binds it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def worker_places(config: RunConfig, workers: int) -> list[WorkerPlace]:
    """Each local worker's place in the job: global rank = node_rank * workers + local_rank."""
    cluster = config.cluster
    node_rank = cluster.node_rank if cluster else 0
    rendezvous = cluster.endpoints[0] if cluster else free_local_endpoint()
    endpoints = cluster.endpoints if cluster else ()
    return [
        WorkerPlace(local, node_rank * workers + local, config.node_count * workers, rendezvous, endpoints)
        for local in range(workers)
    ]


@dataclass
class _Worker:
    place: WorkerPlace
    process: BaseProcess
    receiver: Connection
    stop: Event
    last_heard_s: float
    steps: list[StepSample] = field(default_factory=list)
    summary: Summary | None = None
    ended: bool = False  # sent its end: the run finished in this rank

    def describe(self) -> str:
        return f"rank {self.place.rank} (pid {self.process.pid})"


def run_distributed(
    work: Callable[..., Iterator],
    make_backend: Callable[[], Backend],
    config: RunConfig,
    workers: int,
    total: int,
    cancelled: Callable[[], bool],
) -> Iterator:
    """Run `work(make_backend, config with the worker's place, total, stop)` in `workers` fresh worker processes
    and yield one run's events: local rank 0's progress and other events, the steps merged once every rank has
    sent them, one summary of the merged steps. Returns (or raises) only once every worker has exited; a fault
    in any rank stops them all."""
    context = multiprocessing.get_context("spawn")
    level = logging.getLogger().getEffectiveLevel()
    started: list[_Worker] = []
    try:
        for place in worker_places(config, workers):
            receiver, sender = context.Pipe(duplex=False)
            stop = context.Event()
            process = context.Process(
                target=_rank_main,
                args=(work, (make_backend, replace(config, place=place), total), sender, stop, level),
                name=f"fwbench-rank-{place.rank}",
                daemon=True,  # a runner that exits takes its workers with it
            )
            process.start()
            sender.close()  # the worker holds the only writer now: its exit ends our reads
            started.append(_Worker(place, process, receiver, stop, time.monotonic()))
        yield from _merged(config, started, cancelled)
    finally:
        stop_workers(started)


def _rank_main(*args) -> None:
    """A rank's worker process: its run, then an exit that skips the interpreter's teardown (seconds for a
    framework that tears down its thread pools and frees gigabytes one object at a time); the OS frees it all."""
    _worker_main(*args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _receive(worker: _Worker) -> tuple[str, Any]:
    try:
        return worker.receiver.recv()
    except EOFError:
        return _EXITED, None


def _merged(config: RunConfig, workers: Sequence[_Worker], cancelled: Callable[[], bool]) -> Iterator:
    silence_limit_s = config.distributed_timeout_s + SILENCE_MARGIN_S
    merged_steps = 0
    measured: list[StepSample] = []
    warmup: list[StepSample] = []
    done_progress = None
    by_receiver = {worker.receiver: worker for worker in workers}
    while not all(worker.ended for worker in workers):
        if cancelled():
            raise Cancelled(f"run of {config.model.name} cancelled by the client")
        ready = _ready([worker.receiver for worker in workers if not worker.ended])
        now_s = time.monotonic()
        received = [(by_receiver[receiver], *_receive(by_receiver[receiver])) for receiver in ready]
        # A rank that died outright is the cause; the errors of ranks that lost it in a collective follow it.
        for worker, kind, _ in received:
            if kind == _EXITED:
                worker.process.join(TERMINATE_GRACE_S)
                raise Aborted(
                    f"{worker.describe()} exited with code {worker.process.exitcode} before the run ended; every "
                    "other rank was stopped; the runner's log has the rank's last words"
                )
        for worker, kind, payload in received:
            worker.last_heard_s = now_s
            if kind == _ERROR:
                code, message, reason = payload
                raise error_from_status(code, f"rank {worker.place.rank}: {message}", reason)
            if kind == _END:
                worker.ended = True
            elif isinstance(payload, StepBatch):
                worker.steps.extend(payload.steps)
            elif isinstance(payload, Summary):
                worker.summary = payload
            elif worker.place.local_rank == 0:
                if isinstance(payload, Progress) and payload.phase is Phase.DONE:
                    done_progress = payload  # sent after the last merged steps
                else:
                    yield payload
        ready_steps = min(len(worker.steps) for worker in workers)
        if ready_steps > merged_steps:
            batch = tuple(merge_step([w.steps[i] for w in workers]) for i in range(merged_steps, ready_steps))
            merged_steps = ready_steps
            for step in batch:
                (warmup if step.warmup else measured).append(step)
            yield StepBatch(batch)
        for worker in workers:
            if not worker.ended and now_s - worker.last_heard_s > silence_limit_s:
                raise Aborted(
                    f"{worker.describe()} sent nothing for {silence_limit_s:.0f} s (distributed_timeout_s "
                    f"{config.distributed_timeout_s:g} s and a margin): it is stuck, or waits for a rank that is"
                )
    summaries = [worker.summary for worker in workers if worker.summary is not None]
    if len(summaries) < len(workers) or not measured:
        raise Aborted(f"the ranks of the run of {config.model.name} ended without their summaries")
    if done_progress is not None:
        yield done_progress
    yield merged_summary(config, summaries, warmup, measured)


def merge_step(samples: Sequence[StepSample]) -> StepSample:
    """One step of every local rank (in local rank order) as one step: it ends when the slowest rank ends."""
    device_times = [s.device_time_s for s in samples if s.device_time_s is not None]
    return StepSample(
        index=samples[0].index,
        warmup=samples[0].warmup,
        start_s=min(s.start_s for s in samples),
        step_time_s=max(s.step_time_s for s in samples),
        device_time_s=max(device_times) if len(device_times) == len(samples) else None,
        # One process has no ranks to tell apart (runner.proto): its step is the rank's.
        rank_step_time_s=tuple(s.step_time_s for s in samples) if len(samples) > 1 else (),
    )


def straggler_spread(steps: Sequence[StepSample]) -> float | None:
    """Median over steps of (slowest - fastest rank) / slowest; None where each step has one rank."""
    spreads = [
        (max(s.rank_step_time_s) - min(s.rank_step_time_s)) / max(s.rank_step_time_s)
        for s in steps
        if len(s.rank_step_time_s) > 1
    ]
    return statistics.median(spreads) if spreads else None


def merged_summary(
    config: RunConfig, summaries: Sequence[Summary], warmup: Sequence[StepSample], measured: Sequence[StepSample]
) -> Summary:
    """The run's summary from the merged steps; throughput is the job's global batch over the slowest ranks."""
    step_times = [step.step_time_s for step in measured]
    device_times = [step.device_time_s for step in measured if step.device_time_s is not None]
    peaks = [s.peak_memory for s in summaries]
    readable = [p.bytes for p in peaks if p.bytes is not None]
    peak = MemoryReading(max(readable) if readable else None, f"{peaks[0].source}, the largest of {len(peaks)} ranks")
    base = summarize(
        config,
        step_times,
        peak,
        max(s.time_to_first_step_s for s in summaries),
        min(s.started_at_unix_s for s in summaries),
        max(s.finished_at_unix_s for s in summaries),
        [step.step_time_s for step in warmup],
        device_times if len(device_times) == len(measured) else [],
    )
    flags = list(dict.fromkeys(flag for s in summaries for flag in s.flags))
    rank0 = summaries[0]
    return replace(
        base,
        throughput_samples_per_s=config.global_batch_size * len(step_times) / sum(step_times),
        warmup_stable=all(s.warmup_stable for s in summaries),
        flags=(*flags, POWER_FLAG),
        device_before=rank0.device_before,
        device_after=rank0.device_after,
        device_flags=rank0.device_flags,
        straggler_spread=straggler_spread(measured),
    )


def stop_workers(workers: Sequence[_Worker]) -> None:
    """Ask every worker to stop, then SIGTERM, then SIGKILL the ones still running; return once all have exited.
    Their pipes are read meanwhile: a worker blocked writing to a full pipe would never exit."""
    for worker in workers:
        worker.stop.set()
    for grace_s, signum in ((STOP_GRACE_S, signal.SIGTERM), (TERMINATE_GRACE_S, signal.SIGKILL), (None, None)):
        deadline_s = None if grace_s is None else time.monotonic() + grace_s
        while any(w.process.is_alive() for w in workers) and (deadline_s is None or time.monotonic() < deadline_s):
            _drain([w.receiver for w in workers if not w.receiver.closed])
            for worker in workers:
                worker.process.join(0)
        alive = [w for w in workers if w.process.is_alive()]
        if not alive or signum is None:
            break
        for worker in alive:
            log.warning("%s did not stop within %.0f s: sending %s", worker.describe(), grace_s, signum.name)
            assert worker.process.pid is not None  # alive, so started
            with suppress(ProcessLookupError):
                os.kill(worker.process.pid, signum)
    for worker in workers:
        worker.process.join()
        worker.receiver.close()


def _ready(receivers: list[Connection]) -> list[Connection]:
    """The receivers with something to read (or closed at the other end), within CANCEL_POLL_S."""
    # wait answers with the very objects it was given: these connections.
    return cast(list[Connection], wait(receivers, timeout=CANCEL_POLL_S))


def _drain(receivers: list[Connection]) -> None:
    if not receivers:
        time.sleep(CANCEL_POLL_S)
        return
    for receiver in _ready(receivers):
        try:
            receiver.recv()
        except (EOFError, OSError):
            receiver.close()
