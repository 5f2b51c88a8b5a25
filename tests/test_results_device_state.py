"""The device state around each run, as columns of the results table."""

from __future__ import annotations

import math

from fwbench.runner.v1 import runner_pb2 as pb
from support.results import run_result

from fwbench_aggregator.run.client import RunResult
from fwbench_aggregator.store.records import summary_frame


def result(before: pb.DeviceState, after: pb.DeviceState, flags: list[str]) -> RunResult:
    config = pb.ResolvedConfig(
        model="resnet18",
        mode=pb.MODE_TRAIN,
        batch_size=2,
        device=pb.Device(kind=pb.DEVICE_KIND_GPU, index=0, name="Test GPU"),
    )
    summary = pb.Summary(measured_steps=3, device_before=before, device_after=after, device_flags=flags)
    return run_result(pb.DescribeResponse(framework="torch"), config, summary)


def test_device_state_columns_take_the_worst_of_before_and_after():
    before = pb.DeviceState(
        load_avg_1m=0.2,
        other_gpu_processes=0,
        sm_clock_mhz=1980,
        max_sm_clock_mhz=1980,
        throttle_reasons=["gpu_idle"],
        free_memory_bytes=30 << 30,
        total_memory_bytes=80 << 30,
    )
    after = pb.DeviceState(
        load_avg_1m=1.2,
        other_cpu_busy_cores=0.75,
        other_gpu_processes=2,
        sm_clock_mhz=1410,
        throttle_reasons=["hw_thermal_slowdown", "sw_power_cap"],
    )
    row = summary_frame("r1", [result(before, after, ["another process used gpu:0", "host busy"])], []).iloc[0]
    assert row.device_flags == "another process used gpu:0 | host busy"
    assert (row.free_memory_before_bytes, row.total_memory_bytes) == (30 << 30, 80 << 30)
    assert row.other_gpu_processes_max == 2 and row.other_cpu_busy_cores == 0.75
    assert (row.load_avg_1m_before, row.load_avg_1m_after) == (0.2, 1.2)
    assert (row.sm_clock_min_mhz, row.max_sm_clock_mhz) == (1410, 1980)
    assert row.throttle_reasons == "gpu_idle | hw_thermal_slowdown | sw_power_cap"


def test_unread_device_state_is_missing_not_zero():
    row = summary_frame("r1", [result(pb.DeviceState(), pb.DeviceState(), [])], []).iloc[0]
    assert row.device_flags == "" and row.throttle_reasons == ""
    for column in ("free_memory_before_bytes", "other_gpu_processes_max", "other_cpu_busy_cores", "sm_clock_min_mhz"):
        assert row[column] is None or math.isnan(row[column]), column
