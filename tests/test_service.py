"""The service: device lock, out of memory, cleanup, and power telemetry beside a run."""

from __future__ import annotations

import threading

import pytest
from support.core import RecordingBackend, request, small

from fwbench_core.choices import DeviceKind, Phase
from fwbench_core.device_state import DeviceStateReader
from fwbench_core.devices import DeviceRef
from fwbench_core.errors import Busy, Cancelled, OutOfMemory
from fwbench_core.fake import FakeBackend
from fwbench_core.run_path import Resolved
from fwbench_core.service import RunnerService
from fwbench_core.timing import Progress, StepBatch, Summary


def assert_device_free(service: RunnerService) -> None:
    """A new run starts building at once (not queued behind a leaked lock) and completes."""
    run = service.run(small(), lambda: False)
    first = next(run)
    if first != Progress(Phase.BUILD, 0, 3):
        run.close()
        pytest.fail(f"the device is still locked: a new run began with {first}")
    assert isinstance(list(run)[-1], Summary)


def test_service_run_events_in_order():
    backend = RecordingBackend()
    events = list(RunnerService(backend).run(small(), lambda: False))
    assert events[0] == Progress(Phase.BUILD, 0, 3)
    assert isinstance(events[1], Resolved) and events[1].parameter_count == backend.workloads[0].parameter_count
    assert isinstance(events[-1], Summary)
    assert backend.workloads[0].closed == 1 and backend.released == 1


def test_second_run_on_a_busy_device_is_queued_and_can_be_cancelled():
    service = RunnerService(RecordingBackend())
    first = service.run(small(), lambda: False)
    assert next(first) == Progress(Phase.BUILD, 0, 3)  # first holds the CPU now
    cancel = threading.Event()
    second = service.run(small(), cancel.is_set)
    assert next(second) == Progress(Phase.QUEUED, 0, 3)
    cancel.set()
    with pytest.raises(Cancelled, match="waiting for cpu:0"):
        next(second)
    assert isinstance(list(first)[-1], Summary)
    assert_device_free(service)


def test_work_beyond_the_limit_is_refused_as_busy_until_a_request_ends():
    service = RunnerService(RecordingBackend(), max_queued_requests=2)
    first = service.run(small(), lambda: False)
    assert next(first) == Progress(Phase.BUILD, 0, 3)
    second = service.run(small(), lambda: False)
    assert next(second) == Progress(Phase.QUEUED, 0, 3)
    with pytest.raises(Busy, match=r"busy: 1 running and 1 waiting, its limit of 2 requests .*; retry later"):
        next(service.run(small(), lambda: False))
    with pytest.raises(Busy):
        service.on_cpu(lambda: None)  # an inspection is work too
    assert isinstance(list(first)[-1], Summary)
    assert service.on_cpu(lambda: "inspected") == "inspected"
    assert isinstance(list(second)[-1], Summary)
    assert_device_free(service)


def test_list_models_waits_for_nothing():
    service = RunnerService(RecordingBackend(), max_queued_requests=1)
    run = service.run(small(), lambda: False)
    next(run)  # the CPU is taken and the limit reached
    assert [spec.name for spec in service.list_models()] == service.backend.models.names()
    run.close()


def test_abandoned_run_releases_the_device():
    # gRPC drops the generator of a run whose client went away: closing it must free the device.
    service = RunnerService(RecordingBackend())
    run = service.run(small(measured_steps=1000), lambda: False)
    while not isinstance(next(run), StepBatch):
        pass
    run.close()
    assert_device_free(service)


@pytest.mark.parametrize("where", ["build", "step"])
def test_service_out_of_memory_becomes_resource_exhausted(where):
    oom = MemoryError("device full")
    backend = RecordingBackend(**{f"{where}_error": oom})
    service = RunnerService(backend)
    with pytest.raises(OutOfMemory) as info:
        list(service.run(small(batch_size=8), lambda: False))
    message = str(info.value)
    assert "device full" in message and "batch_size 8" in message and "3x32x32" in message
    assert backend.released == 1
    if where == "step":
        assert backend.workloads[0].closed == 1
    backend.build_error = backend.step_error = None
    assert_device_free(service)


def test_service_other_errors_propagate_and_still_clean_up():
    backend = RecordingBackend(step_error=ValueError("bad kernel"))
    service = RunnerService(backend)
    with pytest.raises(ValueError, match="bad kernel"):
        list(service.run(small(), lambda: False))
    assert backend.workloads[0].closed == 1 and backend.released == 1
    backend.step_error = None
    assert_device_free(service)


class ConstantPowerSource:
    """A telemetry source reading a steady 100 W and a counter that follows it."""

    def __new__(cls, clock):
        from fwbench_core.power import PowerSample, Telemetry

        class Source(Telemetry):
            device = "cpu:0"

            def open(self):
                self.unavailable_reason = None
                return True

            def read(self, time_s, phase):
                return PowerSample(time_s, phase, "cpu:0", power_w=100.0, power_source="test", energy_j=100.0 * time_s)

            def close(self):
                pass

        return Source()


def test_power_samples_stream_with_phases_and_the_summary_has_energy(monkeypatch):
    import fwbench_core.run_path as run_path_module
    from fwbench_core.telemetry import PowerBatch

    monkeypatch.setattr(run_path_module, "source_for", lambda ref, nvml: ConstantPowerSource(None))
    service = RunnerService(FakeBackend(step_time_s=0.005))
    run = request(warmup_steps=2, measured_steps=40, min_measure_s=1.2, idle_baseline_s=0.6)
    events = list(service.run(run, lambda: False))
    samples = [s for e in events if isinstance(e, PowerBatch) for s in e.samples]
    phases = {s.phase.value for s in samples}
    assert {"idle", "measure"} <= phases
    assert [s.time_s for s in samples] == sorted(s.time_s for s in samples)
    energy = events[-1].energy
    assert energy.mean_power_w == pytest.approx(100.0)
    assert energy.integrated_energy_j == pytest.approx(100.0 * energy.window_s, rel=0.01)
    assert energy.energy_per_sample_j == pytest.approx(energy.energy_j / (2 * events[-1].measured_steps))


def test_power_unavailable_says_why_and_telemetry_can_be_off():
    service = RunnerService(FakeBackend(step_time_s=0.0))
    on = list(service.run(request(warmup_steps=0, measured_steps=3, min_measure_s=0.0), lambda: False))[-1]
    if on.energy.sample_count == 0:
        assert on.energy.energy_j is None and "energy_j" in on.energy.reasons
    off = list(
        service.run(
            request(warmup_steps=0, measured_steps=3, min_measure_s=0.0, power_sample_rate_hz=0.0), lambda: False
        )
    )[-1]
    assert off.energy is None


def test_a_run_records_the_device_state_before_and_after_it():
    readers = []

    def reader(ref, nvml):
        readers.append(RecordingReader(ref))
        return readers[-1]

    service = RunnerService(FakeBackend(step_time_s=0.001), device_states=reader)
    summary = list(service.run(small(), lambda: False))[-1]
    assert readers[0].ref == DeviceRef(DeviceKind.CPU, 0) and readers[0].log == ["open", "read", "read", "close"]
    before, after = summary.device_before, summary.device_after
    assert before.load_avg_1m is not None and before.other_cpu_busy_cores is None
    assert after.load_avg_1m is not None and after.other_cpu_busy_cores is not None and after.other_cpu_busy_cores >= 0
    assert before.free_memory_bytes is None and before.reasons["free_memory_bytes"] == "not a GPU"
    busy = after.other_cpu_busy_cores > 0.5
    assert any(flag.startswith("host busy") for flag in summary.device_flags) is busy


def test_a_failed_run_closes_its_device_state_reader():
    readers = []

    def reader(ref, nvml):
        readers.append(RecordingReader(ref))
        return readers[-1]

    service = RunnerService(RecordingBackend(step_error=RuntimeError("boom")), device_states=reader)
    with pytest.raises(RuntimeError):
        list(service.run(small(), lambda: False))
    assert readers[0].log == ["open", "read", "close"]


class RecordingReader(DeviceStateReader):
    """The real reader of the host's /proc, recording the calls the service makes."""

    def __init__(self, ref):
        super().__init__(ref)
        self.log = []

    def open(self):
        self.log.append("open")
        super().open()

    def read(self):
        self.log.append("read")
        return super().read()

    def close(self):
        self.log.append("close")
        super().close()


def test_a_scenario_run_measures_energy_per_real_sample_padding_excluded(monkeypatch):
    import fwbench_core.run_path as run_path_module
    from fwbench_core.choices import Scenario
    from fwbench_core.runs import Serving

    monkeypatch.setattr(run_path_module, "source_for", lambda ref, nvml: ConstantPowerSource(None))
    service = RunnerService(FakeBackend(step_time_s=0.005))
    # Queries arrive ~10 ms apart and a batch of 2 starts at once (no timeout): most steps serve one, padded.
    serving = Serving(Scenario.SERVER, target_qps=100.0, query_count=150, arrival_seed=3)
    events = list(service.run(small(serving=serving, idle_baseline_s=0.6), lambda: False))
    summary = events[-1]
    assert summary.serving.sample_count == 150 < 2 * summary.measured_steps
    assert summary.energy.energy_per_sample_j == pytest.approx(summary.energy.energy_j / 150)
    # The measured window covers the queries (from the scenario's start, before the first arrival), to a sample.
    assert summary.energy.window_s >= summary.serving.duration_s - 0.1
