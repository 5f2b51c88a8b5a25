"""Unit tests of fwbench_core, in-process and without any framework."""

from __future__ import annotations

import ast
import inspect
import signal
import socket
import threading
from pathlib import Path

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from fwbench_aggregator import launch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fwbench_core import errors, healthcheck, timing, wire
from fwbench_core.backend import Backend, MemoryReading, Workload
from fwbench_core.catalog import MODEL_SPECS, get_spec
from fwbench_core.errors import (
    Cancelled,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    RunnerError,
    Unavailable,
    status_for,
)
from fwbench_core.fake import FakeBackend, FakeWorkload
from fwbench_core.registry import ModelRegistry
from fwbench_core.server import create_server
from fwbench_core.service import Resolved, RunnerService
from fwbench_core.spec import (
    Capabilities,
    Compilation,
    Layout,
    Switch,
    WarmupUntilStable,
    Device,
    DeviceKind,
    DeviceRef,
    Head,
    Mode,
    Objective,
    Phase,
    Precision,
    RunConfig,
    RunRequest,
    Task,
)
from fwbench_core.timing import Progress, StepBatch, Summary, time_steps
from fwbench_core.validation import resolve

REPO_ROOT = Path(__file__).resolve().parents[1]
CORE_DIR = REPO_ROOT / "runners" / "core" / "fwbench_core"

CPU = Device(DeviceRef(DeviceKind.CPU, 0), "cpu: test")
GPU0 = Device(DeviceRef(DeviceKind.GPU, 0), "Test GPU", 1 << 30, "1.0")
FP32_ONLY = lambda device: frozenset({Precision.FP32})  # noqa: E731
ALL_MODELS = sorted(MODEL_SPECS)


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


# --- validation -------------------------------------------------------------


def test_defaults_are_resolved():
    config = resolve_request(request())
    assert config.model is MODEL_SPECS["resnet18"]
    assert config.precision is Precision.FP32
    assert config.warmup_steps == 5
    assert config.measured_steps == 20
    assert config.input_shape == (3, 224, 224)
    assert config.device == CPU
    assert config.mode is Mode.TRAIN and config.batch_size == 2


def test_default_device_is_the_first_gpu_where_there_is_one():
    gpu1 = Device(DeviceRef(DeviceKind.GPU, 1), "Other GPU")
    assert resolve_request(request(), devices=(CPU, GPU0, gpu1)).device == GPU0


def test_explicit_values_are_kept():
    config = resolve_request(
        request(
            input_shape=(3, 64, 48),
            precision=Precision.TF32,
            device=DeviceRef(DeviceKind.GPU, 0),
            warmup_steps=0,
            measured_steps=1,
            seed=7,
        ),
        devices=(CPU, GPU0),
        precisions=lambda d: frozenset({Precision.FP32, Precision.TF32}),
    )
    assert config.input_shape == (3, 64, 48)
    assert config.precision is Precision.TF32
    assert config.device == GPU0
    # 0 warm-up steps is a choice, not "unset".
    assert (config.warmup_steps, config.measured_steps, config.seed) == (0, 1, 7)


def expect_error(error_type, req, **kwargs) -> str:
    with pytest.raises(error_type) as info:
        resolve_request(req, **kwargs)
    assert type(info.value) is error_type
    return str(info.value)


def test_unknown_model_lists_known_models():
    message = expect_error(NotFound, request(model="vgg99"))
    assert "vgg99" in message
    for name in MODEL_SPECS:
        assert name in message


def test_model_without_a_builder():
    message = expect_error(FailedPrecondition, request(model="resnet18"), models=["mobilenet_v2"])
    assert "resnet18" in message


def test_model_options_default_and_choice():
    assert resolve_request(request(model="bert_base", input_shape=())).model_options == {"head": "classification"}
    config = resolve_request(request(model="bert_base", input_shape=(16,), model_options={"head": "mlm"}))
    assert config.model_options == {"head": "mlm"}
    assert config.head == Head(Objective.TOKEN_CE, 30522)
    assert resolve_request(request(model="resnet18")).model_options == {}


def test_unknown_model_option_names_the_accepted_ones():
    message = expect_error(InvalidArgument, request(model="bert_base", input_shape=(), model_options={"heads": "mlm"}))
    assert "model_options" in message and "'heads'" in message and "head" in message
    message = expect_error(InvalidArgument, request(model="resnet18", model_options={"head": "mlm"}))
    assert "model_options" in message and "none" in message


def test_bad_model_option_value_names_the_accepted_values():
    message = expect_error(InvalidArgument, request(model="bert_base", input_shape=(), model_options={"head": "qa"}))
    assert "head='qa'" in message and "classification, mlm" in message


def test_sequence_longer_than_the_model_takes_is_refused():
    message = expect_error(InvalidArgument, request(model="bert_base", input_shape=(513,)))
    assert "input_shape 513" in message and "1<=seq<=512" in message


def test_wire_request_carries_model_options():
    req = wire.run_request_from_wire(pb.RunRequest(model="bert_base", mode=pb.MODE_TRAIN, batch_size=1,
                                                   model_options={"head": "mlm"}))
    assert req.model_options == {"head": "mlm"}


def test_mode_must_be_set():
    message = expect_error(InvalidArgument, request(mode=None))
    assert "mode" in message and "train, infer" in message


@pytest.mark.parametrize("batch_size", [0, 65537, 70000])
def test_batch_size_range(batch_size):
    message = expect_error(InvalidArgument, request(batch_size=batch_size))
    assert "batch_size" in message and "1" in message and "65536" in message and str(batch_size) in message


@pytest.mark.parametrize("batch_size", [1, 65536])
def test_batch_size_bounds_are_accepted(batch_size):
    assert resolve_request(request(batch_size=batch_size)).batch_size == batch_size


@pytest.mark.parametrize(
    "shape",
    [(3, 32), (3, 32, 32, 1), (3, 31, 32), (3, 32, 16), (1, 32, 32), (3, 4097, 32)],
    ids=["rank-2", "rank-4", "height-small", "width-small", "channels", "too-large"],
)
def test_input_shape_errors_name_the_accepted_shapes(shape):
    message = expect_error(InvalidArgument, request(input_shape=shape))
    assert "input_shape" in message and "x".join(map(str, shape)) in message
    assert MODEL_SPECS["resnet18"].describe_accepted_shapes() in message
    assert "C=3" in message and "32<=H<=4096" in message and "default 3x224x224" in message


@pytest.mark.parametrize("shape", [(3, 32, 32), (3, 4096, 4096), (3, 33, 500)])
def test_input_shape_bounds_are_accepted(shape):
    assert resolve_request(request(input_shape=shape)).input_shape == shape


def test_missing_device_names_available_devices():
    message = expect_error(FailedPrecondition, request(device=DeviceRef(DeviceKind.GPU, 7)), devices=(CPU, GPU0))
    assert "gpu:7" in message and "available devices: cpu:0, gpu:0" in message


def test_unsupported_precision_names_supported_ones():
    message = expect_error(
        FailedPrecondition,
        request(precision=Precision.AMP_FP16, device=DeviceRef(DeviceKind.CPU)),
        precisions=lambda d: frozenset({Precision.FP32, Precision.TF32}),
    )
    assert "precision amp_fp16" in message and "cpu:0" in message and "fp32, tf32" in message and "test runner" in message


@pytest.mark.parametrize(
    "field, value, bounds",
    [
        ("warmup_steps", 10_001, ("0", "10000")),
        ("measured_steps", 0, ("1", "1000000")),
        ("measured_steps", 1_000_001, ("1", "1000000")),
    ],
)
def test_step_count_ranges(field, value, bounds):
    message = expect_error(InvalidArgument, request(**{field: value}))
    assert field in message and all(b in message for b in bounds)


def test_wire_request_with_unknown_enum_number_is_invalid():
    with pytest.raises(InvalidArgument, match=r"precision has unknown value 42; accepted values: fp32, tf32"):
        wire.run_request_from_wire(pb.RunRequest(model="resnet18", mode=pb.MODE_TRAIN, batch_size=1, precision=42))


def test_wire_request_optional_fields():
    unset = wire.run_request_from_wire(pb.RunRequest(model="resnet18", mode=pb.MODE_INFER, batch_size=3))
    assert unset == RunRequest("resnet18", Mode.INFER, 3)
    zero = wire.run_request_from_wire(
        pb.RunRequest(
            model="resnet18",
            mode=pb.MODE_TRAIN,
            batch_size=3,
            input_shape=[3, 40, 40],
            precision=pb.PRECISION_TF32,
            device=pb.DeviceSelector(kind=pb.DEVICE_KIND_GPU, index=2),
            warmup_steps=0,
            measured_steps=0,
            seed=9,
        )
    )
    assert zero == RunRequest(
        "resnet18", Mode.TRAIN, 3, (3, 40, 40), Precision.TF32, DeviceRef(DeviceKind.GPU, 2), 0, 0, 9
    )
    # An unset device kind is the runner's default device.
    default_device = wire.run_request_from_wire(
        pb.RunRequest(model="resnet18", mode=pb.MODE_TRAIN, batch_size=1, device=pb.DeviceSelector(index=3))
    )
    assert default_device.device is None


# --- the timing loop ----------------------------------------------------------


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
    return resolve_request(request(mode=mode, batch_size=batch_size, warmup_steps=warmup, measured_steps=measured))


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


# --- the service: device lock, out of memory, cleanup ---------------------------


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
    fields = dict(model="resnet18", mode=Mode.INFER, batch_size=2, input_shape=(3, 32, 32), warmup_steps=1,
                  measured_steps=2)
    fields.update(overrides)
    return RunRequest(**fields)


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
    with pytest.raises(ResourceExhausted) as info:
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


# --- wire -------------------------------------------------------------------

CORE_TO_PROTO = {
    Mode: (pb.Mode, "MODE"),
    Precision: (pb.Precision, "PRECISION"),
    DeviceKind: (pb.DeviceKind, "DEVICE_KIND"),
    Task: (pb.Task, "TASK"),
    Phase: (pb.Phase, "PHASE"),
    Layout: (pb.Layout, "LAYOUT"),
    Compilation: (pb.Compilation, "COMPILATION"),
    Switch: (pb.Switch, "SWITCH"),
}


def test_every_proto_enum_has_a_core_counterpart():
    proto_enums = set(pb.DESCRIPTOR.enum_types_by_name)
    assert proto_enums == {wrapper.DESCRIPTOR.name for wrapper, _ in CORE_TO_PROTO.values()}


@pytest.mark.parametrize("core_enum", list(CORE_TO_PROTO), ids=lambda e: e.__name__)
def test_enum_round_trip(core_enum):
    wrapper, prefix = CORE_TO_PROTO[core_enum]
    # Every proto value except UNSPECIFIED maps to a core member and back.
    for name, number in wrapper.items():
        member = wire.enum_from_wire(core_enum, number, "field")
        if name == f"{prefix}_UNSPECIFIED":
            assert number == 0 and member is None
            continue
        assert isinstance(member, core_enum), name
        assert wire.enum_to_wire(member) == number
    # Every core member maps to a proto value and back.
    for member in core_enum:
        number = wire.enum_to_wire(member)
        assert number != 0 and wrapper.Name(number) == f"{prefix}_{member.name}"
        assert wire.enum_from_wire(core_enum, number, "field") is member
    assert len(core_enum) == len(wrapper.keys()) - 1


def test_unknown_enum_number_is_invalid_argument():
    with pytest.raises(InvalidArgument, match=r"mode has unknown value 7; accepted values: train, infer"):
        wire.enum_from_wire(Mode, 7, "mode")


def test_summary_without_peak_memory_leaves_the_field_unset():
    summary = Summary(3, 1.0, 1.0, 1.0, 2.0, MemoryReading(None, "not readable here"), 0.5, 10.0, 11.0)
    info = FakeBackend().runner_info()
    message = wire.event_to_wire(summary, info).summary
    assert not message.HasField("peak_memory_bytes")
    assert message.peak_memory_source == "not readable here"
    with_bytes = wire.event_to_wire(
        Summary(3, 1.0, 1.0, 1.0, 2.0, MemoryReading(0, "zero is a reading"), 0.5, 10.0, 11.0), info
    ).summary
    assert with_bytes.HasField("peak_memory_bytes") and with_bytes.peak_memory_bytes == 0


# --- registry ----------------------------------------------------------------


def test_registry_refuses_a_name_outside_the_catalog():
    registry = ModelRegistry("test")
    with pytest.raises(ValueError, match="not_a_model"):
        registry.register("not_a_model")
    assert registry.names() == []


def test_registry_refuses_duplicates():
    registry = ModelRegistry("test")
    registry.register("resnet18")(lambda: "first")
    with pytest.raises(ValueError, match="twice"):
        registry.register("resnet18")
    assert registry.builder("resnet18")() == "first"


def test_registry_lists_sorted_names():
    registry = ModelRegistry("test")
    for name in ("resnet18", "mobilenet_v2"):
        registry.register(name)(lambda: None)
    assert registry.names() == ["mobilenet_v2", "resnet18"]


def test_catalog_get_spec():
    assert get_spec("resnet18").default_input_shape == (3, 224, 224)
    with pytest.raises(NotFound, match="known models: " + ", ".join(sorted(MODEL_SPECS))):
        get_spec("nope")


# --- error status table ------------------------------------------------------

STATUS_TABLE = {
    RunnerError: grpc.StatusCode.INTERNAL,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Cancelled: grpc.StatusCode.CANCELLED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
}


def test_status_table_covers_every_error_kind():
    kinds = {obj for _, obj in inspect.getmembers(errors, inspect.isclass) if issubclass(obj, RunnerError)}
    assert kinds == set(STATUS_TABLE)


@pytest.mark.parametrize("kind", list(STATUS_TABLE), ids=lambda k: k.__name__)
def test_status_for_runner_errors(kind):
    assert status_for(kind("what the user reads")) == (STATUS_TABLE[kind], "what the user reads")


def test_status_for_a_plain_exception_is_internal():
    code, message = status_for(KeyError("lost"))
    assert code is grpc.StatusCode.INTERNAL
    assert "KeyError" in message and "lost" in message


# --- the gRPC server, in-process ------------------------------------------------


class InProcessServer:
    def __init__(self, backend: Backend) -> None:
        self.server, self.port, self.health = create_server(RunnerService(backend), "127.0.0.1:0")
        self.server.start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.RunnerStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        self.server.stop(None).wait(5)


@pytest.fixture
def serve_backend():
    servers = []

    def start(backend):
        servers.append(InProcessServer(backend))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def rpc_run(stub, **overrides):
    fields = dict(model="resnet18", mode=pb.MODE_INFER, batch_size=2, input_shape=[3, 32, 32], warmup_steps=1,
                  measured_steps=2)
    fields.update(overrides)
    return list(stub.Run(pb.RunRequest(**fields), timeout=30))


def test_server_describes_the_fake_backend(serve_backend):
    srv = serve_backend(FakeBackend(step_time_s=0.0))
    info = srv.stub.Describe(pb.DescribeRequest(), timeout=10)
    assert (info.framework, info.protocol) == ("fake", "fwbench.runner.v1")
    assert list(info.precisions) == [pb.PRECISION_FP32]
    models = srv.stub.ListModels(pb.ListModelsRequest(), timeout=10).models
    assert [m.name for m in models] == sorted(MODEL_SPECS)
    events = rpc_run(srv.stub)
    assert events[-1].summary.measured_steps == 2


def test_server_out_of_memory_in_build_is_resource_exhausted(serve_backend):
    backend = RecordingBackend(build_error=MemoryError("cannot allocate"))
    srv = serve_backend(backend)
    with pytest.raises(grpc.RpcError) as info:
        rpc_run(srv.stub)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "cannot allocate" in info.value.details()
    assert backend.released == 1
    backend.build_error = None
    assert rpc_run(srv.stub)[-1].summary.measured_steps == 2


def test_server_out_of_memory_in_a_step_closes_the_workload(serve_backend):
    backend = RecordingBackend(step_error=MemoryError("cannot allocate"))
    srv = serve_backend(backend)
    with pytest.raises(grpc.RpcError) as info:
        rpc_run(srv.stub)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert backend.workloads[0].closed == 1 and backend.released == 1
    backend.step_error = None
    assert rpc_run(srv.stub)[-1].summary.measured_steps == 2


def test_server_unexpected_error_is_internal(serve_backend):
    srv = serve_backend(RecordingBackend(build_error=ZeroDivisionError("oops")))
    with pytest.raises(grpc.RpcError) as info:
        rpc_run(srv.stub)
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert "ZeroDivisionError" in info.value.details() and "oops" in info.value.details()


def test_server_graceful_stop_finishes_the_run_in_flight():
    srv = InProcessServer(FakeBackend(step_time_s=0.01))
    try:
        building = threading.Event()
        outcome: dict[str, object] = {}

        def consume():
            try:
                events = []
                for event in srv.stub.Run(
                    pb.RunRequest(model="resnet18", mode=pb.MODE_INFER, batch_size=2, input_shape=[3, 32, 32],
                                  warmup_steps=1, measured_steps=30),
                    timeout=30,
                ):
                    events.append(event)
                    building.set()
                outcome["events"] = events
            except Exception as exc:
                outcome["error"] = exc
            finally:
                building.set()

        thread = threading.Thread(target=consume)
        thread.start()
        assert building.wait(10)
        # What serve() does on SIGTERM.
        srv.health.enter_graceful_shutdown()
        reply = health_pb2_grpc.HealthStub(srv.channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        stopped = srv.server.stop(grace=10)
        thread.join(15)
        assert "error" not in outcome, outcome.get("error")
        assert outcome["events"][-1].summary.measured_steps == 30
        assert stopped.wait(5)
        with pytest.raises(grpc.RpcError) as info:
            srv.stub.Describe(pb.DescribeRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        srv.close()


def test_runner_process_exits_cleanly_on_sigterm(tmp_path):
    runner = launch.LocalRunner(
        "fake", launch.fake_runner_command(), log_path=tmp_path / "fake.log",
        env={"FWBENCH_FAKE_STEP_TIME_S": "0.01"},
    )
    address = runner.start()
    try:
        with grpc.insecure_channel(address) as channel:
            call = pb_grpc.RunnerStub(channel).Run(
                pb.RunRequest(model="resnet18", mode=pb.MODE_INFER, batch_size=2, input_shape=[3, 32, 32],
                              warmup_steps=1, measured_steps=30),
                timeout=30,
            )
            first = next(call)
            assert first.progress.phase == pb.PHASE_BUILD
            runner.process.send_signal(signal.SIGTERM)
            rest = list(call)  # the run in flight finishes
            assert rest[-1].summary.measured_steps == 30
        assert runner.process.wait(15) == 0
    finally:
        runner.stop()


# --- no framework in the core -------------------------------------------------

FRAMEWORKS = {"torch", "torchvision", "tensorflow", "keras", "tf_keras", "jax", "jaxlib", "flax"}


def imported_top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_imported_names_parser_sees_nested_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    import torch.nn as nn\n    from keras import layers\nfrom . import x\n")
    assert imported_top_level_names(probe) == {"torch", "keras"}


def test_core_imports_no_framework():
    modules = sorted(CORE_DIR.rglob("*.py"))
    assert {"timing.py", "service.py", "server.py", "fake.py"} <= {m.name for m in modules}
    offenders = {
        str(m.relative_to(REPO_ROOT)): sorted(imported_top_level_names(m) & FRAMEWORKS) for m in modules
    }
    assert {k: v for k, v in offenders.items() if v} == {}


# --- explicit settings, warm-up until stable, minimum duration, device timers --


def test_settings_defaults_are_explicit():
    config = resolve_request(request())
    assert config.layout is Layout.CHANNELS_LAST
    assert config.compilation is Compilation.GRAPH  # the capabilities' default
    assert config.cudnn_autotune is Switch.OFF
    assert (config.intra_op_threads, config.inter_op_threads) == (2, 2)
    assert resolve_request(request(model="bert_base", input_shape=(16,))).layout is None


def test_layout_is_for_image_models_only():
    message = expect_error(InvalidArgument, request(model="lstm_lm", input_shape=(8,), layout=Layout.CHANNELS_LAST))
    assert "layout" in message and "image models" in message and "lstm_lm" in message


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("layout", Layout.CHANNELS_FIRST, "supported there: channels_last"),
        ("compilation", Compilation.XLA, "supported there: eager, graph"),
        ("cudnn_autotune", Switch.ON, "supported there: off"),
    ],
)
def test_a_setting_the_runner_cannot_honour_is_refused(field, value, named):
    message = expect_error(FailedPrecondition, request(**{field: value}))
    assert f"{field} {value.value}" in message and named in message and "test runner" in message


def test_thread_counts_fixed_at_start_up_are_refused_when_they_differ():
    assert resolve_request(request(intra_op_threads=2, inter_op_threads=2)).intra_op_threads == 2
    message = expect_error(FailedPrecondition, request(inter_op_threads=4))
    assert "inter_op_threads 4" in message and "--inter-op-threads 4" in message
    adjustable = resolve_request(request(intra_op_threads=1), intra_op_threads_adjustable=True)
    assert adjustable.intra_op_threads == 1


def test_warmup_until_stable_needs_a_cap_at_least_its_window():
    message = expect_error(InvalidArgument, request(warmup_steps=3, warmup_until_stable=WarmupUntilStable(0.05, 5)))
    assert "warmup_steps (3)" in message and "window (5)" in message
    message = expect_error(InvalidArgument, request(warmup_until_stable=WarmupUntilStable(1.5, 5)))
    assert "cv_threshold" in message


def stable_config(cap: int, threshold: float = 0.05, window: int = 3, measured: int = 4, min_measure_s=None):
    return resolve_request(
        request(warmup_steps=cap, measured_steps=measured, warmup_until_stable=WarmupUntilStable(threshold, window),
                min_measure_s=min_measure_s)
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


# --- power telemetry beside a run ------------------------------------------------


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
    import fwbench_core.service as service_module
    from fwbench_core.service import PowerBatch

    monkeypatch.setattr(service_module, "source_for", lambda ref: ConstantPowerSource(None))
    service = RunnerService(FakeBackend(step_time_s=0.005))
    events = list(service.run(request(warmup_steps=2, measured_steps=40, idle_baseline_s=0.2), lambda: False))
    samples = [s for e in events if isinstance(e, PowerBatch) for s in e.samples]
    phases = {s.phase.value for s in samples}
    assert {"idle", "measure"} <= phases
    assert [s.time_s for s in samples] == sorted(s.time_s for s in samples)
    energy = events[-1].energy
    assert energy.mean_power_w == pytest.approx(100.0)
    assert energy.integrated_energy_j == pytest.approx(100.0 * energy.window_s, rel=0.01)
    assert energy.energy_per_sample_j == pytest.approx(energy.energy_j / (2 * 40))


def test_power_unavailable_says_why_and_telemetry_can_be_off():
    service = RunnerService(FakeBackend(step_time_s=0.0))
    on = list(service.run(request(warmup_steps=0, measured_steps=3), lambda: False))[-1]
    if on.energy.sample_count == 0:
        assert on.energy.energy_j is None and "energy_j" in on.energy.reasons
    off = list(service.run(request(warmup_steps=0, measured_steps=3, power_sample_rate_hz=0.0), lambda: False))[-1]
    assert off.energy is None


def test_power_sample_rate_out_of_range_names_the_field():
    message = expect_error(InvalidArgument, request(power_sample_rate_hz=500.0))
    assert "power_sample_rate_hz" in message and "100" in message and "0 turns telemetry off" in message


# --- the container health check ---------------------------------------------------


@pytest.mark.parametrize(
    "listen, probe",
    [("0.0.0.0:50051", "127.0.0.1:50051"), ("[::]:7", "127.0.0.1:7"), ("torch:50051", "torch:50051")],
)
def test_healthcheck_probes_loopback_for_a_wildcard_listen_address(listen, probe):
    assert healthcheck.probe_address(listen) == probe


def test_healthcheck_fails_naming_the_address_where_nothing_listens():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    serving, message = healthcheck.check(f"127.0.0.1:{port}", timeout_s=1.0)
    assert not serving
    assert f"127.0.0.1:{port}" in message and ("UNAVAILABLE" in message or "DEADLINE_EXCEEDED" in message)
