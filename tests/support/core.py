"""Helpers shared by the core's unit tests: requests, capabilities, a scripted workload on a fake clock."""

from __future__ import annotations

import pytest

from fwbench_core.backend import MemoryReading, Workload
from fwbench_core.builtin import MODEL_SPECS
from fwbench_core.catalog import Catalog
from fwbench_core.choices import Compilation, DeviceKind, Layout, Mode, Precision, Switch
from fwbench_core.devices import Capabilities, Device, DeviceRef
from fwbench_core.fake import FakeBackend, FakeWorkload
from fwbench_core.runs import RunConfig, RunRequest
from fwbench_core.timing import time_steps
from fwbench_core.validation import resolve

CPU = Device(DeviceRef(DeviceKind.CPU, 0), "cpu: test")
GPU0 = Device(DeviceRef(DeviceKind.GPU, 0), "Test GPU", 1 << 30, "1.0")
FP32_ONLY = lambda device: frozenset({Precision.FP32})
ALL_MODELS = Catalog(dict(MODEL_SPECS), {})


def capabilities_with(precisions, **overrides):
    def capabilities(device: Device) -> Capabilities:
        fields = dict(
            precisions=precisions(device),
            layouts=frozenset({Layout.CHANNELS_LAST}),
            compilations=frozenset({Compilation.EAGER, Compilation.GRAPH}),
            default_compilation=Compilation.GRAPH,
            cudnn_autotune=frozenset({Switch.OFF}),
            intra_op_threads=2,
            inter_op_threads=2,
        )
        fields.update(overrides)
        return Capabilities(**fields)

    return capabilities


def resolve_request(
    request: RunRequest, devices=(CPU,), precisions=FP32_ONLY, models=ALL_MODELS, **capability_overrides
) -> RunConfig:
    return resolve(request, devices, capabilities_with(precisions, **capability_overrides), models, "test")


def request(**overrides) -> RunRequest:
    fields = dict(model="resnet18", mode=Mode.TRAIN, batch_size=2)
    fields.update(overrides)
    return RunRequest(**fields)


def expect_error(error_type, req, **kwargs) -> str:
    with pytest.raises(error_type) as info:
        resolve_request(req, **kwargs)
    assert type(info.value) is error_type
    return str(info.value)


class FakeClock:
    """A clock that moves only when the fake device works."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class ScriptedWorkload(Workload):
    """Steps are queued on a pretend device; synchronize() waits for them on the fake clock."""

    def __init__(self, clock: FakeClock, durations: list[float]) -> None:
        self.clock = clock
        self.durations = list(durations)
        self.queued = 0.0
        self.parameter_count = 123
        self.calls: list[str] = []

    def _issue(self, kind: str) -> None:
        self.calls.append(kind)
        self.queued += self.durations[len(self.calls) - 1]

    def train_step(self) -> None:
        self._issue("train")

    def infer_step(self) -> None:
        self._issue("infer")

    def synchronize(self) -> None:
        self.clock.now += self.queued
        self.queued = 0.0

    def peak_memory(self) -> MemoryReading:
        return MemoryReading(4096, "scripted")


def config_for(mode=Mode.TRAIN, warmup=2, measured=5, batch_size=4) -> RunConfig:
    return resolve_request(
        request(mode=mode, batch_size=batch_size, warmup_steps=warmup, measured_steps=measured, min_measure_s=0.0)
    )


def drive(workload, config, clock, cancelled=lambda: False, build_started_s=None):
    return list(
        time_steps(
            workload,
            config,
            build_started_s=clock.now - 2.0 if build_started_s is None else build_started_s,
            started_at_unix_s=1.7e9,
            cancelled=cancelled,
            clock=clock,
        )
    )


class RecordingBackend(FakeBackend):
    """The fake backend, with hooks to fail and a record of the cleanup calls."""

    def __init__(self, build_error=None, step_error=None, step_time_s=0.0):
        super().__init__(step_time_s=step_time_s)
        self.build_error = build_error
        self.step_error = step_error
        self.released = 0
        self.workloads: list[RecordingWorkload] = []

    def build(self, config):
        if self.build_error is not None:
            raise self.build_error
        workload = RecordingWorkload(config, self.step_time_s, self.step_error)
        self.workloads.append(workload)
        return workload

    def release_memory(self):
        self.released += 1


class RecordingWorkload(FakeWorkload):
    def __init__(self, config, step_time_s, step_error):
        super().__init__(config, step_time_s)
        self.step_error = step_error
        self.closed = 0

    def infer_step(self):
        if self.step_error is not None:
            raise self.step_error
        super().infer_step()

    train_step = infer_step

    def close(self):
        self.closed += 1


def small(**overrides) -> RunRequest:
    fields = dict(
        model="resnet18",
        mode=Mode.INFER,
        batch_size=2,
        input_shape=(3, 32, 32),
        warmup_steps=1,
        measured_steps=2,
        min_measure_s=0.0,
    )
    fields.update(overrides)
    return RunRequest(**fields)
