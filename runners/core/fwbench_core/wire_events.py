"""A run's events on the wire: step timings, progress, power samples, the energy and device state around a run, the
serving figures and the summary, each from the core's own type."""

from __future__ import annotations

from dataclasses import asdict

from fwbench.runner.v1 import runner_pb2 as pb

from .backend import MemoryReading
from .device_state import DeviceState
from .devices import RunnerInfo
from .power import EnergySummary, PowerPhase, PowerSample
from .run_path import Resolved, RunEvent
from .serving import QueryBatch, ServingSummary
from .telemetry import PowerBatch
from .timing import Progress, StepBatch, Summary
from .wire import config_to_wire, enum_to_wire


def serving_summary_to_wire(summary: ServingSummary) -> pb.ServingSummary:
    message = pb.ServingSummary(
        scenario=enum_to_wire(summary.scenario),
        query_count=summary.query_count,
        duration_s=summary.duration_s,
        achieved_qps=summary.achieved_qps,
        throughput_samples_per_s=summary.throughput_samples_per_s,
        mean_latency_s=summary.mean_latency_s,
        mean_batch_queries=summary.mean_batch_queries,
        reasons=summary.reasons,
        target_qps=summary.target_qps,
        generated_tokens_per_s=summary.generated_tokens_per_s,
    )
    percentiles = [
        f"{p}_{figure}_s"
        for figure in ("latency", "first_token_latency", "time_per_output_token")
        for p in ("p50", "p90", "p99")
    ]
    _optional_fields(message, {name: getattr(summary, name) for name in percentiles})
    return message


def _optional_fields(message, values: dict) -> None:
    """Set the fields whose value is known; an unknown one stays unset, never zero."""
    for name, value in values.items():
        if value is not None:
            setattr(message, name, value)


def power_sample_to_wire(sample: PowerSample) -> pb.PowerSample:
    message = pb.PowerSample(
        time_s=sample.time_s,
        phase=PowerPhase(sample.phase).value,
        device=sample.device,
        power_source=sample.power_source or "",
    )
    _optional_fields(
        message,
        {
            name: getattr(sample, name)
            for name in (
                "power_w",
                "energy_j",
                "gpu_util_pct",
                "memory_util_pct",
                "memory_used_bytes",
                "sm_clock_mhz",
                "temperature_c",
            )
        },
    )
    return message


def energy_to_wire(energy: EnergySummary) -> pb.EnergySummary:
    message = pb.EnergySummary(
        device=energy.device or "",
        sample_count=energy.sample_count,
        energy_source=energy.energy_source or "",
        reasons=dict(energy.reasons),
        notes=energy.notes,
        missed_slots=energy.missed_slots,
    )
    _optional_fields(
        message,
        {
            name: getattr(energy, name)
            for name in (
                "window_s",
                "achieved_rate_hz",
                "counter_energy_j",
                "integrated_energy_j",
                "energy_disagreement",
                "energy_j",
                "mean_power_w",
                "peak_power_w",
                "idle_power_w",
                "energy_above_idle_j",
                "energy_per_sample_j",
                "energy_above_idle_per_sample_j",
            )
        },
    )
    return message


def device_state_to_wire(state: DeviceState) -> pb.DeviceState:
    message = pb.DeviceState(
        throttle_reasons=state.throttle_reasons or (), reasons=dict(state.reasons), notes=state.notes
    )
    _optional_fields(
        message,
        {
            name: getattr(state, name)
            for name in (
                "load_avg_1m",
                "other_cpu_busy_cores",
                "other_gpu_processes",
                "gpu_processes",
                "sm_clock_mhz",
                "max_sm_clock_mhz",
                "free_memory_bytes",
                "total_memory_bytes",
            )
        },
    )
    return message


def _memory_to_wire(summary: pb.Summary, reading: MemoryReading) -> None:
    if reading.bytes is not None:
        summary.peak_memory_bytes = reading.bytes
    summary.peak_memory_source = reading.source


def event_to_wire(event: RunEvent, info: RunnerInfo) -> pb.RunEvent:
    if isinstance(event, StepBatch):
        return pb.RunEvent(
            steps=pb.StepTimings(
                steps=[
                    pb.StepTiming(
                        index=s.index,
                        warmup=s.warmup,
                        start_s=s.start_s,
                        step_time_s=s.step_time_s,
                        device_time_s=s.device_time_s,
                        rank_step_time_s=s.rank_step_time_s,
                        time_to_first_token_s=s.time_to_first_token_s,
                        decode_time_s=s.decode_time_s,
                    )
                    for s in event.steps
                ]
            )
        )
    if isinstance(event, QueryBatch):
        return pb.RunEvent(
            queries=pb.QueryLatencies(
                latency_s=event.latency_s,
                queue_s=event.queue_s,
                first_index=event.first_index,
                first_token_latency_s=event.first_token_latency_s,
            )
        )
    if isinstance(event, PowerBatch):
        return pb.RunEvent(power=pb.PowerSamples(samples=[power_sample_to_wire(s) for s in event.samples]))
    if isinstance(event, Progress):
        return pb.RunEvent(
            progress=pb.Progress(
                phase=enum_to_wire(event.phase), steps_done=event.steps_done, steps_total=event.steps_total
            )
        )
    if isinstance(event, Resolved):
        return pb.RunEvent(config=config_to_wire(event.config, info, event.parameter_count))
    if isinstance(event, Summary):
        summary = pb.Summary(
            measured_steps=event.measured_steps,
            mean_step_time_s=event.mean_step_time_s,
            median_step_time_s=event.median_step_time_s,
            p95_step_time_s=event.p95_step_time_s,
            throughput_samples_per_s=event.throughput_samples_per_s,
            time_to_first_step_s=event.time_to_first_step_s,
            started_at_unix_s=event.started_at_unix_s,
            finished_at_unix_s=event.finished_at_unix_s,
            warmup_steps_run=event.warmup_steps_run,
            warmup_stable=event.warmup_stable,
            timer_disagreement=event.timer_disagreement,
            flags=event.flags,
            device_flags=event.device_flags,
            straggler_spread=event.straggler_spread,
            build_reused=event.build_reused,
            first_step_traced=event.first_step_traced,
            build_continued=event.build_continued,
            process_id=event.process_id,
        )
        _memory_to_wire(summary, event.peak_memory)
        if event.energy is not None:
            summary.energy.CopyFrom(energy_to_wire(event.energy))
        if event.device_before is not None:
            summary.device_before.CopyFrom(device_state_to_wire(event.device_before))
        if event.device_after is not None:
            summary.device_after.CopyFrom(device_state_to_wire(event.device_after))
        if event.serving is not None:
            summary.serving.CopyFrom(serving_summary_to_wire(event.serving))
        if event.generation is not None:
            summary.generation.CopyFrom(pb.GenerationSummary(**asdict(event.generation)))
        return pb.RunEvent(summary=summary)
    raise TypeError(f"no wire form for {type(event).__name__}")
