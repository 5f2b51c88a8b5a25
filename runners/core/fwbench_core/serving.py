"""Serving scenarios (MLPerf Inference LoadGen's single_stream, server and offline): the queries, their arrival
times, the queue, dynamic batching, per-query latencies, and the percentiles their number supports.

The harness owns the queries and their timing. A workload is still stepped only at the batch size it built, through
`run_batch`, which returns the step's start and the time the device finished it (after synchronize), and under
Mode.GENERATE when its first tokens were on the host (serving_generation turns those into the figures)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .choices import Mode, Scenario, Strategy
from .errors import Cancelled, InvalidArgument
from .limits import MAX_BATCH_TIMEOUT_MS, MAX_QUERY_COUNT, MAX_SEED, MAX_TARGET_QPS, in_range
from .runs import RunRequest, Serving

# single_stream and server measure at least this many queries by default: enough to support a p99 (below).
DEFAULT_MIN_QUERIES = 300
# offline measures this many batches' samples by default.
OFFLINE_DEFAULT_BATCHES = 8
# The summary's percentile fields and the quantile each reports.
PERCENTILES = {"p50_latency_s": 0.5, "p90_latency_s": 0.9, "p99_latency_s": 0.99}
# A p-quantile is reported only where its one-sided upper confidence bound at this level falls within the sample.
EVIDENCE_CONFIDENCE = 0.95
# How often a wait for the next arrival, or for a batch to fill, looks at cancellation.
CANCEL_POLL_S = 0.05
OFFLINE_PERCENTILE_REASON = (
    "offline issues every query at once: a query's latency is its place in the batch order, not a wait anyone "
    "sees; offline's figure is its throughput"
)


@dataclass(frozen=True)
class BatchTimes:
    """One step on the timing clock: its start, its end (the device finished), and for a generation request the
    moment its prefill's first tokens were on the host (None outside Mode.GENERATE)."""

    start_s: float
    end_s: float
    first_token_s: float | None = None


RunBatch = Callable[[], BatchTimes]


class Clock(Protocol):
    def now_s(self) -> float: ...

    def sleep_until(self, t_s: float) -> None: ...


@dataclass(frozen=True)
class SystemClock:
    """`now`'s time, and real sleeps; the same clock as the step timings, so that arrivals and steps compare."""

    now: Callable[[], float] = time.perf_counter

    def now_s(self) -> float:
        return self.now()

    def sleep_until(self, t_s: float) -> None:
        time.sleep(max(0.0, t_s - self.now()))


@dataclass(frozen=True)
class QueryBatch:
    """Completed queries in arrival order: latency_s[0] is the run's measured query number first_index."""

    latency_s: tuple[float, ...]
    queue_s: tuple[float, ...]
    first_index: int
    first_token_latency_s: tuple[float, ...] = ()  # Mode.GENERATE: arrival to first token; empty otherwise


@dataclass(frozen=True)
class ServingSummary:
    scenario: Scenario
    query_count: int
    sample_count: int  # real samples served, padding excluded: what a per-sample energy figure divides by
    duration_s: float  # first arrival (or issue) to last completion
    achieved_qps: float
    throughput_samples_per_s: float
    mean_latency_s: float
    mean_batch_queries: float  # real (unpadded) queries per step
    target_qps: float
    p50_latency_s: float | None = None
    p90_latency_s: float | None = None
    p99_latency_s: float | None = None
    reasons: dict[str, str] = field(default_factory=dict)  # percentile field -> why it is unset
    # Mode.GENERATE (serving_generation): per query, from arrival to its first token, and its decode time per token.
    p50_first_token_latency_s: float | None = None
    p90_first_token_latency_s: float | None = None
    p99_first_token_latency_s: float | None = None
    p50_time_per_output_token_s: float | None = None
    p90_time_per_output_token_s: float | None = None
    p99_time_per_output_token_s: float | None = None
    generated_tokens_per_s: float = 0.0  # real prompts x new tokens over duration_s


def arrival_offsets_s(seed: int, target_qps: float, count: int) -> np.ndarray:
    """Seconds from the scenario's start to each of `count` arrivals: exponential gaps at `target_qps`, drawn by
    inversion from the seeded Generator's uniform doubles, a stream numpy keeps from version to version, so that
    runners in different environments see the same times. A longer count extends a shorter one's times."""
    uniform = np.random.default_rng(seed).random(count)
    return np.cumsum(-np.log1p(-uniform) / target_qps)


def default_server_query_count(seed: int, target_qps: float, min_duration_s: float) -> int:
    """server's default count: at least DEFAULT_MIN_QUERIES, and enough that the arrivals last at least
    min_duration_s (at most MAX_QUERY_COUNT)."""
    guess = min(MAX_QUERY_COUNT, max(DEFAULT_MIN_QUERIES, math.ceil(1.5 * target_qps * min_duration_s) + 100))
    offsets = arrival_offsets_s(seed, target_qps, guess)
    reach = int(np.searchsorted(offsets, min_duration_s))
    if reach == guess < MAX_QUERY_COUNT:
        offsets = arrival_offsets_s(seed, target_qps, MAX_QUERY_COUNT)
        reach = int(np.searchsorted(offsets, min_duration_s))
    return min(MAX_QUERY_COUNT, max(DEFAULT_MIN_QUERIES, reach + 1))


def resolve_serving(
    request: RunRequest, mode: Mode, batch_size: int, strategy: Strategy, min_measure_s: float
) -> Serving | None:
    """The scenario's load with its defaults filled in; None without a scenario (an empty serving is none). `mode`
    is the request's, which the caller has required to be set."""
    asked = request.serving
    if asked is None:
        return None
    scenario = asked.scenario
    if scenario is None:
        if asked == Serving(None):
            return None
        accepted = ", ".join(s.value for s in Scenario)
        raise InvalidArgument(f"serving.scenario must be set where serving is; accepted values: {accepted}")
    named = f"serving.scenario {scenario.value}"
    if mode not in (Mode.INFER, Mode.GENERATE):
        raise InvalidArgument(f"{named} applies to modes infer and generate only, not mode {mode.value}")
    if strategy is not Strategy.SINGLE:
        raise InvalidArgument(
            f"{named} runs on one device of one runner (strategy single), not strategy {strategy.value}"
        )
    if not 0 <= asked.query_count <= MAX_QUERY_COUNT:
        raise InvalidArgument(
            f"serving.query_count must be between 0 (the default) and {MAX_QUERY_COUNT}, got {asked.query_count}"
        )
    if scenario is not Scenario.SERVER:
        for field, value in (
            ("target_qps", asked.target_qps),
            ("batch_timeout_ms", asked.batch_timeout_ms),
            ("arrival_seed", asked.arrival_seed),
        ):
            if value:
                raise InvalidArgument(f"serving.{field} applies to scenario server only; leave it 0 for {named}")
        if scenario is Scenario.OFFLINE:
            return Serving(scenario, query_count=asked.query_count or OFFLINE_DEFAULT_BATCHES * batch_size)
        # How long a query takes is known only by running it: the default count is a minimum, as measured_steps is.
        return Serving(
            scenario,
            query_count=asked.query_count or DEFAULT_MIN_QUERIES,
            min_duration_s=0.0 if asked.query_count else min_measure_s,
        )
    if not 0.0 < asked.target_qps <= MAX_TARGET_QPS:
        raise InvalidArgument(
            f"serving.target_qps must be above 0 and at most {MAX_TARGET_QPS:.0f} queries per second for {named}, "
            f"got {asked.target_qps:g}"
        )
    if not 0.0 <= asked.batch_timeout_ms <= MAX_BATCH_TIMEOUT_MS:
        raise InvalidArgument(
            f"serving.batch_timeout_ms must be between 0 and {MAX_BATCH_TIMEOUT_MS:.0f}, got {asked.batch_timeout_ms:g}"
        )
    seed = in_range("serving.arrival_seed", asked.arrival_seed, 0, MAX_SEED) or request.seed
    count = asked.query_count or default_server_query_count(seed, asked.target_qps, min_measure_s)
    return Serving(
        scenario,
        target_qps=asked.target_qps,
        query_count=count,
        batch_timeout_ms=asked.batch_timeout_ms,
        arrival_seed=seed,
    )


def evidence_min_queries(quantile: float) -> int:
    """Queries needed for the quantile's one-sided upper confidence bound to be an observed latency."""
    return math.ceil(math.log(1 - EVIDENCE_CONFIDENCE) / math.log(quantile))


def latency_percentiles(
    scenario: Scenario, latency_s: Sequence[float], fields: dict[str, float] = PERCENTILES
) -> tuple[dict[str, float], dict[str, str]]:
    """Each percentile field (field -> quantile) the query count supports (numpy's default, linear interpolation),
    and why the others are unset."""
    values, reasons = {}, {}
    for name, quantile in fields.items():
        needed = evidence_min_queries(quantile)
        if scenario is Scenario.OFFLINE:
            reasons[name] = OFFLINE_PERCENTILE_REASON
        elif len(latency_s) < needed:
            reasons[name] = (
                f"{len(latency_s)} queries cannot support {name.split('_')[0]}: its one-sided "
                f"{EVIDENCE_CONFIDENCE:.0%} upper bound needs at least {needed}"
            )
        else:
            values[name] = float(np.percentile(latency_s, quantile * 100))
    return values, reasons


class ScenarioRun:
    """One scenario's measured queries: `batches()` serves them, yielding between steps the number of queries
    completed so far; `take()` hands on the completed ones not yet taken; `summary()` once every query is served."""

    def __init__(
        self, serving: Serving, batch_size: int, run_batch: RunBatch, clock: Clock, cancelled: Callable[[], bool]
    ) -> None:
        assert serving.scenario is not None  # a resolved serving, resolve_serving's, always names its scenario
        self.serving = serving
        self.scenario: Scenario = serving.scenario
        self.batch_size = batch_size
        self._run_batch = run_batch
        self._clock = clock
        self._cancelled = cancelled
        self._latency_s: list[float] = []
        self._queue_s: list[float] = []
        self._first_token_latency_s: list[float] = []  # Mode.GENERATE: each query's arrival to first token
        self._taken = 0
        self._steps = 0
        self._first_s = 0.0
        self._last_end_s = 0.0

    def batches(self) -> Iterator[int]:
        loops = {
            Scenario.SINGLE_STREAM: self._single_stream,
            Scenario.SERVER: self._server,
            Scenario.OFFLINE: self._offline,
        }
        return loops[self.scenario]()

    @property
    def latency_s(self) -> tuple[float, ...]:
        return tuple(self._latency_s)

    @property
    def first_token_latency_s(self) -> tuple[float, ...]:
        return tuple(self._first_token_latency_s)

    def take(self) -> QueryBatch | None:
        if self._taken == len(self._latency_s):
            return None
        first, self._taken = self._taken, len(self._latency_s)
        return QueryBatch(
            tuple(self._latency_s[first:]),
            tuple(self._queue_s[first:]),
            first,
            tuple(self._first_token_latency_s[first:]),
        )

    def summary(self) -> ServingSummary:
        count = len(self._latency_s)
        samples = count * self.batch_size if self.scenario is Scenario.SINGLE_STREAM else count
        duration_s = self._last_end_s - self._first_s
        percentiles, reasons = latency_percentiles(self.scenario, self._latency_s)
        return ServingSummary(
            scenario=self.scenario,
            query_count=count,
            sample_count=samples,
            duration_s=duration_s,
            achieved_qps=count / duration_s,
            throughput_samples_per_s=samples / duration_s,
            mean_latency_s=float(np.mean(self._latency_s)),
            mean_batch_queries=count / self._steps,
            target_qps=self.serving.target_qps,
            reasons=reasons,
            **percentiles,
        )

    def _check_cancelled(self) -> None:
        if self._cancelled():
            raise Cancelled(
                f"{self.scenario.value} scenario cancelled by the client after {len(self._latency_s)} "
                f"of {self.serving.query_count} queries"
            )

    def _wait_until(self, t_s: float) -> None:
        """Sleep until `t_s`, looking at cancellation at least every CANCEL_POLL_S."""
        while (now_s := self._clock.now_s()) < t_s:
            self._check_cancelled()
            self._clock.sleep_until(min(t_s, now_s + CANCEL_POLL_S))

    def _step(self, arrivals_s: Sequence[float] | np.ndarray) -> None:
        """One step at the built batch size serving the queries that arrived (or were issued) at `arrivals_s`."""
        self._check_cancelled()
        times = self._run_batch()
        self._latency_s.extend(float(times.end_s - a) for a in arrivals_s)
        self._queue_s.extend(float(times.start_s - a) for a in arrivals_s)
        if times.first_token_s is not None:
            self._first_token_latency_s.extend(float(times.first_token_s - a) for a in arrivals_s)
        self._steps += 1
        self._last_end_s = times.end_s

    def _single_stream(self) -> Iterator[int]:
        """Each query is one batch, issued when the previous completes: its latency is its step's."""
        target, min_duration_s = self.serving.query_count, self.serving.min_duration_s
        while len(self._latency_s) < target or (
            self._last_end_s - self._first_s < min_duration_s and len(self._latency_s) < MAX_QUERY_COUNT
        ):
            issued_s = self._clock.now_s()
            if not self._latency_s:
                self._first_s = issued_s
            self._step([issued_s])
            yield len(self._latency_s)

    def _offline(self) -> Iterator[int]:
        """Every query issued at once, served in batches of batch_size; the last batch padded."""
        count = self.serving.query_count
        self._first_s = self._clock.now_s()
        for first in range(0, count, self.batch_size):
            self._step([self._first_s] * min(self.batch_size, count - first))
            yield len(self._latency_s)

    def _server(self) -> Iterator[int]:
        """Poisson arrivals; a step starts once batch_size queries wait, or the oldest has waited
        batch_timeout_ms; it serves up to batch_size of the waiting queries in arrival order, padded."""
        count, size = self.serving.query_count, self.batch_size
        timeout_s = self.serving.batch_timeout_ms / 1000.0
        arrivals_s = self._clock.now_s() + arrival_offsets_s(self.serving.arrival_seed, self.serving.target_qps, count)
        self._first_s = float(arrivals_s[0])
        served = 0
        while served < count:
            self._check_cancelled()
            now_s = self._clock.now_s()
            waiting = int(np.searchsorted(arrivals_s, now_s, side="right")) - served
            if waiting <= 0:
                self._wait_until(arrivals_s[served])
                continue
            if waiting < size:
                fills_at_s = arrivals_s[served + size - 1] if served + size <= count else math.inf
                starts_at_s = min(arrivals_s[served] + timeout_s, fills_at_s)
                if now_s < starts_at_s:
                    self._wait_until(starts_at_s)
                    continue
            batch = min(waiting, size)
            self._step(arrivals_s[served : served + batch])
            served += batch
            yield served
