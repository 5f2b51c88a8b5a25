"""The timing loop: every step is timed from its start until the device has finished it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from .backend import MemoryReading, Workload
from .errors import Cancelled
from .spec import Mode, Phase, RunConfig

# Step timings leave the runner in batches, at most this often, so that
# streaming costs no round trip per step; flushing happens between steps.
FLUSH_INTERVAL_S = 0.5


@dataclass(frozen=True)
class StepSample:
    index: int
    warmup: bool
    start_s: float
    step_time_s: float


@dataclass(frozen=True)
class StepBatch:
    steps: tuple[StepSample, ...]


@dataclass(frozen=True)
class Progress:
    phase: Phase
    steps_done: int
    steps_total: int


@dataclass(frozen=True)
class Summary:
    measured_steps: int
    mean_step_time_s: float
    median_step_time_s: float
    p95_step_time_s: float
    throughput_samples_per_s: float
    peak_memory: MemoryReading
    time_to_first_step_s: float
    started_at_unix_s: float
    finished_at_unix_s: float


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (the same definition as numpy's default)."""
    if len(values) == 1:
        return values[0]
    cut = statistics.quantiles(values, n=100, method="inclusive")
    return cut[int(pct) - 1]


def summarize(
    config: RunConfig,
    measured: Sequence[float],
    peak_memory: MemoryReading,
    time_to_first_step_s: float,
    started_at_unix_s: float,
    finished_at_unix_s: float,
) -> Summary:
    return Summary(
        measured_steps=len(measured),
        mean_step_time_s=statistics.fmean(measured),
        median_step_time_s=statistics.median(measured),
        p95_step_time_s=percentile(measured, 95),
        throughput_samples_per_s=config.batch_size * len(measured) / sum(measured),
        peak_memory=peak_memory,
        time_to_first_step_s=time_to_first_step_s,
        started_at_unix_s=started_at_unix_s,
        finished_at_unix_s=finished_at_unix_s,
    )


def time_steps(
    workload: Workload,
    config: RunConfig,
    *,
    build_started_s: float,
    started_at_unix_s: float,
    cancelled: Callable[[], bool],
    clock: Callable[[], float] = time.perf_counter,
) -> Iterator[StepBatch | Progress | Summary]:
    """Run warm-up then measured steps, yielding batches of timings, progress and the summary."""
    step = workload.train_step if config.mode is Mode.TRAIN else workload.infer_step
    synchronize = workload.synchronize
    warmup = config.warmup_steps
    total = warmup + config.measured_steps
    measured: list[float] = []
    pending: list[StepSample] = []
    time_to_first_step_s = 0.0
    yield Progress(Phase.WARMUP if warmup else Phase.MEASURE, 0, total)
    last_flush_s = clock()
    for index in range(total):
        if cancelled():
            raise Cancelled(f"run of {config.model.name} cancelled by the client after {index} of {total} steps")
        start_s = clock()
        step()
        synchronize()
        end_s = clock()
        step_time_s = end_s - start_s
        if index == 0:
            time_to_first_step_s = end_s - build_started_s
        in_warmup = index < warmup
        if not in_warmup:
            measured.append(step_time_s)
        pending.append(StepSample(index, in_warmup, start_s, step_time_s))
        phase_ends = index == warmup - 1 or index == total - 1
        if phase_ends or end_s - last_flush_s >= FLUSH_INTERVAL_S:
            yield StepBatch(tuple(pending))
            pending = []
            next_phase = Phase.WARMUP if index + 1 < warmup else Phase.MEASURE
            if index + 1 < total:
                yield Progress(next_phase, index + 1, total)
            last_flush_s = clock()
    finished_at_unix_s = time.time()
    yield Progress(Phase.DONE, total, total)
    yield summarize(
        config,
        measured,
        workload.peak_memory(),
        time_to_first_step_s,
        started_at_unix_s,
        finished_at_unix_s,
    )
