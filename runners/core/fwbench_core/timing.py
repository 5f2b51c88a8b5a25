"""The timing loop: every step is timed from its start until the device has finished it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace

from .backend import MemoryReading, Workload
from .choices import Mode, Phase
from .device_state import DeviceState, device_flags
from .devices import DeviceRef
from .errors import Cancelled
from .generation import GenerationSummary, RequestTimes, run_request, summarize_generation
from .limits import MAX_MEASURED_STEPS
from .power import EnergySummary
from .runs import RunConfig, WarmupUntilStable
from .serving import BatchTimes, Clock, QueryBatch, ScenarioRun, ServingSummary, SystemClock
from .serving_generation import with_generation

# Step timings leave the runner in batches, at most this often, so that
# streaming costs no round trip per step; flushing happens between steps.
FLUSH_INTERVAL_S = 0.5


# Where the device times steps too (CUDA events), wall-clock step times must
# agree with it to within this fraction, or the run is flagged.
TIMER_DISAGREEMENT_LIMIT = 0.02


@dataclass(frozen=True)
class StepSample:
    index: int
    warmup: bool
    start_s: float
    step_time_s: float
    device_time_s: float | None = None
    # A distributed step: each worker process's own time, in local rank order; step_time_s is the slowest.
    rank_step_time_s: tuple[float, ...] = ()
    # A generation request (Mode.GENERATE): its prefill, and its decode steps together.
    time_to_first_token_s: float | None = None
    decode_time_s: float | None = None


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
    warmup_steps_run: int = 0
    warmup_stable: bool = True
    timer_disagreement: float | None = None
    flags: tuple[str, ...] = ()
    energy: EnergySummary | None = None
    device_before: DeviceState | None = None  # read as the run took the device, before the build
    device_after: DeviceState | None = None  # read after the last step, before the model is released
    device_flags: tuple[str, ...] = ()  # how the device or host was not quiet around the run
    straggler_spread: float | None = None  # median (slowest - fastest rank) / slowest over measured steps
    build_reused: bool = False  # stepped a workload kept from the previous run (RunRequest.reuse_key)
    first_step_traced: bool = False  # the first step traced or compiled the step function for this input shape
    serving: ServingSummary | None = None  # set for a run under a scenario
    build_continued: bool = False  # stepped the kept workload as the last run left it (RunRequest.continue_reuse)
    process_id: int = 0  # the process that ran the steps
    generation: GenerationSummary | None = None  # set for a Mode.GENERATE run


def samples_processed(config: RunConfig, summary: Summary) -> int:
    """Real samples the measured phase served: under a scenario its queries' (padding excluded); in generation the
    tokens its requests made, so that energy per sample is energy per token."""
    tokens_per_step = config.new_tokens or 1
    if summary.serving:
        return summary.serving.sample_count * tokens_per_step
    return config.batch_size * summary.measured_steps * tokens_per_step


def with_device_state(summary: Summary, ref: DeviceRef, before: DeviceState, after: DeviceState) -> Summary:
    return replace(summary, device_before=before, device_after=after, device_flags=device_flags(ref, before, after))


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (the same definition as numpy's default)."""
    if len(values) == 1:
        return values[0]
    cut = statistics.quantiles(values, n=100, method="inclusive")
    return cut[int(pct) - 1]


def coefficient_of_variation(values: Sequence[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


def is_stable(warmup_times: Sequence[float], rule: WarmupUntilStable | None) -> bool:
    """Whether the last `window` warm-up steps vary less than the rule's threshold."""
    if rule is None or len(warmup_times) < rule.window:
        return False
    return coefficient_of_variation(warmup_times[-rule.window :]) < rule.cv_threshold


def timer_disagreement(wall_s: Sequence[float], device_s: Sequence[float]) -> float | None:
    if not device_s:
        return None
    return statistics.median(abs(w - d) / w for w, d in zip(wall_s, device_s))


def summarize(
    config: RunConfig,
    measured: Sequence[float],
    peak_memory: MemoryReading,
    time_to_first_step_s: float,
    started_at_unix_s: float,
    finished_at_unix_s: float,
    warmup_times: Sequence[float] = (),
    device_times: Sequence[float] = (),
) -> Summary:
    flags = []
    until_stable = config.warmup_until_stable
    stable = until_stable is None or is_stable(warmup_times, until_stable)
    if until_stable is not None and not stable:
        window = until_stable.window
        flags.append(
            f"warm-up did not stabilise within {len(warmup_times)} steps: the last {window} varied by "
            f"{coefficient_of_variation(warmup_times[-window:]):.1%}, above {until_stable.cv_threshold:.1%}"
        )
    disagreement = timer_disagreement(measured, device_times)
    if disagreement is not None and disagreement > TIMER_DISAGREEMENT_LIMIT:
        flags.append(
            f"wall-clock and device (CUDA event) step times disagree by {disagreement:.1%}, "
            f"above {TIMER_DISAGREEMENT_LIMIT:.0%}: the wall-clock figures are not trustworthy"
        )
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
        warmup_steps_run=len(warmup_times),
        warmup_stable=stable,
        timer_disagreement=disagreement,
        flags=tuple(flags),
    )


def _agree(workload: Workload, model: str, world_size: int, phase_ends: bool, cancel: bool, steps_done: int) -> bool:
    """Between steps, outside their timings: the phase ends once every rank says so, and the run is cancelled
    once any rank was told to stop, so that every rank runs the same steps and none waits in a collective."""
    ends, cancels = workload.agree((int(phase_ends), int(cancel)))
    if cancels:
        raise Cancelled(f"run of {model} cancelled by the client after {steps_done} steps")
    return ends == world_size


class _StepTimer:
    """Runs steps, each timed from its start until the device finished it; keeps their samples until flushed, and
    their times by phase for the summary."""

    def __init__(
        self, workload: Workload, config: RunConfig, clock: Callable[[], float], build_started_s: float
    ) -> None:
        self._step = workload.train_step if config.mode is Mode.TRAIN else workload.infer_step
        self._workload = workload
        self._new_tokens = config.new_tokens
        self._synchronize = workload.synchronize
        self._device_time_s = workload.device_time_s
        self._clock = clock
        self._build_started_s = build_started_s
        self.index = 0
        self.pending: list[StepSample] = []
        self.time_to_first_step_s = 0.0
        self.last_end_s = 0.0
        self.warmup_times: list[float] = []
        self.measured: list[float] = []
        self.measured_s = 0.0
        self.device_times: list[float] = []  # of measured steps, where the device times them
        self.requests: list[RequestTimes] = []  # measured generation requests

    def _sample(self, warmup: bool) -> StepSample:
        if self._new_tokens is not None:
            request = run_request(self._workload, self._new_tokens, self._clock)
            if not warmup:
                self.requests.append(request)
            return StepSample(
                self.index,
                warmup,
                request.start_s,
                request.end_s - request.start_s,
                time_to_first_token_s=request.time_to_first_token_s,
                decode_time_s=request.decode_time_s,
            )
        start_s = self._clock()
        self._step()
        self._synchronize()
        end_s = self._clock()
        return StepSample(self.index, warmup, start_s, end_s - start_s, self._device_time_s())

    def run(self, warmup: bool) -> StepSample:
        sample = self._sample(warmup)
        end_s = sample.start_s + sample.step_time_s
        if self.index == 0:
            self.time_to_first_step_s = end_s - self._build_started_s
        self.pending.append(sample)
        self.index += 1
        self.last_end_s = end_s
        if warmup:
            self.warmup_times.append(sample.step_time_s)
        else:
            self.measured.append(sample.step_time_s)
            self.measured_s += sample.step_time_s
            if sample.device_time_s is not None:
                self.device_times.append(sample.device_time_s)
        return sample

    def flush(self) -> StepBatch:
        batch, self.pending = StepBatch(tuple(self.pending)), []
        return batch


def time_steps(
    workload: Workload,
    config: RunConfig,
    *,
    build_started_s: float,
    started_at_unix_s: float,
    cancelled: Callable[[], bool],
    clock: Callable[[], float] = time.perf_counter,
    serving_clock: Clock | None = None,
) -> Iterator[StepBatch | QueryBatch | Progress | Summary]:
    """Warm up (by count, or until stable within that count), then measure: at least measured_steps and at least
    min_measure_s, or under a scenario its queries (the waits between them on `serving_clock`, by default real
    sleeps on `clock`). Yields batches of timings, progress and the summary."""
    timer = _StepTimer(workload, config, clock, build_started_s)
    total, last_flush_s = yield from _steps(workload, config, timer, cancelled, clock)
    done, scenario, serving = timer.index, None, None
    if config.serving is not None:

        def run_batch() -> BatchTimes:
            sample = timer.run(False)
            prefill_s = sample.time_to_first_token_s
            return BatchTimes(
                sample.start_s, timer.last_end_s, None if prefill_s is None else sample.start_s + prefill_s
            )

        scenario = ScenarioRun(
            config.serving, config.batch_size, run_batch, serving_clock or SystemClock(clock), cancelled
        )
        total = yield from _queries(scenario, timer, total, last_flush_s, clock)
        serving = scenario.summary()
        if config.new_tokens is not None:
            serving = with_generation(serving, scenario.latency_s, scenario.first_token_latency_s, config.new_tokens)
        done = len(timer.warmup_times) + serving.query_count
    if timer.pending:
        yield timer.flush()
    if scenario is not None and (queries := scenario.take()) is not None:
        yield queries
    finished_at_unix_s = time.time()
    yield Progress(Phase.DONE, done, max(total, done))
    summary = summarize(
        config,
        timer.measured,
        workload.peak_memory(),
        timer.time_to_first_step_s,
        started_at_unix_s,
        finished_at_unix_s,
        timer.warmup_times,
        timer.device_times,
    )
    if timer.requests and config.new_tokens is not None:
        generation = summarize_generation(
            timer.requests, config.batch_size, config.input_shape[0], config.new_tokens, workload.generated_tokens()
        )
        summary = replace(summary, generation=generation)
    yield summary if serving is None else replace(summary, serving=serving)


def _steps(
    workload: Workload, config: RunConfig, timer: _StepTimer, cancelled: Callable[[], bool], clock: Callable[[], float]
) -> Generator[StepBatch | Progress, None, tuple[int, float]]:
    """The warm-up, then the measured steps (a scenario's queries measure instead), streamed as they run. Returns
    the progress total and when timings last left."""
    warming = config.warmup_steps > 0
    total = config.progress_total
    yield Progress(Phase.WARMUP if warming else Phase.MEASURE, 0, total)
    last_flush_s = clock()
    # Ends once the measuring phase has, as every rank agreed for a distributed run.
    measuring_ends = False
    while not measuring_ends:
        # Under a scenario, its queries are the measuring phase.
        if len(timer.measured) >= MAX_MEASURED_STEPS or (config.serving is not None and not warming):
            break
        # A distributed run's ranks learn of a cancellation together, in the agreement after a step: one that
        # stopped here alone would leave the others waiting in the next step's collective.
        if config.place is None and cancelled():
            raise Cancelled(f"run of {config.model.name} cancelled by the client after {timer.index} steps")
        timer.run(warming)
        if warming:
            phase_ends = len(timer.warmup_times) >= config.warmup_steps or is_stable(
                timer.warmup_times, config.warmup_until_stable
            )
        else:
            phase_ends = len(timer.measured) >= config.measured_steps and timer.measured_s >= config.min_measure_s
        if config.place is not None:
            world_size = config.place.world_size
            phase_ends = _agree(workload, config.model.name, world_size, phase_ends, cancelled(), timer.index)
        if phase_ends or timer.last_end_s - last_flush_s >= FLUSH_INTERVAL_S:
            yield timer.flush()
            measuring_ends = phase_ends and not warming
            warming = warming and not phase_ends
            if not measuring_ends:
                total = max(total, timer.index + 1)
                yield Progress(Phase.WARMUP if warming else Phase.MEASURE, timer.index, total)
            last_flush_s = clock()
    return total, last_flush_s


def _queries(
    scenario: ScenarioRun, timer: _StepTimer, total: int, last_flush_s: float, clock: Callable[[], float]
) -> Generator[StepBatch | QueryBatch | Progress, None, int]:
    """A scenario's queries, their timings and latencies leaving between queries at most every FLUSH_INTERVAL_S.
    Returns the progress total."""
    for queries_done in scenario.batches():
        if timer.last_end_s - last_flush_s >= FLUSH_INTERVAL_S:
            yield timer.flush()
            if (queries := scenario.take()) is not None:
                yield queries
            # single_stream's default count is a minimum: it may run past the total.
            total = max(total, len(timer.warmup_times) + queries_done)
            yield Progress(Phase.MEASURE, len(timer.warmup_times) + queries_done, total)
            last_flush_s = clock()
    return total
