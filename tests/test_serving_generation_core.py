"""Serving with generation in the runner core, on a fake clock: a batch of queries runs one generation request (a
prefill, then new_tokens - 1 decode steps), and each query's time to first token (from its arrival, the wait
included), latency (to its last token) and time per output token follow from the request's parts; the percentiles
obey the evidence rule over queries; the tokens served count real prompts only."""

from __future__ import annotations

import numpy as np
import pytest
from support.core import FakeClock, resolve_request, small

from fwbench_core import serving as serving_module
from fwbench_core.backend import MemoryReading, Workload
from fwbench_core.choices import Mode, Scenario
from fwbench_core.errors import InvalidArgument
from fwbench_core.runs import Serving
from fwbench_core.serving import OFFLINE_PERCENTILE_REASON, QueryBatch
from fwbench_core.serving_generation import time_per_output_token_s
from fwbench_core.timing import StepBatch, Summary, samples_processed, time_steps

START_S = 1000.0
PREFILL_S, DECODE_STEP_S = 0.1, 0.05


class ServingClock(FakeClock):
    """Steps and the scenario's waits on one fake clock that moves only when the device works or the scenario
    sleeps."""

    def now_s(self) -> float:
        return self.now

    def sleep_until(self, t_s: float) -> None:
        self.now = max(self.now, t_s)


class ScriptedDecoder(Workload):
    """A decoder on a pretend device: a prefill takes PREFILL_S, a decode step DECODE_STEP_S, once synchronized."""

    def __init__(self, clock: ServingClock) -> None:
        self.clock = clock
        self.queued_s = 0.0
        self.calls: list[str] = []
        self.tokens: list[int] = []

    def prefill(self) -> None:
        self.calls.append("prefill")
        self.queued_s += PREFILL_S
        self.tokens = [7]

    def decode_step(self) -> None:
        self.calls.append("decode")
        self.queued_s += DECODE_STEP_S
        self.tokens.append(len(self.tokens))

    def generated_tokens(self) -> list[list[int]]:
        return [self.tokens]

    def train_step(self) -> None:
        raise AssertionError("a generation run never trains")

    def infer_step(self) -> None:
        raise AssertionError("a generation run steps by prefill and decode")

    def synchronize(self) -> None:
        self.clock.now += self.queued_s
        self.queued_s = 0.0

    def peak_memory(self) -> MemoryReading:
        return MemoryReading(4096, "scripted")


def generate_under(serving: Serving, batch_size: int = 1, new_tokens: int = 4, warmup: int = 1):
    clock = ServingClock(START_S)
    config = resolve_request(
        small(
            model="gpt2_small",
            mode=Mode.GENERATE,
            input_shape=(8,),
            new_tokens=new_tokens,
            batch_size=batch_size,
            warmup_steps=warmup,
            serving=serving,
        )
    )
    workload = ScriptedDecoder(clock)
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
    summary = events[-1]
    assert isinstance(summary, Summary)
    streamed = [e for e in events if isinstance(e, QueryBatch)]
    # The queries as streamed, in batches at most every 0.5 s, joined into one.
    queries = QueryBatch(
        *(tuple(x for b in streamed for x in getattr(b, name)) for name in ("latency_s", "queue_s")),
        first_index=0,
        first_token_latency_s=tuple(x for b in streamed for x in b.first_token_latency_s),
    )
    steps = [s for e in events if isinstance(e, StepBatch) for s in e.steps]
    return config, workload, summary, queries, steps


@pytest.fixture
def planted_arrivals(monkeypatch):
    def plant(offsets_s: list[float]) -> None:
        monkeypatch.setattr(serving_module, "arrival_offsets_s", lambda seed, qps, count: np.array(offsets_s[:count]))

    return plant


def test_each_query_sees_its_wait_then_the_prefill_as_time_to_first_token(planted_arrivals):
    # The clock starts at START_S, then the warm-up request takes 0.25 s: the arrivals are planted after it.
    planted_arrivals([0.1, 0.2, 0.3, 0.4])
    config, workload, summary, queries, steps = generate_under(
        Serving(Scenario.SERVER, target_qps=10.0, query_count=4, arrival_seed=1)
    )
    # Worked by hand: a request is 0.1 s of prefill and 3 decode steps of 0.05 s (0.25 s); arrivals 0.1 s apart.
    assert workload.calls == ["prefill", "decode", "decode", "decode"] * 5  # the warm-up request and 4 queries
    batch = queries
    assert batch.queue_s == pytest.approx((0.0, 0.15, 0.3, 0.45))
    assert batch.first_token_latency_s == pytest.approx((0.1, 0.25, 0.4, 0.55))
    assert batch.latency_s == pytest.approx((0.25, 0.4, 0.55, 0.7))
    assert time_per_output_token_s(batch.latency_s, batch.first_token_latency_s, 4) == pytest.approx([0.05] * 4)
    serving = summary.serving
    # The generation summary keeps its meaning: the prefill from the request's start, the queue excluded.
    assert summary.generation.median_time_to_first_token_s == pytest.approx(PREFILL_S)
    assert [s.time_to_first_token_s for s in steps if not s.warmup] == pytest.approx([PREFILL_S] * 4)
    # 4 queries support no percentile: each is empty, with its reason.
    assert serving.p50_first_token_latency_s is None and serving.p50_time_per_output_token_s is None
    assert "4 queries cannot support p50" in serving.reasons["p50_first_token_latency_s"]
    assert "p99_time_per_output_token_s" in serving.reasons
    # 4 prompts of 4 tokens from the first arrival (0.1) to the last token (1.1).
    assert serving.duration_s == pytest.approx(1.0)
    assert serving.generated_tokens_per_s == pytest.approx(16.0)
    assert samples_processed(config, summary) == 16  # energy per sample is energy per token


def test_a_batch_of_queries_runs_one_request_and_padding_makes_no_tokens(planted_arrivals):
    planted_arrivals([0.1, 0.2, 0.3])
    _, workload, summary, queries, _ = generate_under(
        Serving(Scenario.SERVER, target_qps=10.0, query_count=3, batch_timeout_ms=1000.0), batch_size=2, warmup=0
    )
    assert workload.calls.count("prefill") == 2  # q0 and q1 together, then q2 alone (padded) at its timeout
    batch = queries
    # q0, q1 start at 0.2 (the batch full), first token at 0.3; q2 waits its 1 s timeout from 0.3.
    assert batch.first_token_latency_s == pytest.approx((0.2, 0.1, 1.1))
    assert batch.latency_s == pytest.approx((0.35, 0.25, 1.25))
    assert summary.serving.mean_batch_queries == 1.5
    assert summary.serving.generated_tokens_per_s == pytest.approx(3 * 4 / (1.55 - 0.1))


def test_percentiles_of_first_token_and_per_token_need_as_many_queries_as_latencys():
    _, _, summary, _, _ = generate_under(Serving(Scenario.SINGLE_STREAM, query_count=30), batch_size=2, new_tokens=5)
    serving = summary.serving
    # single_stream: each query is a request from its issue, so its first token is the prefill's.
    assert serving.p50_first_token_latency_s == pytest.approx(PREFILL_S)
    assert serving.p90_first_token_latency_s == pytest.approx(PREFILL_S)
    assert serving.p90_time_per_output_token_s == pytest.approx(DECODE_STEP_S)
    assert serving.p90_latency_s == pytest.approx(PREFILL_S + 4 * DECODE_STEP_S)
    for figure in ("latency", "first_token_latency", "time_per_output_token"):
        assert getattr(serving, f"p99_{figure}_s") is None
        assert "30 queries cannot support p99" in serving.reasons[f"p99_{figure}_s"]
    # A query is a batch of 2 prompts, each gaining 5 tokens.
    assert serving.generated_tokens_per_s == pytest.approx(30 * 2 * 5 / (30 * 0.3))


def test_offline_generation_reports_tokens_per_second_and_no_percentiles():
    _, workload, summary, _, _ = generate_under(Serving(Scenario.OFFLINE, query_count=5), batch_size=2, warmup=0)
    assert workload.calls.count("prefill") == 3  # 5 prompts in batches of 2, the last padded
    serving = summary.serving
    assert serving.generated_tokens_per_s == pytest.approx(5 * 4 / (3 * 0.25))
    assert serving.p50_first_token_latency_s is None
    assert serving.reasons["p50_first_token_latency_s"] == OFFLINE_PERCENTILE_REASON


def test_train_under_a_scenario_is_refused_naming_the_modes_that_serve():
    with pytest.raises(InvalidArgument, match="applies to modes infer and generate only, not mode train"):
        resolve_request(small(mode=Mode.TRAIN, serving=Serving(Scenario.SINGLE_STREAM)))
