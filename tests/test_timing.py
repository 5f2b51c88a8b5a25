"""The timing loop on a fake clock: exact step times, flushing, cancellation, warm-up until stable."""

from __future__ import annotations

import pytest
from support.core import FakeClock, ScriptedWorkload, config_for, drive, request, resolve_request

from fwbench_core import timing
from fwbench_core.backend import MemoryReading
from fwbench_core.choices import Mode, Phase
from fwbench_core.errors import Cancelled
from fwbench_core.runs import WarmupUntilStable
from fwbench_core.timing import Progress, StepBatch, Summary, time_steps


def test_timing_loop_exact_times_and_summary():
    clock = FakeClock()
    warmup_times = [8.0, 4.0]  # slow warm-up: included anywhere, it would change every figure
    measured_times = [0.25, 0.5, 0.125, 1.0, 0.75]
    workload = ScriptedWorkload(clock, warmup_times + measured_times)
    config = config_for(warmup=2, measured=5, batch_size=4)
    events = drive(workload, config, clock, build_started_s=clock.now - 2.0)

    assert workload.calls == ["train"] * 7
    samples = [s for e in events if isinstance(e, StepBatch) for s in e.steps]
    assert [s.index for s in samples] == list(range(7))
    assert [s.warmup for s in samples] == [True, True] + [False] * 5
    assert [s.step_time_s for s in samples] == warmup_times + measured_times
    assert samples[0].start_s == 1000.0 and samples[1].start_s == 1008.0

    summary = events[-1]
    assert isinstance(summary, Summary)
    assert summary.measured_steps == 5
    # Worked by hand: sorted 0.125 0.25 0.5 0.75 1.0, sum 2.625.
    assert summary.median_step_time_s == 0.5
    assert summary.mean_step_time_s == pytest.approx(0.525)
    assert summary.p95_step_time_s == pytest.approx(0.95)  # 0.75 + 0.8 * (1.0 - 0.75), numpy's default
    assert summary.throughput_samples_per_s == pytest.approx(4 * 5 / 2.625)
    assert summary.time_to_first_step_s == pytest.approx(2.0 + 8.0)
    assert summary.peak_memory == MemoryReading(4096, "scripted")
    assert summary.started_at_unix_s == 1.7e9


def test_timing_loop_infer_mode_and_progress():
    clock = FakeClock()
    workload = ScriptedWorkload(clock, [0.5] * 4)
    config = config_for(mode=Mode.INFER, warmup=1, measured=3)
    events = drive(workload, config, clock)
    assert workload.calls == ["infer"] * 4
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress[0] == Progress(Phase.WARMUP, 0, 4)
    assert progress[-1] == Progress(Phase.DONE, 4, 4)
    assert all(p.steps_total == 4 for p in progress)
    streamed = 0
    for e in events:
        if isinstance(e, StepBatch):
            streamed += len(e.steps)
        elif isinstance(e, Progress):
            assert e.steps_done == streamed
    assert isinstance(events[-1], Summary) and events[-2] == Progress(Phase.DONE, 4, 4)


def test_timing_loop_without_warmup_starts_in_measure():
    clock = FakeClock()
    events = drive(ScriptedWorkload(clock, [0.25, 0.5]), config_for(warmup=0, measured=2), clock)
    assert events[0] == Progress(Phase.MEASURE, 0, 2)
    assert events[-1].median_step_time_s == 0.375
    assert events[-1].p95_step_time_s == pytest.approx(0.4875)


def test_single_measured_step_summary():
    clock = FakeClock()
    events = drive(ScriptedWorkload(clock, [0.5, 0.25]), config_for(warmup=1, measured=1), clock)
    summary = events[-1]
    assert (summary.mean_step_time_s, summary.median_step_time_s, summary.p95_step_time_s) == (0.25, 0.25, 0.25)


def test_fast_steps_are_flushed_in_batches(monkeypatch):
    monkeypatch.setattr(timing, "FLUSH_INTERVAL_S", 0.5)
    step = 0.5 / 512  # exact in binary: 512 steps make one flush interval
    clock = FakeClock(start=0.0)
    config = config_for(warmup=2, measured=2048)
    events = drive(ScriptedWorkload(clock, [step] * 2050), config, clock)
    batches = [e for e in events if isinstance(e, StepBatch)]
    # The warm-up flushes when it ends; then one batch per flush interval, not one per step.
    assert [len(b.steps) for b in batches] == [2, 512, 512, 512, 512]
    assert [s.index for b in batches for s in b.steps] == list(range(2050))


def test_slow_steps_are_flushed_every_step(monkeypatch):
    monkeypatch.setattr(timing, "FLUSH_INTERVAL_S", 0.5)
    clock = FakeClock()
    events = drive(ScriptedWorkload(clock, [1.0] * 5), config_for(warmup=1, measured=4), clock)
    assert [len(e.steps) for e in events if isinstance(e, StepBatch)] == [1] * 5


def test_cancellation_stops_before_the_next_step():
    clock = FakeClock()
    workload = ScriptedWorkload(clock, [0.25] * 100)
    config = config_for(warmup=1, measured=99)
    gen = time_steps(
        workload,
        config,
        build_started_s=clock.now,
        started_at_unix_s=0.0,
        cancelled=lambda: len(workload.calls) >= 3,
        clock=clock,
    )
    with pytest.raises(Cancelled, match=r"after 3 steps"):
        list(gen)
    assert len(workload.calls) == 3


def stable_config(cap: int, threshold: float = 0.05, window: int = 3, measured: int = 4, min_measure_s=None):
    return resolve_request(
        request(
            warmup_steps=cap,
            measured_steps=measured,
            warmup_until_stable=WarmupUntilStable(threshold, window),
            min_measure_s=min_measure_s,
        )
    )


def test_warmup_until_stable_stops_once_the_window_is_steady():
    clock = FakeClock()
    # Compilation-like slow steps, then steady ones: stable after the 3 steady steps.
    durations = [5.0, 2.0, 1.0, 1.0, 1.0] + [1.0] * 4
    events = drive(ScriptedWorkload(clock, durations), stable_config(cap=50), clock)
    summary = events[-1]
    assert summary.warmup_steps_run == 5 and summary.warmup_stable and summary.flags == ()
    assert summary.measured_steps == 4 and summary.median_step_time_s == 1.0


def test_warmup_that_never_settles_is_flagged():
    clock = FakeClock()
    durations = [1.0, 2.0] * 3 + [1.0] * 4
    summary = drive(ScriptedWorkload(clock, durations), stable_config(cap=6), clock)[-1]
    assert summary.warmup_steps_run == 6 and not summary.warmup_stable
    assert "did not stabilise within 6 steps" in summary.flags[0]


def test_minimum_measuring_time_adds_steps_beyond_the_count():
    clock = FakeClock()
    config = resolve_request(request(warmup_steps=0, measured_steps=2, min_measure_s=5.0))
    summary = drive(ScriptedWorkload(clock, [1.0] * 10), config, clock)[-1]
    assert summary.measured_steps == 5


class DeviceTimedWorkload(ScriptedWorkload):
    def __init__(self, clock, durations, device_factor):
        super().__init__(clock, durations)
        self.device_factor = device_factor
        self.last = 0.0

    def synchronize(self) -> None:
        self.last = self.queued
        super().synchronize()

    def device_time_s(self):
        return self.last * self.device_factor


@pytest.mark.parametrize("factor, flagged", [(0.99, False), (0.95, True)])
def test_wall_clock_is_cross_checked_against_device_timers(factor, flagged):
    clock = FakeClock()
    events = drive(DeviceTimedWorkload(clock, [1.0] * 7, factor), config_for(warmup=2, measured=5), clock)
    summary = events[-1]
    assert summary.timer_disagreement == pytest.approx(1 - factor)
    assert bool(summary.flags) is flagged
    if flagged:
        assert "disagree by 5.0%" in summary.flags[0]
    steps = [s for e in events if isinstance(e, StepBatch) for s in e.steps]
    assert all(s.device_time_s == pytest.approx(factor) for s in steps)
