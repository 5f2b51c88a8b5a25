"""Power and energy sampling, without a GPU: a fake NVML module, a fake RAPL tree, an injected clock."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from fwbench_core import power
from fwbench_core.choices import DeviceKind
from fwbench_core.device_state import DeviceStateReader
from fwbench_core.devices import DeviceRef
from fwbench_core.power import (
    EnergySummary,
    NvmlGpuSource,
    NvmlSession,
    PowerPhase,
    PowerSample,
    PowerSampler,
    RaplCpuSource,
    Telemetry,
    energy_summary,
    source_for,
)

# --- a fake NVML module --------------------------------------------------------

NVML_TEXT = {2: "Invalid Argument", 3: "Not Supported", 9: "Driver Not Loaded", 999: "Unknown Error"}


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return NVML_TEXT.get(self.value, f"code {self.value}")


class FakeClock:
    """Time that moves only when read: each call returns the next tick."""

    def __init__(self, start_s: float = 0.0, step_s: float = 0.05) -> None:
        self.next_s = start_s
        self.step_s = step_s
        self.last_s = start_s

    def __call__(self) -> float:
        self.last_s = self.next_s
        self.next_s += self.step_s
        return self.last_s


class FakeNvml:
    """Readings are either functions of the clock's last reading or series played back call by call."""

    NVMLError = FakeNVMLError
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(
        self,
        power_mw=lambda t: 200_000,
        energy_mj=None,
        clock: FakeClock | None = None,
        instant: bool = True,
        unsupported: frozenset[str] = frozenset(),
        fail: dict[str, set[int]] | None = None,
        init_error: int | None = None,
    ) -> None:
        self.power_mw = power_mw
        self.energy_mj = energy_mj if energy_mj is not None else (lambda t: 200_000 * t)
        self.clock = clock or FakeClock()
        self.instant = instant
        self.unsupported = unsupported
        self.fail = fail or {}
        self.init_error = init_error
        self.calls: Counter[str] = Counter()
        self.initialized = 0

    def _reading(self, name: str, series):
        index = self.calls[name]
        self.calls[name] += 1
        if name in self.unsupported:
            raise FakeNVMLError(3)
        if index in self.fail.get(name, ()):
            raise FakeNVMLError(999)
        if callable(series):
            return series(self.clock.last_s)
        return series[min(index, len(series) - 1)]

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self.initialized -= 1

    def nvmlDeviceGetHandleByIndex(self, index: int):
        return ("handle", index)

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        assert list(field_ids) == [power.NVML_FI_DEV_POWER_INSTANT]
        index = self.calls["nvmlDeviceGetFieldValues"]
        self.calls["nvmlDeviceGetFieldValues"] += 1
        status = 0 if self.instant else 3
        if index in self.fail.get("nvmlDeviceGetFieldValues", ()):
            status = 999  # per-field failure: the call succeeds, the field says why not
        value = 0
        if status == 0:
            series = self.power_mw
            value = series(self.clock.last_s) if callable(series) else series[min(index, len(series) - 1)]
        return [
            SimpleNamespace(
                fieldId=field_ids[0], nvmlReturn=status, valueType=1, value=SimpleNamespace(uiVal=int(value))
            )
        ]

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._reading("nvmlDeviceGetPowerUsage", self.power_mw)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self._reading("nvmlDeviceGetTotalEnergyConsumption", self.energy_mj)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return self._reading("nvmlDeviceGetUtilizationRates", lambda t: SimpleNamespace(gpu=97, memory=41))

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self._reading(
            "nvmlDeviceGetMemoryInfo", lambda t: SimpleNamespace(total=80 << 30, free=0, used=12 << 30)
        )

    def nvmlDeviceGetClockInfo(self, handle, clock_type):
        assert clock_type == self.NVML_CLOCK_SM
        return self._reading("nvmlDeviceGetClockInfo", lambda t: 1755)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return self._reading("nvmlDeviceGetTemperature", lambda t: 61)


def opened_gpu(nvml: FakeNvml) -> NvmlGpuSource:
    source = NvmlGpuSource(0, NvmlSession(0, nvml))
    assert source.open(), source.unavailable_reason
    return source


def record(source: Telemetry, clock, plan: list[tuple[PowerPhase, int]]) -> list[PowerSample]:
    """Read the source once per clock tick: `count` samples in each phase, in order."""
    return [source.read(clock(), phase) for phase, count in plan for _ in range(count)]


def assert_every_none_is_explained(summary: EnergySummary) -> None:
    for f in dataclasses.fields(summary):
        if getattr(summary, f.name) is None:
            assert summary.reasons.get(f.name), f"{f.name} is None without a reason"


# idle 1 s at 50 W, measure 2 s at 200 W, then after; 20 Hz on the injected clock
IDLE_THEN_LOAD_PLAN = [(PowerPhase.IDLE, 20), (PowerPhase.MEASURE, 40), (PowerPhase.AFTER, 5)]


def idle_then_load_mw(t: float) -> float:
    return 200_000 if 1.0 - 1e-9 <= t <= 3.0 + 1e-9 else 50_000


def idle_then_load_energy_mj(t: float) -> float:
    """The exact integral of idle_then_load_mw, in mJ."""
    return 50_000 * min(t, 1.0) + 200_000 * max(0.0, min(t, 3.0) - 1.0) + 50_000 * max(0.0, t - 3.0)


# --- NVML -----------------------------------------------------------------------


def test_constant_power_integrates_to_the_known_energy():
    clock = FakeClock(step_s=0.05)
    nvml = FakeNvml(power_mw=idle_then_load_mw, energy_mj=idle_then_load_energy_mj, clock=clock)
    source = opened_gpu(nvml)
    samples = record(source, clock, IDLE_THEN_LOAD_PLAN)
    summary = energy_summary(samples, samples_processed=1000)

    assert summary.sample_count == 40 and summary.window_s == pytest.approx(2.0)
    assert summary.integrated_energy_j == pytest.approx(400, rel=0.01)
    assert summary.counter_energy_j == pytest.approx(400, rel=0.01)
    assert summary.energy_disagreement < 0.01
    assert (summary.energy_j, summary.energy_source) == (summary.counter_energy_j, "counter")
    assert summary.mean_power_w == pytest.approx(200, rel=0.01) and summary.peak_power_w == pytest.approx(200)
    assert summary.idle_power_w == pytest.approx(50)
    assert summary.energy_above_idle_j == pytest.approx(300, rel=0.01)
    assert summary.energy_per_sample_j == pytest.approx(0.4, rel=0.01)
    assert summary.energy_above_idle_per_sample_j == pytest.approx(0.3, rel=0.01)
    assert summary.achieved_rate_hz == pytest.approx(20)
    assert summary.power_sources == ("nvml_instant",) and summary.notes == ()
    assert summary.reasons == {}

    first = samples[0]
    assert (first.device, first.power_source, first.power_w) == ("gpu:0", "nvml_instant", 50.0)
    assert (first.gpu_util_pct, first.memory_util_pct, first.memory_used_bytes) == (97, 41, 12 << 30)
    assert (first.sm_clock_mhz, first.temperature_c) == (1755, 61)


def test_a_device_without_the_energy_counter_still_integrates_power():
    clock = FakeClock(step_s=0.05)
    nvml = FakeNvml(
        power_mw=idle_then_load_mw, clock=clock, unsupported=frozenset({"nvmlDeviceGetTotalEnergyConsumption"})
    )
    source = opened_gpu(nvml)
    samples = record(source, clock, IDLE_THEN_LOAD_PLAN)

    assert all(s.energy_j is None for s in samples)
    assert nvml.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1  # unsupported is not asked again
    assert source.reasons["energy_j"] == "NVML: Not Supported"
    summary = energy_summary(samples, source_reasons=source.reasons)
    assert summary.counter_energy_j is None and summary.energy_disagreement is None
    assert "Not Supported" in summary.reasons["counter_energy_j"]
    assert summary.integrated_energy_j == pytest.approx(400, rel=0.01)
    assert (summary.energy_j, summary.energy_source) == (summary.integrated_energy_j, "integrated")
    assert summary.energy_above_idle_j == pytest.approx(300, rel=0.01)
    assert_every_none_is_explained(summary)


def test_unsupported_instant_power_falls_back_to_the_averaged_reading():
    clock = FakeClock(step_s=0.5)
    nvml = FakeNvml(power_mw=[100_000, 150_000, 250_000], clock=clock, instant=False)
    source = opened_gpu(nvml)
    samples = record(source, clock, [(PowerPhase.MEASURE, 3)])

    assert [s.power_w for s in samples] == [100.0, 150.0, 250.0]
    assert {s.power_source for s in samples} == {"nvml_average"}
    assert nvml.calls["nvmlDeviceGetFieldValues"] == 1  # probed once at open
    assert "NVML_FI_DEV_POWER_INSTANT: Not Supported" in source.reasons["power_instant"]
    summary = energy_summary(samples)
    assert summary.power_sources == ("nvml_average",)
    assert any("1 s average" in note for note in summary.notes)


def test_a_reading_that_fails_midway_is_none_in_that_sample_only():
    clock = FakeClock(step_s=0.1)
    nvml = FakeNvml(
        clock=clock,
        instant=False,
        power_mw=[100_000, 110_000, 120_000] + [130_000] * 9,
        fail={"nvmlDeviceGetPowerUsage": {1}, "nvmlDeviceGetTemperature": {1, 2}},
    )
    source = opened_gpu(nvml)
    samples = record(source, clock, [(PowerPhase.MEASURE, 12)])  # 1.1 s

    assert [s.power_w for s in samples[:4]] == [100.0, None, 120.0, 130.0]
    assert [s.power_source for s in samples[:4]] == ["nvml_average", None, "nvml_average", "nvml_average"]
    assert [s.temperature_c for s in samples[:4]] == [61, None, None, 61]
    assert all(s.energy_j is not None and s.sm_clock_mhz == 1755 for s in samples)
    assert source.reasons["power_w"] == "NVML: Unknown Error (1 failed read)"
    assert source.reasons["temperature_c"] == "NVML: Unknown Error (2 failed reads)"
    # the integral bridges the missing reading with its neighbours
    summary = energy_summary(samples)
    assert summary.integrated_energy_j == pytest.approx(
        0.1 * (100 + 120) / 2 * 2 + 0.1 * (120 + 130) / 2 + 0.1 * 130 * 8
    )


def test_instant_power_failing_midway_stays_instant():
    clock = FakeClock(step_s=0.05)
    nvml = FakeNvml(clock=clock, fail={"nvmlDeviceGetFieldValues": {2}})  # call 0 is the probe at open
    source = opened_gpu(nvml)
    samples = record(source, clock, [(PowerPhase.MEASURE, 3)])
    assert [s.power_w for s in samples] == [200.0, None, 200.0]
    assert [s.power_source for s in samples] == ["nvml_instant", None, "nvml_instant"]
    assert source.reasons["power_w"] == "NVML: Unknown Error (1 failed read)"
    assert "power_instant" not in source.reasons


def test_an_energy_counter_that_does_not_advance_in_a_short_window_is_none_with_the_reason():
    clock = FakeClock(start_s=1.0, step_s=0.025)

    def coarse_counter_mj(t: float) -> float:  # updates every 100 ms
        return 200_000 * (int(t * 10 + 1e-9) / 10)

    nvml = FakeNvml(clock=clock, energy_mj=coarse_counter_mj)
    source = opened_gpu(nvml)
    samples = record(source, clock, [(PowerPhase.MEASURE, 2), (PowerPhase.AFTER, 1)])  # 1.000 .. 1.050
    summary = energy_summary(samples, idle_baseline=False, samples_processed=64)
    assert summary.counter_energy_j is None and summary.integrated_energy_j is None and summary.energy_j is None
    assert summary.reasons["counter_energy_j"] == "the energy counter did not advance over the 0.05 s window"
    assert summary.reasons["energy_j"] == (
        "measured window 0.05 s is shorter than the 1.0 s an energy figure needs; "
        "2 power samples, fewer than the 10 an energy figure needs; "
        "the energy counter did not advance over the 0.05 s window"
    )
    assert summary.reasons["energy_per_sample_j"] == summary.reasons["energy_j"]
    assert summary.reasons["mean_power_w"] == "2 power samples, fewer than the 10 a mean power needs"
    assert summary.reasons["idle_power_w"] == "idle baseline not requested"
    assert_every_none_is_explained(summary)


def test_a_counter_that_does_not_advance_over_a_long_window_withholds_energy_though_power_integrates():
    clock = FakeClock(step_s=0.05)
    nvml = FakeNvml(clock=clock, energy_mj=lambda t: 5_000_000)  # a counter stuck at 5 kJ
    source = opened_gpu(nvml)
    samples = record(source, clock, [(PowerPhase.MEASURE, 30), (PowerPhase.AFTER, 1)])  # 1.5 s
    summary = energy_summary(samples, idle_baseline=False, samples_processed=64)
    assert summary.energy_j is None and summary.energy_per_sample_j is None and summary.integrated_energy_j is None
    assert summary.reasons["energy_j"] == "the energy counter did not advance over the 1.50 s window"
    assert summary.mean_power_w == pytest.approx(200.0)  # 30 readings: power is still honest
    assert_every_none_is_explained(summary)


def test_a_window_shorter_than_the_minimum_gives_no_energy_but_a_mean_power():
    clock = FakeClock(step_s=0.025)
    source = opened_gpu(FakeNvml(clock=clock))
    samples = record(source, clock, [(PowerPhase.MEASURE, 20), (PowerPhase.AFTER, 1)])  # 0.5 s, 20 readings
    summary = energy_summary(samples, idle_baseline=False, samples_processed=64)
    assert summary.energy_j is None and summary.counter_energy_j is None and summary.energy_per_sample_j is None
    assert summary.reasons["energy_j"] == "measured window 0.50 s is shorter than the 1.0 s an energy figure needs"
    assert summary.mean_power_w == pytest.approx(200.0) and summary.peak_power_w == pytest.approx(200.0)
    assert_every_none_is_explained(summary)


def test_too_few_samples_give_neither_energy_nor_power():
    clock = FakeClock(step_s=0.5)
    source = opened_gpu(FakeNvml(clock=clock))
    samples = record(source, clock, [(PowerPhase.IDLE, 3), (PowerPhase.MEASURE, 3), (PowerPhase.AFTER, 1)])  # 1.5 s
    summary = energy_summary(samples, samples_processed=64)
    assert summary.window_s == pytest.approx(1.5)
    assert summary.energy_j is None and summary.energy_above_idle_per_sample_j is None
    assert summary.reasons["energy_j"] == "3 power samples, fewer than the 10 an energy figure needs"
    assert summary.mean_power_w is None and summary.peak_power_w is None and summary.idle_power_w is None
    assert summary.reasons["mean_power_w"] == "3 power samples, fewer than the 10 a mean power needs"
    assert summary.reasons["idle_power_w"] == "3 power samples, fewer than the 10 an idle power needs"
    assert_every_none_is_explained(summary)


def test_a_long_enough_window_with_enough_samples_has_energy():
    clock = FakeClock(step_s=0.125)
    source = opened_gpu(FakeNvml(clock=clock))
    samples = record(source, clock, [(PowerPhase.MEASURE, 10), (PowerPhase.AFTER, 1)])  # 1.25 s, 10 readings
    summary = energy_summary(samples, idle_baseline=False, samples_processed=100)
    assert summary.window_s == 1.25
    assert summary.energy_j == pytest.approx(250.0) and summary.energy_source == "counter"
    assert summary.energy_per_sample_j == pytest.approx(2.5)
    assert "energy_j" not in summary.reasons


def test_no_pynvml_means_unavailable_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    source = NvmlGpuSource(0)
    assert source.open() is False
    assert source.unavailable_reason == "nvidia-ml-py not installed"
    sample = source.read(1.0, PowerPhase.MEASURE)
    assert sample.power_w is None and sample.energy_j is None


def test_nvml_without_a_driver_is_unavailable_with_the_nvml_error():
    nvml = FakeNvml(init_error=9)
    source = NvmlGpuSource(1, NvmlSession(1, nvml))
    assert source.open() is False
    assert source.unavailable_reason == "NVML: Driver Not Loaded (gpu:1)"
    sampler = PowerSampler(source)
    sampler.start()
    assert sampler.stop() == [] and sampler.unavailable_reason == source.unavailable_reason
    summary = energy_summary([], source_reasons=sampler.reasons)
    assert summary.energy_j is None and summary.sample_count == 0
    assert "Driver Not Loaded" in summary.reasons["window_s"]
    # One cause for no counter and no power readings: the energy's reason says it once.
    assert summary.reasons["energy_j"].count("Driver Not Loaded") == 1
    assert summary.reasons["energy_j"].startswith("no energy counter and fewer than two power readings")
    assert_every_none_is_explained(summary)


def test_nvml_is_shut_down_when_the_sampler_stops():
    nvml = FakeNvml(clock=FakeClock())
    sampler = PowerSampler(NvmlGpuSource(0, NvmlSession(0, nvml)), rate_hz=50, clock=nvml.clock)
    sampler.start()
    assert nvml.initialized == 1
    time.sleep(0.05)
    sampler.stop()
    assert nvml.initialized == 0


def test_a_runs_power_source_and_device_state_reader_share_one_nvml_session(tmp_path):
    nvml = FakeNvml()
    inits = []
    nvml_init = nvml.nvmlInit
    nvml.nvmlInit = lambda: (inits.append(1), nvml_init())
    session = NvmlSession(0, nvml)
    reader = DeviceStateReader(DeviceRef(DeviceKind.GPU, 0), session, proc_root=tmp_path)
    source = NvmlGpuSource(0, session)
    reader.open()
    assert source.open() and len(inits) == 1 and nvml.initialized == 1
    source.close()
    source.close()  # a second close releases nothing of the reader's
    assert nvml.initialized == 1 and reader.read().sm_clock_mhz == 1755.0
    reader.close()
    assert nvml.initialized == 0 and session.handle is None
    assert reader.read().reasons["sm_clock_mhz"] == "NVML not open"


def test_source_for_picks_nvml_for_gpus_and_rapl_for_cpus(tmp_path):
    assert isinstance(source_for(DeviceRef(DeviceKind.GPU, 2), NvmlSession(2, FakeNvml())), NvmlGpuSource)
    cpu = source_for(DeviceRef(DeviceKind.CPU), powercap_root=tmp_path)
    assert isinstance(cpu, RaplCpuSource) and cpu.device == "cpu:0"


# --- summary ------------------------------------------------------------------


def test_an_empty_record_gives_none_with_reasons_never_zero():
    summary = energy_summary([], samples_processed=64)
    assert summary.sample_count == 0
    for name in (
        "counter_energy_j",
        "integrated_energy_j",
        "energy_j",
        "mean_power_w",
        "peak_power_w",
        "idle_power_w",
        "energy_per_sample_j",
        "achieved_rate_hz",
        "window_s",
    ):
        assert getattr(summary, name) is None, name
    assert_every_none_is_explained(summary)


def test_the_window_runs_to_the_sample_that_closes_the_phase():
    # each interval belongs to the phase of the sample that opens it
    measure = [
        PowerSample(1.0 + 0.2 * i, PowerPhase.MEASURE, "gpu:0", 100.0 if i < 5 else 300.0, "nvml_instant")
        for i in range(10)
    ]  # 1.0 .. 2.8 s
    samples = [
        PowerSample(0.0, PowerPhase.WARMUP, "gpu:0", 1000.0, "nvml_instant"),
        *measure,
        PowerSample(3.0, PowerPhase.AFTER, "gpu:0", 300.0, "nvml_instant"),
        PowerSample(4.0, PowerPhase.AFTER, "gpu:0", 0.0, "nvml_instant"),
    ]
    summary = energy_summary(samples, "measure", idle_baseline=False)
    assert summary.window_s == pytest.approx(2.0) and summary.sample_count == 10
    # 1.0-1.8 s at 100 W, 1.8-2.0 s rising to 300 W, 2.0-3.0 s at 300 W (the AFTER sample closes it)
    assert summary.integrated_energy_j == pytest.approx(80 + 40 + 300)
    assert summary.peak_power_w == 300.0  # of the phase's own samples, not the warm-up's 1000 W
    assert summary.achieved_rate_hz == pytest.approx(5.0)


# --- the sampler thread --------------------------------------------------------


class SteadySource(Telemetry):
    """A source that reads 100 W, optionally slowly, or fails on chosen reads."""

    def __init__(self, read_s: float = 0.0, fail_on: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.device = "gpu:0"
        self.read_s = read_s
        self.fail_on = fail_on
        self.reads = 0
        self.closed = False

    def open(self) -> bool:
        return True

    def read(self, time_s: float, phase: PowerPhase) -> PowerSample:
        self.reads += 1
        if self.reads in self.fail_on:
            raise RuntimeError("sensor glitch")
        if self.read_s:
            time.sleep(self.read_s)
        return PowerSample(time_s, phase, self.device, 100.0, "nvml_instant")

    def close(self) -> None:
        self.closed = True


def run_for(sampler: PowerSampler, seconds: float) -> list[PowerSample]:
    sampler.start()
    time.sleep(seconds)
    return sampler.stop()


@pytest.mark.quiet  # a 100 Hz schedule misses slots while other tests keep both cores busy
@pytest.mark.parametrize("rate_hz", [20, 100])
def test_the_sampler_holds_its_rate(rate_hz):
    sampler = PowerSampler(SteadySource(), rate_hz=rate_hz)
    samples = run_for(sampler, 0.6)
    assert sampler.achieved_rate_hz == pytest.approx(rate_hz, rel=0.2)
    assert len(samples) == pytest.approx(0.6 * rate_hz, rel=0.25)
    assert sampler.missed_slots == 0


@pytest.mark.quiet
def test_slow_reads_do_not_push_the_schedule_back():
    # 4 ms reads at 100 Hz: a sleep after each read would run at about 71 Hz
    sampler = PowerSampler(SteadySource(read_s=0.004), rate_hz=100)
    run_for(sampler, 0.6)
    assert sampler.achieved_rate_hz == pytest.approx(100, rel=0.2)


def test_reads_longer_than_a_period_skip_slots_rather_than_bunch_up():
    sampler = PowerSampler(SteadySource(read_s=0.015), rate_hz=100)
    samples = run_for(sampler, 0.5)
    assert sampler.missed_slots > 0
    gaps = [b.time_s - a.time_s for a, b in zip(samples, samples[1:-1])]
    assert min(gaps) > 0.012  # never two reads back to back to catch up


def test_samples_carry_the_phase_set_when_they_were_taken():
    sampler = PowerSampler(SteadySource(), rate_hz=5)  # a 200 ms grid: boundaries come from set_phase
    sampler.start()
    set_at = {PowerPhase.IDLE: 0.0}
    for phase in (PowerPhase.WARMUP, PowerPhase.MEASURE, PowerPhase.AFTER):
        time.sleep(0.25)
        set_at[phase] = time.perf_counter()
        sampler.set_phase(phase.value)  # the string form is accepted too
    time.sleep(0.1)
    samples = sampler.stop()

    order = list(PowerPhase)
    assert [order.index(s.phase) for s in samples] == sorted(order.index(s.phase) for s in samples)
    assert {s.phase for s in samples} == set(PowerPhase)
    for phase in (PowerPhase.WARMUP, PowerPhase.MEASURE, PowerPhase.AFTER):
        first = next(s for s in samples if s.phase == phase)
        assert 0 <= first.time_s - set_at[phase] < 0.05  # sampled at the boundary, not at the next slot
    assert sampler.phase is PowerPhase.AFTER


def test_drain_returns_each_sample_once_and_stop_returns_them_all():
    sampler = PowerSampler(SteadySource(), rate_hz=100)
    sampler.start()
    batches = []
    for _ in range(3):
        time.sleep(0.05)
        batches.append(sampler.drain())
    everything = sampler.stop()
    batches.append(sampler.drain())  # stop's closing sample and any not yet drained
    assert all(batches[:3])
    assert [s for batch in batches for s in batch] == everything
    assert sampler.drain() == []


def test_a_source_that_raises_does_not_stop_the_sampler():
    source = SteadySource(fail_on=frozenset({2, 3}))
    sampler = PowerSampler(source, rate_hz=100)
    samples = run_for(sampler, 0.1)
    assert len(samples) == source.reads - 2 and len(samples) > 3
    assert sampler.reasons["sampler"] == "reading gpu:0 failed: RuntimeError: sensor glitch (2 times)"
    assert source.closed


def test_the_sampler_uses_the_injected_clock():
    clock = FakeClock(start_s=1000.0, step_s=0.05)
    sampler = PowerSampler(SteadySource(), rate_hz=100, clock=clock)
    samples = run_for(sampler, 0.05)
    assert [s.time_s for s in samples] == pytest.approx([1000.0 + 0.05 * i for i in range(len(samples))])
    assert sampler.achieved_rate_hz == pytest.approx(20)


@pytest.mark.parametrize("rate_hz", [0, 0.5, 100.5, 1000, float("nan"), True])
def test_a_rate_outside_1_to_100_hz_is_refused(rate_hz):
    with pytest.raises(ValueError, match=r"power_sample_rate_hz must be between 1 and 100 Hz"):
        PowerSampler(SteadySource(), rate_hz=rate_hz)


def test_a_sampler_starts_once():
    sampler = PowerSampler(SteadySource(), rate_hz=100)
    sampler.start()
    try:
        with pytest.raises(RuntimeError):
            sampler.start()
    finally:
        sampler.stop()


# --- RAPL ---------------------------------------------------------------------


def rapl_domain(root: Path, name: str, label: str, energy_uj: int, max_range_uj: int | None = 262_143_328_850):
    domain = root / name
    domain.mkdir(parents=True)
    (domain / "name").write_text(label + "\n")
    (domain / "energy_uj").write_text(f"{energy_uj}\n")
    if max_range_uj is not None:
        (domain / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
    return domain


def set_energy(domain: Path, energy_uj: int) -> None:
    (domain / "energy_uj").write_text(f"{energy_uj}\n")


def test_rapl_sums_the_packages_and_derives_power_from_energy(tmp_path):
    package0 = rapl_domain(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    package1 = rapl_domain(tmp_path, "intel-rapl:1", "package-1", 5_000_000)
    core = rapl_domain(tmp_path, "intel-rapl:0:0", "core", 0)  # inside package-0: not counted again
    psys = rapl_domain(tmp_path, "intel-rapl:2", "psys", 0)  # the whole platform: not counted
    source = RaplCpuSource(tmp_path)
    assert source.open() and source.device == "cpu:0"

    first = source.read(10.0, PowerPhase.IDLE)
    assert first.energy_j == pytest.approx(6.0) and first.power_w is None  # no interval yet
    for domain, uj in ((package0, 31_000_000), (package1, 25_000_000), (core, 999_000_000), (psys, 999_000_000)):
        set_energy(domain, uj)
    second = source.read(10.5, PowerPhase.MEASURE)
    assert second.energy_j == pytest.approx(56.0)
    assert (second.power_w, second.power_source) == (pytest.approx(100.0), "rapl")
    assert second.gpu_util_pct is None and second.temperature_c is None


def test_rapl_handles_wraparound(tmp_path):
    package = rapl_domain(tmp_path, "intel-rapl:0", "package-0", 900_000, max_range_uj=1_000_000)
    source = RaplCpuSource(tmp_path)
    assert source.open()
    samples = [source.read(0.0, PowerPhase.MEASURE)]
    set_energy(package, 100_000)  # wrapped: 100 000 to the top, 100 000 past it
    samples.append(source.read(0.1, PowerPhase.MEASURE))
    set_energy(package, 300_000)
    samples.append(source.read(0.2, PowerPhase.AFTER))
    assert [s.energy_j for s in samples] == pytest.approx([0.9, 1.1, 1.3])
    assert samples[1].power_w == pytest.approx(2.0) and samples[2].power_w == pytest.approx(2.0)
    assert samples[-1].energy_j - samples[0].energy_j == pytest.approx(0.4)


def test_rapl_without_the_range_cannot_unwrap_and_says_so(tmp_path):
    package = rapl_domain(tmp_path, "intel-rapl:0", "package-0", 900_000, max_range_uj=None)
    source = RaplCpuSource(tmp_path)
    assert source.open()
    source.read(0.0, PowerPhase.MEASURE)
    set_energy(package, 100_000)
    assert source.read(0.1, PowerPhase.MEASURE).energy_j is None
    set_energy(package, 200_000)
    after = source.read(0.2, PowerPhase.MEASURE)
    # what the wrap lost is unknown: no energy from here on, but power from the differences after it
    assert after.energy_j is None and after.power_w is None  # no power across the failed read
    set_energy(package, 400_000)
    later = source.read(0.3, PowerPhase.MEASURE)
    assert later.energy_j is None and later.power_w == pytest.approx(2.0)
    assert "wrapped and its range is unknown" in source.reasons["energy_j"]
    assert "max_energy_range_uj unreadable" in source.reasons["energy_wraparound"]


def test_no_rapl_is_unavailable_with_the_reason(tmp_path):
    missing = RaplCpuSource(tmp_path / "powercap")
    assert missing.open() is False
    assert missing.unavailable_reason == f"no RAPL domain readable under {tmp_path / 'powercap'} (no such directory)"
    empty = RaplCpuSource(tmp_path)
    assert empty.open() is False and "(no package domain)" in empty.unavailable_reason


def test_unreadable_rapl_says_permission_denied(tmp_path, monkeypatch):
    rapl_domain(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    read_text = Path.read_text

    def root_only(path: Path, *args, **kwargs) -> str:
        if path.name == "energy_uj":  # 0400 root since Linux 5.10; chmod would not stop a root test run
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", root_only)
    source = RaplCpuSource(tmp_path)
    assert source.open() is False
    assert source.unavailable_reason == f"no RAPL domain readable under {tmp_path} (permission denied)"
    sampler = PowerSampler(source)
    sampler.start()
    assert sampler.stop() == []
    assert sampler.reasons["source"] == source.unavailable_reason


def test_the_sampler_thread_is_not_the_callers():
    seen = []

    class Recording(SteadySource):
        def read(self, time_s, phase):
            seen.append(threading.current_thread())
            return super().read(time_s, phase)

    sampler = PowerSampler(Recording(), rate_hz=100)
    sampler.start()
    time.sleep(0.05)
    sampler.stop()
    assert seen[0] is not threading.current_thread()


def test_a_hung_read_does_not_hang_stop(monkeypatch):
    monkeypatch.setattr(power.sampler, "STOP_TIMEOUT_S", 0.1)
    release = threading.Event()

    class Hanging(SteadySource):
        def read(self, time_s, phase):
            if self.reads:
                release.wait(5)
            return super().read(time_s, phase)

    source = Hanging()
    sampler = PowerSampler(source, rate_hz=100)
    sampler.start()
    time.sleep(0.05)
    started = time.perf_counter()
    samples = sampler.stop()
    assert time.perf_counter() - started < 1.0
    assert len(samples) == 1 and not source.closed  # the source is still in use by the hung read
    assert "did not stop within 0.1 s" in sampler.reasons["sampler"]
    release.set()


def test_a_failed_rapl_read_loses_no_energy(tmp_path, monkeypatch):
    package = rapl_domain(tmp_path, "intel-rapl:0", "package-0", 0)
    source = RaplCpuSource(tmp_path)
    assert source.open()
    first = source.read(0.0, PowerPhase.MEASURE)
    read_text = Path.read_text

    def failing(path: Path, *args, **kwargs) -> str:
        if path.name == "energy_uj":
            raise OSError(5, "Input/output error")
        return read_text(path, *args, **kwargs)

    set_energy(package, 1_000_000)
    monkeypatch.setattr(Path, "read_text", failing)
    gap = source.read(0.1, PowerPhase.MEASURE)
    monkeypatch.setattr(Path, "read_text", read_text)
    set_energy(package, 2_000_000)
    after = source.read(0.2, PowerPhase.MEASURE)
    set_energy(package, 2_500_000)
    last = source.read(0.3, PowerPhase.MEASURE)
    assert (gap.energy_j, gap.power_w) == (None, None)
    assert after.energy_j == pytest.approx(2.0) and after.power_w is None  # the difference spans two intervals
    assert last.power_w == pytest.approx(5.0)
    assert last.energy_j - first.energy_j == pytest.approx(2.5)
    assert source.reasons["energy_j"].startswith("RAPL: intel-rapl:0/energy_uj: [Errno 5] Input/output error")
