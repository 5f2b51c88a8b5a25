"""The columns of a run's own frames (steps, summary, power), in one place, and the configuration that identifies a
run: builders write exactly these columns, and a test holds them to it; readers name a column through the groups
here, not through literals of their own."""

from __future__ import annotations

from ..plan.settings import stored

# --- what identifies a run's configuration ----------------------------------------------------------------------

# world_size and nodes belong to a configuration: a run on two devices is never pooled with one on one device, nor
# two devices of one runner with one device on each of two runners. batch_size is per device.
# profile too: runs under one profile are never pooled with runs under another.
# serving: the load of a run under a scenario (base.vocabulary.serving_text: "server 200 qps"), "" for back-to-back
# batches; runs at one load are never pooled with runs at another (stores from before scenarios read "").
CONFIG_COLUMNS = (
    "model",
    "model_options",
    "mode",
    "batch_size",
    "input_shape",
    "precision",
    "device",
    "world_size",
    "nodes",
    "profile",
    "serving",
)
DEFAULT_PROFILE = "equal"
# The profile label of a best profile's search runs (app.best): stored like any run, never pooled with a comparison.
BEST_SEARCH_PROFILE = "best-search"
INTEGER_COLUMNS = ("batch_size", "world_size", "nodes")
# The configuration less its batch size: one line per runner across batch sizes.
SERIES_COLUMNS = tuple(c for c in CONFIG_COLUMNS if c != "batch_size")
# One run: run_id tells apart the runs of one runner and repetition number made by different compares (each stored
# run's run_id is its own key), so that nothing pools or merges runs by repetition number.
RUN_COLUMNS = (*CONFIG_COLUMNS, "runner", "run_id", "repetition")
# A configuration less its world size (and runner count): one scaling line per runner and strategy.
SCALING_KEY_COLUMNS = tuple(c for c in CONFIG_COLUMNS if c not in ("world_size", "nodes"))

# Every row of steps, summary and power starts with these: the run and its configuration as the runner resolved it.
RUN_IDENTITY_COLUMNS = (
    "run_id",
    "runner",
    "framework",
    "framework_version",
    "container_image",
    "model",
    "mode",
    "batch_size",
    "input_shape",
    "precision",
    "device",
    "strategy",
    "devices",
    "nodes",
    "world_size",
    "global_batch_size",
    "model_options",
    "repetition",
    "profile",
    "serving",
)

# --- frames a run stores -------------------------------------------------------------------------------------------

# A generation request's step is the whole request; its prefill and decode steps are timed too (empty elsewhere).
GENERATION_STEP_COLUMNS = ("time_to_first_token_s", "decode_time_s")
STEPS_COLUMNS = (
    *RUN_IDENTITY_COLUMNS,
    "step_index",
    "warmup",
    "start_s",
    "step_time_s",
    "rank_step_time_s",
    *GENERATION_STEP_COLUMNS,
)

# A telemetry sample's readings; unreadable ones are empty, never zero.
POWER_FIELDS = (
    "power_w",
    "energy_j",
    "gpu_util_pct",
    "memory_util_pct",
    "memory_used_bytes",
    "sm_clock_mhz",
    "temperature_c",
)
POWER_COLUMNS = (*RUN_IDENTITY_COLUMNS, "time_s", "phase", "telemetry_device", "power_source", *POWER_FIELDS)

# The run's energy over its measured window, from the runner's EnergySummary.
ENERGY_FIELDS = (
    "energy_j",
    "counter_energy_j",
    "integrated_energy_j",
    "energy_disagreement",
    "mean_power_w",
    "peak_power_w",
    "idle_power_w",
    "energy_above_idle_j",
    "energy_per_sample_j",
    "energy_above_idle_per_sample_j",
    "achieved_rate_hz",
)
ENERGY_COLUMNS = (
    *ENERGY_FIELDS,
    "energy_source",
    "power_samples",
    "energy_status",
    "energy_unavailable",
    "energy_notes",
)
# What the runner fixed for the run: the settings a verdict depends on beyond the configuration.
# tf32: where float32 math may run as TF32 ("" on a device without it, and in runs from before it was recorded).
SETTINGS_COLUMNS = ("layout", "compilation", "cudnn_autotune", "tf32", "intra_op_threads", "inter_op_threads")
# The device and host as the run found them. Beside them, quiet_wait_s: how long the run waited for a quiet host
# (--wait-for-quiet; run.gate), empty where no wait was asked.
DEVICE_STATE_COLUMNS = (
    "flags",
    "device_flags",
    "free_memory_before_bytes",
    "total_memory_bytes",
    "other_gpu_processes_max",
    "other_cpu_busy_cores",
    "load_avg_1m_before",
    "load_avg_1m_after",
    "sm_clock_min_mhz",
    "max_sm_clock_mhz",
    "throttle_reasons",
)
# Which model ran: "built-in", or a plug-in's folder and the hash of its files (which version of the user's model).
MODEL_SOURCE_COLUMNS = ("model_source", "model_hash")
BUILT_IN = "built-in"
# A run under a scenario (the runner's ServingSummary; empty for back-to-back batches): the load as resolved, its
# figures, and serving_unavailable, why a figure is empty ("p99_latency_s: ..."; the percentile evidence rule). Under
# mode generate also, per query, time to first token from its arrival (the wait for its batch included, unlike the
# generation columns' prefill-only median_/p90_time_to_first_token_s) and its decode time per output token, each with
# its percentiles, and the tokens served per second (real prompts only); empty in other modes.
SERVING_PERCENTILES = ("p50", "p90", "p99")
SERVING_PERCENTILE_FIGURES = ("latency", "first_token_latency", "time_per_output_token")
SERVING_FIELDS = (
    "query_count",
    "duration_s",
    "achieved_qps",
    "serving_throughput_samples_per_s",
    *(f"{p}_latency_s" for p in SERVING_PERCENTILES),
    "mean_latency_s",
    "mean_batch_queries",
    *(f"{p}_{figure}_s" for figure in SERVING_PERCENTILE_FIGURES[1:] for p in SERVING_PERCENTILES),
    "generated_tokens_per_s",
)
# A generation run's figures over its measured requests (runner.proto's GenerationSummary; empty in other modes): time
# to first token, per-token decode latency, decode throughput, and the last request's tokens (the first prompt's, and
# a SHA-256 of every prompt's) that show whether runners generated the same text.
GENERATION_SUMMARY_COLUMNS = (
    "median_time_to_first_token_s",
    "p90_time_to_first_token_s",
    "median_token_latency_s",
    "p90_token_latency_s",
    "p99_token_latency_s",
    "decode_tokens_per_s",
    "first_prompt_tokens",
    "tokens_sha256",
)
SERVING_SUMMARY_COLUMNS = ("scenario", "target_qps", "batch_timeout_ms", *SERVING_FIELDS, "serving_unavailable")
RUNNER_COLUMNS = (
    "runner_address",
    "python_version",
    "cuda_version",
    "cudnn_version",
    "runner_version",
    "runner_options",
)
# A runner container's image beyond its tag (container_image): the base image it was built on, and the digests of
# both, which tell two builds of one tag apart ("" outside containers, and where the image does not report them).
IMAGE_COLUMNS = ("container_base_image", "image_digest", "base_image_digest")
# The software beneath the framework, as the runner reports it: the sha256 of the lock its environment was installed
# from (scripts/lock.sh), numpy and its BLAS, oneDNN where the framework says ("" where it does not), and the C
# library's malloc thresholds the runner pinned in its processes ("" before runners pinned them: fwbench_core.allocator).
ENVIRONMENT_COLUMNS = ("environment_lock", "numpy_version", "blas", "onednn_version", "malloc")
# The run settings a summary stores, each as its declaration names its column (plan.settings): the warm-up and
# measured steps asked, the minimum window, the seeds.
RUN_SETTING_COLUMNS = tuple(setting.column for setting in stored())
SUMMARY_COLUMNS = (
    *RUN_IDENTITY_COLUMNS,
    "status",
    "error",
    "device_name",
    "measured_steps",
    *RUN_SETTING_COLUMNS,
    "parameter_count",
    "mean_step_time_s",
    "median_step_time_s",
    "p95_step_time_s",
    "throughput_samples_per_s",
    "straggler_spread",
    "peak_memory_bytes",
    "peak_memory_source",
    "time_to_first_step_s",
    "started_at_unix_s",
    "finished_at_unix_s",
    *SETTINGS_COLUMNS,
    "build_reused",
    "first_step_traced",
    "warmup_steps_run",
    "warmup_stable",
    "timer_disagreement",
    *DEVICE_STATE_COLUMNS,
    "quiet_wait_s",
    *ENERGY_COLUMNS,
    *RUNNER_COLUMNS,
    *IMAGE_COLUMNS,
    *ENVIRONMENT_COLUMNS,
    *MODEL_SOURCE_COLUMNS,
    # The budget of the sequential design the run was made under, 0 for a fixed number of runs, and where it looked.
    "max_repetitions",
    "looks",
    *SERVING_SUMMARY_COLUMNS,
    *GENERATION_SUMMARY_COLUMNS,
    "run_isolation",
    # The design that made the run (plan.design), and for a window of a process block: the block, its place among its
    # runner's windows there, and whether it stepped on the build the window before it left.
    "design",
    "process_block",
    "block_window",
    "build_continued",
    "process_id",
)

# A run that ran out of memory is stored as a summary row of its configuration with these.
FAILURE_COLUMNS = ("status", "error_code", "error")


def looks_text(looks: tuple[int, ...]) -> str:
    """A sequential design's looks as the summary's looks column holds them: "4,8"; "" for after every unit."""
    return ",".join(str(n) for n in looks)


def looks_of(text: str) -> tuple[int, ...]:
    """The looks a summary's looks column names (looks_text); () for "" or a value no fwbench wrote."""
    parts = str(text or "").split(",")
    return tuple(int(p) for p in parts) if all(p.strip().isdigit() for p in parts) else ()
