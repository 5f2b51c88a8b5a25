"""Serving scenarios in the runner core, on a fake clock whose steps take set times: the arrival process, queueing,
dynamic batching, the percentile evidence rule, offline and single_stream; then over real gRPC on loopback with the
fake runner: cancellation mid-scenario and the requests refused."""

from __future__ import annotations

import itertools
import math
import time

import grpc
import numpy as np
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.core import ScriptedWorkload, resolve_request, small

from fwbench_core import serving as serving_module
from fwbench_core.choices import Phase, Scenario
from fwbench_core.errors import Cancelled
from fwbench_core.runs import Serving
from fwbench_core.serving import (
    CANCEL_POLL_S,
    MAX_QUERY_COUNT,
    OFFLINE_PERCENTILE_REASON,
    BatchTimes,
    QueryBatch,
    ScenarioRun,
    arrival_offsets_s,
    default_server_query_count,
    evidence_min_queries,
)
from fwbench_core.timing import Progress, StepBatch, Summary, time_steps

START_S = 1000.0
RPC_TIMEOUT_S = 30


class ServingClock:
    """A fake clock for the steps (called) and the scenario's waits (now_s, sleep_until): it moves only when a
    step runs or the scenario sleeps."""

    def __init__(self, start_s: float = START_S) -> None:
        self.now = start_s
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def now_s(self) -> float:
        return self.now

    def sleep_until(self, t_s: float) -> None:
        self.sleeps.append(t_s)
        self.now = max(self.now, t_s)


def serve(serving: Serving, batch_size: int, step_s, clock=None, cancelled=lambda: False):
    """Serve the scenario with steps of `step_s` seconds each (or one per step from a list); the scenario, the
    starts of its steps, and its queries."""
    clock = clock or ServingClock()
    times = iter(step_s) if isinstance(step_s, list) else itertools.repeat(step_s)
    starts: list[float] = []

    def run_batch() -> BatchTimes:
        starts.append(clock.now)
        clock.now += next(times)
        return BatchTimes(starts[-1], clock.now)

    scenario = ScenarioRun(serving, batch_size, run_batch, clock, cancelled)
    for _ in scenario.batches():
        pass
    return scenario, starts, scenario.take()


@pytest.fixture
def planted_arrivals(monkeypatch):
    """Arrivals at the offsets a test plants, instead of the seeded process's."""

    def plant(offsets_s: list[float]) -> None:
        monkeypatch.setattr(serving_module, "arrival_offsets_s", lambda seed, qps, count: np.array(offsets_s[:count]))

    return plant


# --- the arrival process -------------------------------------------------------------------------------------------


def test_arrivals_are_seeded_and_poisson_at_the_target_rate():
    offsets = arrival_offsets_s(7, 200.0, 100_000)
    assert np.array_equal(offsets, arrival_offsets_s(7, 200.0, 100_000))
    assert not np.array_equal(offsets[:100], arrival_offsets_s(8, 200.0, 100))
    # A longer run extends a shorter one's arrivals: the first queries arrive alike whatever the count.
    assert np.array_equal(arrival_offsets_s(7, 200.0, 1000), offsets[:1000])
    gaps = np.diff(offsets, prepend=0.0)
    assert (gaps > 0).all()
    # Exponential gaps: mean 1 / rate (standard error 0.3% here), and a coefficient of variation of 1.
    assert gaps.mean() == pytest.approx(1 / 200.0, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.02)
    # Poisson counts: as many arrivals per second as the rate, with a variance equal to the mean.
    per_second = np.bincount(offsets.astype(int))[:-1]
    assert per_second.mean() == pytest.approx(200.0, rel=0.02)
    assert per_second.var() / per_second.mean() == pytest.approx(1.0, abs=0.25)


def test_the_server_scenario_serves_queries_at_the_seeded_arrival_times():
    serving = Serving(Scenario.SERVER, target_qps=100.0, query_count=50, arrival_seed=3)
    scenario, starts, queries = serve(serving, 1, 1e-6)
    # A step far shorter than the gaps: every query starts as it arrives.
    assert starts == pytest.approx(list(START_S + arrival_offsets_s(3, 100.0, 50)), abs=1e-9)
    assert queries.queue_s == pytest.approx([0.0] * 50, abs=1e-9)
    assert queries.latency_s == pytest.approx([1e-6] * 50)
    assert scenario.summary().duration_s == pytest.approx(starts[-1] + 1e-6 - starts[0])


def test_default_server_count_covers_the_minimum_time_and_at_least_300_queries():
    count = default_server_query_count(5, 1000.0, 2.0)
    offsets = arrival_offsets_s(5, 1000.0, count)
    assert offsets[-1] >= 2.0 > offsets[-2]
    assert default_server_query_count(5, 10.0, 1.0) == 300
    assert default_server_query_count(5, 1e6, 86_400.0) == MAX_QUERY_COUNT


# --- queueing and dynamic batching ---------------------------------------------------------------------------------


def test_a_step_slower_than_the_arrivals_builds_a_queue(planted_arrivals):
    planted_arrivals([0.1, 0.2, 0.3, 0.4])
    scenario, starts, queries = serve(Serving(Scenario.SERVER, target_qps=10.0, query_count=4), 1, 0.25)
    # Worked by hand: each query waits for the previous one's 0.25 s step; arrivals are 0.1 s apart.
    assert [s - START_S for s in starts] == pytest.approx([0.1, 0.35, 0.6, 0.85])
    assert queries.queue_s == pytest.approx((0.0, 0.15, 0.3, 0.45))
    assert queries.latency_s == pytest.approx((0.25, 0.4, 0.55, 0.7))
    summary = scenario.summary()
    assert summary.duration_s == pytest.approx(1.0)  # first arrival 0.1 to last completion 1.1
    assert summary.achieved_qps == pytest.approx(4.0)
    assert summary.mean_latency_s == pytest.approx(0.475)
    assert summary.mean_batch_queries == 1.0


def test_seeded_queueing_matches_the_lindley_recursion():
    serving = Serving(Scenario.SERVER, target_qps=200.0, query_count=2000, arrival_seed=11)
    step_s = 0.004  # 80% load: queues come and go
    _, _, queries = serve(serving, 1, step_s)
    completion, expected = -math.inf, []
    for arrival in START_S + arrival_offsets_s(11, 200.0, 2000):
        completion = max(arrival, completion) + step_s
        expected.append(completion - arrival)
    assert queries.latency_s == pytest.approx(expected, abs=1e-9)
    assert max(queries.queue_s) > 5 * step_s, "at 80% load some query waits several steps"


def test_dynamic_batching_starts_a_batch_when_full_or_when_the_oldest_timed_out(planted_arrivals):
    planted_arrivals([0.000, 0.001, 0.002, 0.003, 1.000, 1.002, 2.000])
    serving = Serving(Scenario.SERVER, target_qps=3.0, query_count=7, batch_timeout_ms=10.0)
    scenario, starts, queries = serve(serving, 4, 0.005)
    # Full at the fourth arrival; then two queries wait out the oldest's 10 ms; the last has none to wait for.
    assert [s - START_S for s in starts] == pytest.approx([0.003, 1.010, 2.010])
    assert queries.queue_s == pytest.approx((0.003, 0.002, 0.001, 0.0, 0.010, 0.008, 0.010))
    assert queries.latency_s == pytest.approx((0.008, 0.007, 0.006, 0.005, 0.015, 0.013, 0.015))
    # Three steps at the built batch of 4: the last two padded.
    assert scenario.summary().mean_batch_queries == pytest.approx(7 / 3)


def test_a_batch_takes_at_most_batch_size_of_the_waiting_queries_in_arrival_order(planted_arrivals):
    planted_arrivals([0.0, 0.1, 0.11, 0.12])
    scenario, starts, queries = serve(Serving(Scenario.SERVER, target_qps=10.0, query_count=4), 2, 0.5)
    # No timeout: the first query goes alone; three wait behind it, and the next step takes the first two.
    assert [s - START_S for s in starts] == pytest.approx([0.0, 0.5, 1.0])
    assert queries.latency_s == pytest.approx((0.5, 0.9, 0.89, 1.38))
    assert scenario.summary().mean_batch_queries == pytest.approx(4 / 3)


# --- the percentile evidence rule ----------------------------------------------------------------------------------


def test_the_queries_a_percentile_needs():
    assert [evidence_min_queries(q) for q in (0.5, 0.9, 0.99)] == [5, 29, 299]


@pytest.mark.parametrize("count", [298, 299])
def test_p99_is_reported_from_299_queries_and_its_absence_explained_below(count):
    step_s = [0.001 * (1 + i % 37) for i in range(count)]
    scenario, _, queries = serve(Serving(Scenario.SINGLE_STREAM, query_count=count), 1, step_s)
    summary = scenario.summary()
    assert summary.p50_latency_s == pytest.approx(np.percentile(step_s, 50))
    assert summary.p90_latency_s == pytest.approx(np.percentile(step_s, 90))
    if count == 298:
        assert summary.p99_latency_s is None
        assert summary.reasons == {
            "p99_latency_s": "298 queries cannot support p99: its one-sided 95% upper bound needs at least 299"
        }
    else:
        assert summary.p99_latency_s == pytest.approx(np.percentile(step_s, 99))
        assert summary.reasons == {}


def test_four_queries_support_no_percentile():
    summary = serve(Serving(Scenario.SINGLE_STREAM, query_count=4), 1, 0.25)[0].summary()
    assert (summary.p50_latency_s, summary.p90_latency_s, summary.p99_latency_s) == (None, None, None)
    assert summary.reasons["p50_latency_s"].endswith("needs at least 5")


# --- offline and single_stream -------------------------------------------------------------------------------------


def test_offline_serves_every_query_at_once_in_padded_batches():
    scenario, starts, queries = serve(Serving(Scenario.OFFLINE, query_count=10), 4, 0.5)
    assert len(starts) == 3  # 4 + 4 + 2, the last batch padded to 4
    assert queries.latency_s == (0.5,) * 4 + (1.0,) * 4 + (1.5,) * 2
    assert queries.queue_s == (0.0,) * 4 + (0.5,) * 4 + (1.0,) * 2
    summary = scenario.summary()
    assert (summary.query_count, summary.sample_count, summary.duration_s) == (10, 10, 1.5)
    assert summary.throughput_samples_per_s == pytest.approx(10 / 1.5)
    assert summary.mean_batch_queries == pytest.approx(10 / 3)
    assert summary.p50_latency_s is None and summary.reasons["p50_latency_s"] == OFFLINE_PERCENTILE_REASON


def test_single_stream_issues_each_query_when_the_previous_completes():
    scenario, starts, queries = serve(Serving(Scenario.SINGLE_STREAM, query_count=3), 8, [0.25, 0.5, 0.125])
    assert [s - START_S for s in starts] == [0.0, 0.25, 0.75]
    assert queries.latency_s == (0.25, 0.5, 0.125) and queries.queue_s == (0.0, 0.0, 0.0)
    summary = scenario.summary()
    # A query is a batch of 8 samples.
    assert (summary.query_count, summary.sample_count, summary.duration_s) == (3, 24, 0.875)
    assert summary.throughput_samples_per_s == pytest.approx(24 / 0.875)
    assert summary.achieved_qps == pytest.approx(3 / 0.875)


def test_single_stream_with_the_default_count_also_measures_the_minimum_time():
    scenario, starts, _ = serve(Serving(Scenario.SINGLE_STREAM, query_count=3, min_duration_s=1.0), 1, 0.25)
    assert len(starts) == 4 and scenario.summary().duration_s == 1.0


# --- through the timing loop ---------------------------------------------------------------------------------------


def scenario_events(serving: Serving, durations: list[float], warmup: int, batch_size: int = 2):
    clock = ServingClock()
    config = resolve_request(small(serving=serving, warmup_steps=warmup, batch_size=batch_size))
    workload = ScriptedWorkload(clock, durations)
    events = list(
        time_steps(
            workload,
            config,
            build_started_s=START_S - 2.0,
            started_at_unix_s=1.7e9,
            cancelled=lambda: False,
            clock=clock,
            serving_clock=clock,
        )
    )
    return workload, events


def test_warm_up_runs_back_to_back_before_the_scenario_and_the_summary_carries_its_figures():
    serving = Serving(Scenario.SINGLE_STREAM, query_count=400)
    workload, events = scenario_events(serving, [4.0, 2.0] + [0.25] * 400, 2)
    assert workload.calls == ["infer"] * 402
    steps = [s for e in events if isinstance(e, StepBatch) for s in e.steps]
    assert [s.warmup for s in steps] == [True, True] + [False] * 400
    assert [s.index for s in steps] == list(range(402))
    batches = [e for e in events if isinstance(e, QueryBatch)]
    # Streamed between queries in batches, at most every 0.5 s of the clock: never one per query.
    assert 1 < len(batches) < 400
    sizes = [len(b.latency_s) for b in batches]
    assert [b.first_index for b in batches] == list(itertools.accumulate([0] + sizes[:-1]))
    assert [x for b in batches for x in b.latency_s] == [0.25] * 400
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress[0] == Progress(Phase.WARMUP, 0, 402) and progress[-1] == Progress(Phase.DONE, 402, 402)
    summary = events[-1]
    assert isinstance(summary, Summary)
    assert summary.measured_steps == 400 and summary.warmup_steps_run == 2
    assert summary.serving.query_count == 400 and summary.serving.sample_count == 800
    assert summary.serving.p99_latency_s == 0.25 and summary.serving.reasons == {}


def test_a_scenario_without_warm_up_starts_with_its_queries():
    workload, events = scenario_events(Serving(Scenario.OFFLINE, query_count=6), [0.5] * 3, 0)
    assert workload.calls == ["infer"] * 3
    summary = events[-1]
    assert summary.serving.duration_s == 1.5 and summary.time_to_first_step_s == 2.5


def test_cancellation_while_waiting_for_the_next_arrival_stops_within_a_poll():
    clock = ServingClock()
    cancel_after_s = START_S + 0.3
    serving = Serving(Scenario.SERVER, target_qps=0.01, query_count=10, arrival_seed=1)  # arrivals ~100 s apart
    with pytest.raises(Cancelled, match=r"server scenario cancelled by the client after 0 of 10 queries"):
        serve(serving, 1, 0.001, clock, cancelled=lambda: clock.now >= cancel_after_s)
    assert clock.now <= cancel_after_s + CANCEL_POLL_S
    assert all(b - a <= CANCEL_POLL_S + 1e-9 for a, b in zip([START_S, *clock.sleeps], clock.sleeps))


# --- over gRPC on loopback with the fake runner --------------------------------------------------------------------


def serving_request(**serving_fields) -> pb.RunRequest:
    mode = serving_fields.pop("mode", pb.MODE_INFER)
    return pb.RunRequest(
        model="resnet18",
        mode=mode,
        batch_size=2,
        input_shape=[3, 32, 32],
        warmup_steps=1,
        min_measure_s=0.0,
        seed=5,
        device=pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU),
        serving=pb.Serving(**serving_fields),
    )


@pytest.fixture(scope="module")
def fake_stub(fake_runner):
    with grpc.insecure_channel(fake_runner) as channel:
        yield pb_grpc.RunnerStub(channel)


def test_cancelling_a_slow_server_scenario_ends_it_promptly(fake_stub):
    # At 0.01 queries per second the first arrival (seed 5) is 163 s away: the cancellation must reach that wait.
    slow = serving_request(scenario=pb.SCENARIO_SERVER, target_qps=0.01, query_count=10)
    assert arrival_offsets_s(slow.seed, 0.01, 1)[0] > 100
    call = fake_stub.Run(slow, timeout=300)
    for event in call:
        if event.WhichOneof("event") == "progress" and event.progress.phase == pb.PHASE_MEASURE:
            break
    time.sleep(1.0)  # well into the wait for the first arrival
    call.cancel()
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert info.value.code() == grpc.StatusCode.CANCELLED
    # The cancelled run let the device go: the next one does not queue behind it.
    started = time.monotonic()
    events = list(fake_stub.Run(serving_request(scenario=pb.SCENARIO_OFFLINE, query_count=4), timeout=30))
    assert time.monotonic() - started < 5
    assert events[-1].summary.serving.query_count == 4


def test_check_run_resolves_the_defaults_of_each_scenario(fake_stub):
    def resolved(**fields) -> pb.Serving:
        return fake_stub.CheckRun(serving_request(**fields), timeout=RPC_TIMEOUT_S).serving

    assert resolved(scenario=pb.SCENARIO_SINGLE_STREAM).query_count == 300
    assert resolved(scenario=pb.SCENARIO_OFFLINE).query_count == 8 * 2
    server = resolved(scenario=pb.SCENARIO_SERVER, target_qps=50.0)
    assert (server.arrival_seed, server.query_count, server.target_qps) == (5, 300, 50.0)  # the request's seed
    assert resolved(scenario=pb.SCENARIO_SERVER, target_qps=50.0, arrival_seed=9).arrival_seed == 9
    # An empty serving message is no scenario.
    assert not fake_stub.CheckRun(serving_request(), timeout=RPC_TIMEOUT_S).HasField("serving")


@pytest.mark.parametrize(
    "fields, says",
    [
        (
            {"scenario": pb.SCENARIO_SERVER, "mode": pb.MODE_TRAIN},
            "serving.scenario server applies to modes infer and generate only, not mode train",
        ),
        (
            {"scenario": pb.SCENARIO_SERVER},
            "serving.target_qps must be above 0 and at most 1000000 queries per second for serving.scenario server, got 0",
        ),
        ({"scenario": pb.SCENARIO_SERVER, "target_qps": -1.0}, "serving.target_qps must be above 0"),
        ({"scenario": pb.SCENARIO_SERVER, "target_qps": 2e6}, "serving.target_qps must be above 0 and at most 1000000"),
        ({"scenario": pb.SCENARIO_SERVER, "target_qps": math.nan}, "serving.target_qps must be above 0"),
        ({"scenario": pb.SCENARIO_SERVER, "target_qps": math.inf}, "serving.target_qps must be above 0"),
        (
            {"scenario": pb.SCENARIO_SERVER, "target_qps": 10.0, "batch_timeout_ms": -1.0},
            "serving.batch_timeout_ms must be between 0 and 60000, got -1",
        ),
        (
            {"scenario": pb.SCENARIO_SERVER, "target_qps": 10.0, "batch_timeout_ms": 60001.0},
            "serving.batch_timeout_ms must be between 0 and 60000",
        ),
        (
            {"scenario": pb.SCENARIO_SERVER, "target_qps": 10.0, "batch_timeout_ms": math.nan},
            "serving.batch_timeout_ms must be between 0 and 60000",
        ),
        (
            {"scenario": pb.SCENARIO_SERVER, "target_qps": 10.0, "arrival_seed": 2**32},
            "serving.arrival_seed must be between 0 and 4294967295",
        ),
        (
            {"scenario": pb.SCENARIO_OFFLINE, "query_count": 1_000_001},
            "serving.query_count must be between 0 (the default) and 1000000, got 1000001",
        ),
        (
            {"scenario": pb.SCENARIO_OFFLINE, "target_qps": 10.0},
            "serving.target_qps applies to scenario server only; leave it 0 for serving.scenario offline",
        ),
        (
            {"scenario": pb.SCENARIO_SINGLE_STREAM, "batch_timeout_ms": 5.0},
            "serving.batch_timeout_ms applies to scenario server only",
        ),
        (
            {"target_qps": 10.0},
            "serving.scenario must be set where serving is; accepted values: single_stream, server, offline",
        ),
        ({"scenario": 9}, "serving.scenario has unknown value 9; accepted values: single_stream, server, offline"),
    ],
)
def test_bad_serving_requests_are_refused_naming_the_field(fake_stub, fields, says):
    request = serving_request(**fields)
    for call in (fake_stub.CheckRun, lambda r, timeout: list(fake_stub.Run(r, timeout=timeout))):
        with pytest.raises(grpc.RpcError) as info:
            call(request, timeout=RPC_TIMEOUT_S)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert says in info.value.details()


def test_a_scenario_runs_on_one_device_only(fake_stub):
    request = serving_request(scenario=pb.SCENARIO_OFFLINE)
    request.ClearField("device")
    request.devices.extend([pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU, index=i) for i in (0, 1)])
    with pytest.raises(grpc.RpcError) as info:
        fake_stub.CheckRun(request, timeout=RPC_TIMEOUT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    says = "serving.scenario offline runs on one device of one runner (strategy single), not strategy ddp"
    assert says in info.value.details()
