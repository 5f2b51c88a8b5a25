"""Conversions between the core's data and the proto messages."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from support.core import resolve_request
from support.wire_bytes import delimited_field, varint, varint_field

from fwbench_core import decoding, wire, wire_events
from fwbench_core.backend import MemoryReading
from fwbench_core.choices import (
    Compilation,
    DeviceKind,
    Layout,
    Mode,
    Phase,
    Precision,
    Profile,
    Scenario,
    Strategy,
    Switch,
    Task,
)
from fwbench_core.device_state import DeviceState
from fwbench_core.errors import InvalidArgument
from fwbench_core.fake import FakeBackend
from fwbench_core.runs import Serving
from fwbench_core.serving import QueryBatch, ServingSummary
from fwbench_core.timing import Summary

CORE_TO_PROTO = {
    Mode: (pb.Mode, "MODE"),
    Precision: (pb.Precision, "PRECISION"),
    DeviceKind: (pb.DeviceKind, "DEVICE_KIND"),
    Task: (pb.Task, "TASK"),
    Phase: (pb.Phase, "PHASE"),
    Layout: (pb.Layout, "LAYOUT"),
    Compilation: (pb.Compilation, "COMPILATION"),
    Switch: (pb.Switch, "SWITCH"),
    Strategy: (pb.Strategy, "STRATEGY"),
    Profile: (pb.Profile, "PROFILE"),
    Scenario: (pb.Scenario, "SCENARIO"),
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
    message = wire_events.event_to_wire(summary, info).summary
    assert not message.HasField("peak_memory_bytes")
    assert message.peak_memory_source == "not readable here"
    with_bytes = wire_events.event_to_wire(
        Summary(3, 1.0, 1.0, 1.0, 2.0, MemoryReading(0, "zero is a reading"), 0.5, 10.0, 11.0), info
    ).summary
    assert with_bytes.HasField("peak_memory_bytes") and with_bytes.peak_memory_bytes == 0


def test_device_states_and_flags_cross_the_wire_and_unread_fields_stay_unset():
    before = DeviceState(
        load_avg_1m=0.5,
        gpu_processes=1,
        other_gpu_processes=0,
        free_memory_bytes=0,
        throttle_reasons=("gpu_idle",),
        reasons={"other_cpu_busy_cores": "a first reading"},
    )
    after = DeviceState(
        load_avg_1m=1.5,
        other_cpu_busy_cores=0.0,
        reasons={"throttle_reasons": "NVML: Not Supported"},
        notes=("a note",),
    )
    summary = Summary(
        3,
        1.0,
        1.0,
        1.0,
        2.0,
        MemoryReading(None, "n/a"),
        0.5,
        10.0,
        11.0,
        device_before=before,
        device_after=after,
        device_flags=("host busy: ...",),
    )
    message = wire_events.event_to_wire(summary, FakeBackend().runner_info()).summary
    assert list(message.device_flags) == ["host busy: ..."]
    b, a = message.device_before, message.device_after
    assert (b.load_avg_1m, b.gpu_processes, b.other_gpu_processes, b.free_memory_bytes) == (0.5, 1, 0, 0)
    assert b.HasField("free_memory_bytes") and not b.HasField("other_cpu_busy_cores") and not b.HasField("sm_clock_mhz")
    assert list(b.throttle_reasons) == ["gpu_idle"] and dict(b.reasons) == {"other_cpu_busy_cores": "a first reading"}
    assert a.HasField("other_cpu_busy_cores") and a.other_cpu_busy_cores == 0.0
    assert list(a.throttle_reasons) == [] and a.reasons["throttle_reasons"] == "NVML: Not Supported"
    assert list(a.notes) == ["a note"]


@pytest.mark.parametrize(
    "data, named",
    [
        (varint_field(3, 2**40), "batch_size is 1099511627776 on the wire"),
        (varint_field(3, 2**32), "batch_size is 4294967296 on the wire"),
        (delimited_field(4, varint(3) + varint(2**33)), "input_shape is 8589934592 on the wire"),  # packed
        (delimited_field(6, varint_field(2, 2**36)), "device.index is 68719476736 on the wire"),
        (varint_field(2, 2**32 + 1), "mode is 4294967297 on the wire"),
    ],
)
def test_a_32_bit_field_sent_more_bits_is_named_with_the_value_sent(data, named):
    # Protobuf itself decodes these, keeping the low 32 bits: 2**40 would be a batch size of 0.
    pb.RunRequest.FromString(data)
    assert decoding.overflowing_field(data, pb.RunRequest.DESCRIPTOR).startswith(named)


def test_every_value_a_32_bit_field_holds_passes():
    data = pb.RunRequest(
        model="resnet18",
        batch_size=2**32 - 1,
        input_shape=[3, 2**32 - 1],
        device=pb.DeviceSelector(index=2**32 - 1),
        seed=2**64 - 1,
        model_options={"head": "mlm"},
    ).SerializeToString()
    # A negative enum travels as a 64-bit varint: it fits its field.
    assert decoding.overflowing_field(data + varint_field(2, 2**64 - 1), pb.RunRequest.DESCRIPTOR) is None


def test_a_serving_run_crosses_the_wire_with_unsupported_percentiles_unset():
    info = FakeBackend().runner_info()
    serving = ServingSummary(
        Scenario.SERVER,
        query_count=30,
        sample_count=30,
        duration_s=1.5,
        achieved_qps=20.0,
        throughput_samples_per_s=20.0,
        mean_latency_s=0.01,
        mean_batch_queries=1.25,
        target_qps=20.0,
        p50_latency_s=0.009,
        p90_latency_s=0.0,
        reasons={"p99_latency_s": "30 queries cannot support p99"},
    )
    summary = Summary(24, 1.0, 1.0, 1.0, 2.0, MemoryReading(None, "n/a"), 0.5, 10.0, 11.0, serving=serving)
    message = wire_events.event_to_wire(summary, info).summary.serving
    assert message.scenario == pb.SCENARIO_SERVER and message.query_count == 30 and message.mean_batch_queries == 1.25
    assert message.p50_latency_s == 0.009
    assert message.HasField("p90_latency_s") and message.p90_latency_s == 0.0  # a figure of zero is a figure
    assert not message.HasField("p99_latency_s") and dict(message.reasons) == serving.reasons
    assert not wire_events.event_to_wire(replace(summary, serving=None), info).summary.HasField("serving")
    queries = wire_events.event_to_wire(QueryBatch((0.5, 0.25), (0.0, 0.125), 40), info).queries
    assert (list(queries.latency_s), list(queries.queue_s), queries.first_index) == ([0.5, 0.25], [0.0, 0.125], 40)


def test_serving_requests_from_the_wire_and_resolved_back():
    base = dict(model="resnet18", mode=pb.MODE_INFER, batch_size=2, seed=7)
    assert wire.run_request_from_wire(pb.RunRequest(**base)).serving is None
    asked = pb.Serving(scenario=pb.SCENARIO_SERVER, target_qps=50.0, batch_timeout_ms=2.0)
    request = wire.run_request_from_wire(pb.RunRequest(**base, serving=asked))
    assert request.serving == Serving(Scenario.SERVER, target_qps=50.0, batch_timeout_ms=2.0)
    config = resolve_request(request)
    resolved = wire.config_to_wire(config, FakeBackend().runner_info()).serving
    assert (resolved.scenario, resolved.target_qps, resolved.batch_timeout_ms) == (pb.SCENARIO_SERVER, 50.0, 2.0)
    assert resolved.arrival_seed == 7 and resolved.query_count == config.serving.query_count >= 300
    plain = resolve_request(replace(request, serving=None))
    assert not wire.config_to_wire(plain, FakeBackend().runner_info()).HasField("serving")
