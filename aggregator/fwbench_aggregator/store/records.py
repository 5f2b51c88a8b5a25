"""Run results as frames (their columns are schema's), the manifest that makes them auditable, and a comparison's
files on disk."""

from __future__ import annotations

import json
import math
import platform
import sys
from pathlib import Path

import pandas as pd
from google.protobuf.json_format import MessageToDict

from ..base.vocabulary import Scenario, shape_text
from ..plan.design import ROUNDS_LABEL
from ..plan.settings import BY_NAME, stored
from ..run import replies, wire
from ..run.client import RunnerFailure, RunResult
from ..run.replies import UNSPECIFIED
from .results_store import ResultStore
from .run_columns import (
    BUILT_IN,
    DEFAULT_PROFILE,
    ENERGY_FIELDS,
    ENVIRONMENT_COLUMNS,
    GENERATION_SUMMARY_COLUMNS,
    IMAGE_COLUMNS,
    POWER_COLUMNS,
    POWER_FIELDS,
    SERVING_PERCENTILE_FIGURES,
    SERVING_PERCENTILES,
    STEPS_COLUMNS,
    SUMMARY_COLUMNS,
    looks_text,
)
from .schema import QUERIES_COLUMNS, QUERIES_FRAME


def _config_columns(run_id: str, result: RunResult) -> dict:
    c = result.config
    device = c.device
    return {
        "run_id": run_id,
        "runner": result.runner,
        "framework": result.runner_info.framework,
        "framework_version": result.runner_info.framework_version,
        "container_image": result.runner_info.options.get("container_image", ""),
        "model": c.model,
        "mode": c.mode or UNSPECIFIED,
        "batch_size": c.batch_size,
        "input_shape": shape_text(c.input_shape),
        "precision": c.precision or UNSPECIFIED,
        "device": device.text,
        # A distributed run: the strategy, every device of each runner, the runners, the job's replicas.
        "strategy": c.strategy or "single",
        "devices": ",".join(d.text for d in c.devices) or device.text,
        "nodes": c.node_count or 1,
        "world_size": c.world_size or 1,
        "global_batch_size": c.global_batch_size or c.batch_size,
        "model_options": ";".join(f"{k}={v}" for k, v in sorted(c.model_options.items())),
        "repetition": result.repetition,
        "profile": c.profile or DEFAULT_PROFILE,
        "serving": c.serving.text,
    }


def steps_frame(run_id: str, results: list[RunResult]) -> pd.DataFrame:
    """One row per step (warm-up steps included, flagged), for every successful run."""
    rows = [
        {
            **_config_columns(run_id, r),
            "step_index": s.index,
            "warmup": s.warmup,
            "start_s": s.start_s,
            "step_time_s": s.step_time_s,
            "rank_step_time_s": " ".join(f"{t:.9g}" for t in s.rank_step_time_s),
            "time_to_first_token_s": s.time_to_first_token_s,
            "decode_time_s": s.decode_time_s,
        }
        for r in results
        for s in r.steps
    ]
    return pd.DataFrame(rows, columns=STEPS_COLUMNS)


def queries_frame(run_id: str, results: list[RunResult]) -> pd.DataFrame:
    """One row per measured query of every run under a scenario, by its index among the run's queries."""
    rows = [
        {
            **_config_columns(run_id, r),
            "query_index": q.first_index + i,
            "latency_s": latency_s,
            "queue_s": queue_s,
            "first_token_latency_s": q.first_token_latency_s[i] if q.first_token_latency_s else None,
        }
        for r in results
        for q in r.queries
        for i, (latency_s, queue_s) in enumerate(zip(q.latency_s, q.queue_s))
    ]
    return pd.DataFrame(rows, columns=QUERIES_COLUMNS).sort_values(
        ["run_id", "runner", "repetition", "query_index"], kind="stable", ignore_index=True
    )


def _generation_columns(summary: replies.Summary) -> dict:
    """A generation run's figures (run_columns.GENERATION_SUMMARY_COLUMNS); empty in other modes."""
    g = summary.generation
    if g is None:
        return {}
    figures = {column: getattr(g, column) for column in GENERATION_SUMMARY_COLUMNS}
    return {**figures, "first_prompt_tokens": " ".join(map(str, g.first_prompt_tokens))}


def _serving_columns(config: replies.Resolved, summary: replies.Summary) -> dict:
    """A run under a scenario: its load as resolved and the runner's serving figures; a figure the run could not
    support is empty, its reason in serving_unavailable. Empty for back-to-back batches."""
    s = summary.serving
    if s is None:
        return {}
    return {
        "scenario": s.scenario or UNSPECIFIED,
        "target_qps": s.target_qps if s.scenario == Scenario.server else None,
        "batch_timeout_ms": config.serving.batch_timeout_ms,
        "query_count": s.query_count,
        "duration_s": s.duration_s,
        "achieved_qps": s.achieved_qps,
        "serving_throughput_samples_per_s": s.throughput_samples_per_s,
        **{
            f"{p}_{figure}_s": getattr(s, f"{p}_{figure}_s")
            for figure in SERVING_PERCENTILE_FIGURES
            for p in SERVING_PERCENTILES
        },
        "generated_tokens_per_s": s.generated_tokens_per_s or None,
        "mean_latency_s": s.mean_latency_s,
        "mean_batch_queries": s.mean_batch_queries,
        "serving_unavailable": "; ".join(f"{k}: {v}" for k, v in sorted(s.reasons.items())),
    }


def _setting_columns(config: replies.Resolved) -> dict:
    """The run settings as the runner resolved them, each in its column (plan.settings names its field); a setting
    a runner does not report (one older than the setting) reads as the one its default comes from."""
    values: dict[str, object] = {}
    for setting in stored():
        value = config.settings.get(setting.name)
        if value is None and setting.default_from:
            value = values[BY_NAME[setting.default_from].column]
        values[setting.column] = value
    return values


def _design_columns(result: RunResult) -> dict:
    """Which design made the run, and for a window of a process block where it sits; the process that stepped."""
    place = result.block
    return {
        "design": place.design if place else ROUNDS_LABEL,
        "process_block": place.block if place else "",
        "block_window": place.window if place else -1,
        "build_continued": result.summary.build_continued,
        "process_id": result.summary.process_id,
    }


def power_frame(run_id: str, results: list[RunResult]) -> pd.DataFrame:
    """One row per telemetry sample; unreadable fields are empty, never zero."""
    rows = [
        {
            **_config_columns(run_id, r),
            "time_s": p.time_s,
            "phase": p.phase,
            "telemetry_device": p.device,
            "power_source": p.power_source,
            **{name: getattr(p, name) for name in POWER_FIELDS},
        }
        for r in results
        for p in r.power
    ]
    return pd.DataFrame(rows, columns=POWER_COLUMNS)


def _energy_columns(summary: replies.Summary) -> dict:
    e = summary.energy
    if e is None:
        return {"energy_status": "telemetry off"}
    unavailable = "; ".join(f"{k}: {v}" for k, v in sorted(e.reasons.items()) if k in ENERGY_FIELDS)
    return {
        **{name: getattr(e, name) for name in ENERGY_FIELDS},
        "energy_source": e.energy_source,
        "power_samples": e.sample_count,
        "energy_status": "ok" if e.energy_j is not None else f"unavailable: {e.reasons.get('energy_j', unavailable)}",
        "energy_unavailable": unavailable,
        "energy_notes": " | ".join(e.notes),
    }


def _timing_columns(config: replies.Resolved, summary: replies.Summary) -> dict:
    """What the run measured: the steps made and the settings asked, step times, throughput, peak memory, when."""
    c, s = config, summary
    return {
        "device_name": c.device.name,
        "measured_steps": s.measured_steps,
        **_setting_columns(c),
        "parameter_count": c.parameter_count,
        "mean_step_time_s": s.mean_step_time_s,
        "median_step_time_s": s.median_step_time_s,
        "p95_step_time_s": s.p95_step_time_s,
        "throughput_samples_per_s": s.throughput_samples_per_s,
        "straggler_spread": s.straggler_spread,
        "peak_memory_bytes": s.peak_memory_bytes,
        "peak_memory_source": s.peak_memory_source,
        "time_to_first_step_s": s.time_to_first_step_s,
        "started_at_unix_s": s.started_at_unix_s,
        "finished_at_unix_s": s.finished_at_unix_s,
    }


def _execution_columns(config: replies.Resolved, summary: replies.Summary) -> dict:
    """How the run executed: the settings it ran under, what its warm-up did, and the runner's flags on its timing."""
    c, s = config, summary
    return {
        "layout": c.layout,
        "compilation": c.compilation or UNSPECIFIED,
        "cudnn_autotune": c.cudnn_autotune or UNSPECIFIED,
        "tf32": c.tf32,
        "intra_op_threads": c.intra_op_threads,
        "inter_op_threads": c.inter_op_threads,
        # Built once for several batch sizes (a sweep's reuse chain), and whether the first warm-up
        # step traced the step function for this shape (TensorFlow graph/XLA: every batch size).
        "build_reused": s.build_reused,
        "first_step_traced": s.first_step_traced,
        "warmup_steps_run": s.warmup_steps_run,
        "warmup_stable": s.warmup_stable,
        "timer_disagreement": s.timer_disagreement,
        "flags": " | ".join(s.flags),
    }


def _device_state_columns(summary: replies.Summary) -> dict:
    """The device around the run: the runner's flags on it, and of each reading taken before and after the worse."""
    before, after = summary.device_before, summary.device_after
    gpu_processes = (before.other_gpu_processes, after.other_gpu_processes)
    sm_clocks_mhz = (before.sm_clock_mhz, after.sm_clock_mhz)
    return {
        "device_flags": " | ".join(summary.device_flags),
        "free_memory_before_bytes": before.free_memory_bytes,
        "total_memory_bytes": before.total_memory_bytes,
        "other_gpu_processes_max": max((n for n in gpu_processes if n is not None), default=None),
        "other_cpu_busy_cores": after.other_cpu_busy_cores,
        "load_avg_1m_before": before.load_avg_1m,
        "load_avg_1m_after": after.load_avg_1m,
        "sm_clock_min_mhz": min((f for f in sm_clocks_mhz if f is not None), default=None),
        "max_sm_clock_mhz": before.max_sm_clock_mhz,
        "throttle_reasons": " | ".join(sorted({*before.throttle_reasons, *after.throttle_reasons})),
    }


def _runner_columns(result: RunResult) -> dict:
    """The runner that made the run (its address, versions and options) and the model it built."""
    info = result.runner_info
    return {
        "runner_address": result.address,
        "python_version": info.python_version,
        "cuda_version": info.cuda_version,
        "cudnn_version": info.cudnn_version,
        "runner_version": info.runner_version,
        "runner_options": ";".join(f"{k}={v}" for k, v in sorted(info.options.items())),
        "run_isolation": info.options.get("run_isolation", ""),
        # A container's base image and both digests, as its image reports them (docs/versions.md).
        **{column: info.options.get(column, "") for column in (*IMAGE_COLUMNS, *ENVIRONMENT_COLUMNS)},
        "model_source": result.config.model_source or BUILT_IN,
        "model_hash": result.config.model_content_hash,
    }


def summary_frame(
    run_id: str,
    results: list[RunResult],
    failures: list[RunnerFailure],
    max_repetitions: int = 0,
    looks: tuple[int, ...] = (),
) -> pd.DataFrame:
    """One row per runner: its summary and manifest, or the failure that stopped it. max_repetitions: the budget of
    the sequential design the runs were made under (analyse.sequential), 0 for a fixed number of runs; looks: where
    that design looked (units per runner), () after every unit."""
    rows = [
        {
            **_config_columns(run_id, r),
            "status": "ok",
            "error": "",
            **_timing_columns(r.config, r.summary),
            **_execution_columns(r.config, r.summary),
            **_device_state_columns(r.summary),
            **_energy_columns(r.summary),
            **_runner_columns(r),
            "max_repetitions": max_repetitions,
            "looks": looks_text(looks),
            **_serving_columns(r.config, r.summary),
            **_generation_columns(r.summary),
            **_design_columns(r),
        }
        for r in results
    ]
    rows += [
        {"run_id": run_id, "runner": f.runner, "status": "failed", "error": f"{f.code}: {f.message}"} for f in failures
    ]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def write_results(out_dir: Path, frames: dict[str, pd.DataFrame]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in frames.items():
        csv_path, parquet_path = out_dir / f"{name}.csv", out_dir / f"{name}.parquet"
        frame.to_csv(csv_path, index=False)
        frame.to_parquet(parquet_path, index=False)
        written += [csv_path, parquet_path]
    return written


def write_manifest(out_dir: Path, contents: dict) -> Path:
    """manifest.json in out_dir: the comparison's manifest (manifest())."""
    path = out_dir / "manifest.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(contents, indent=2, sort_keys=True))
    return path


def manifest(run_id: str, results: list[RunResult], requests: dict[str, wire.Request]) -> dict:
    """Everything needed to reproduce or audit the comparison: each runner's versions, devices, settings
    and capabilities as it described them, the exact requests, the resolved configurations, the host."""
    runners = {}
    for r in results:
        if r.runner in runners:
            continue
        runners[r.runner] = {
            "address": r.address,
            "describe": r.runner_info.record,
            "request": MessageToDict(requests[r.runner], preserving_proto_field_name=True),
            "resolved": r.config.record,
        }
    return {
        "run_id": run_id,
        "command": sys.argv,
        "aggregator_host": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "node": platform.node(),
        },
        "runners": runners,
    }


def store_result(
    results_store: ResultStore,
    key: str,
    config: dict,
    result: RunResult,
    request: wire.Request,
    context: dict | None = None,
    profile: str = "",
    max_repetitions: int = 0,
    looks: tuple[int, ...] = (),
) -> None:
    """Append one completed run to the store: its steps, summary, power samples and manifest (with `context`, e.g.
    the cluster allocation it ran on). `profile` labels runs whose profile is not the request's (a best profile's
    search runs: never pooled with the comparison they chose the settings for)."""
    frames = {
        "steps": steps_frame(key, [result]),
        "summary": summary_frame(key, [result], [], max_repetitions, looks).assign(
            quiet_wait_s=(context or {}).get("quiet_wait_s", math.nan)
        ),
        "power": power_frame(key, [result]),
    }
    if result.queries:
        frames[QUERIES_FRAME] = queries_frame(key, [result])
    if profile:
        frames = {name: frame.assign(profile=profile) for name, frame in frames.items()}
    results_store.append(key, config, frames, {**manifest(key, [result], {result.runner: request}), **(context or {})})


def store_out_of_memory(
    results_store: ResultStore,
    key: str,
    config: dict,
    failure: RunnerFailure,
    columns: dict,
    context: dict | None = None,
) -> None:
    """Append a run that ran out of memory: a fact about its configuration that a resume would only repeat."""
    results_store.append_failure(key, config, failure.code, failure.message, manifest=context, columns=columns)
