"""The columns of every frame, in one place: those a run stores (steps, summary, power, and the store's other
frames) and those the analysis derives (comparison, scaling, studies). Builders write exactly these columns, and a
test holds them to it; readers name a column through the groups here, not through literals of their own.

STORE_FORMAT is the version of what the store writes, recorded with every run (store.migrations reads older ones):
  1  (no version recorded) runs before distributed runs: no strategy, devices, nodes, world_size or
     global_batch_size columns; OOM and refused requests both stored as failed runs
  2  every run records the store format; the distributed columns are always written
  3  a run's summary says which model ran: model_source ("built-in" or a plug-in's folder) and model_hash; every
     run's frames and the calibrations say its settings profile (equal before profiles)
  4  a calibration says whether its runs were on a quiet device (flagged, "" before) and when it ran
     (calibrated_at_unix_s); a run's summary says how long it waited for a quiet host (quiet_wait_s, empty where no
     wait was asked), and the budget of the sequential design it was made under (max_repetitions, 0 for a fixed
     number of runs)
  5  a run's summary says how many measured steps were asked (measured_steps_asked; measured_steps is how many ran,
     more where a minimum window asked for them): part of the measurement protocol that decides which runs pool;
     a calibration records its runs' comparability key (FLOOR_KEY_COLUMNS; unknown before)
  6  a run's summary says where its runner executed it (run_isolation: thread, process or process-on-gpu, from the
     runner's options; unknown where they did not say): part of the runner key, since a run in a fresh process
     samples an offset a runner's own process keeps for all its runs
  7  a run's summary says which design made it (design: "rounds", or "blocks of N windows" for a window of an
     interleaved process block, plan.design), the process block it ran in and its place there (process_block,
     block_window; "" and -1 outside blocks), the process that ran its steps (process_id, 0 where unknown) and whether
     it continued the build the run before it left (build_continued): the design is part of the measurement protocol
  8  a run's summary says where its sequential design looked (looks: units per runner, "4,8"; "" after every round
     or block from the third, as blocks looked before, or where max_repetitions is 0): a stored verdict is judged by
     the looks it was made under, not by today's rule
  9  a measured run's id is its own, random (plan.keys.new_run_id), no longer a hash of its configuration, so that
     stores merge without loss; a sweep's run records its configuration's key in its manifest (config_key), which a
     resume looks for. Runs of older formats keep their ids: a sweep's run was stored under its configuration's key
 10  a run's summary says which seed made its input data (input_seed, part of the block key): older runs drew their
     inputs from the seed, and read input_seed = seed
"""

from __future__ import annotations

from ..plan.settings import BLOCK, stored

STORE_FORMAT = 10

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

STEPS_COLUMNS = (*RUN_IDENTITY_COLUMNS, "step_index", "warmup", "start_s", "step_time_s", "rank_step_time_s")

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
# figures, and serving_unavailable, why a figure is empty ("p99_latency_s: ..."; the percentile evidence rule).
SERVING_PERCENTILES = ("p50", "p90", "p99")
SERVING_FIELDS = (
    "query_count",
    "duration_s",
    "achieved_qps",
    "serving_throughput_samples_per_s",
    *(f"{p}_latency_s" for p in SERVING_PERCENTILES),
    "mean_latency_s",
    "mean_batch_queries",
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
    "run_isolation",
    # The design that made the run (plan.design), and for a window of a process block: the block, its place among its
    # runner's windows there, and whether it stepped on the build the window before it left.
    "design",
    "process_block",
    "block_window",
    "build_continued",
    "process_id",
)
# --- which runs are alike: the comparability key ----------------------------------------------------------------

# Beyond the configuration, what must be equal for runs to pool into one row and one verdict. Runs that differ in any
# part are never averaged: each group is its own row, labelled by what differs, and judged on its own runs. A run
# that does not record a part (a store from before it was recorded) is "" (unknown) for it, and pools only with runs
# unknown for it too.
#
# The runner's own facts: its framework and version, its image's digest where it ran in a container, the lock its
# environment was installed from (numpy, the BLAS and the rest beneath the framework), the malloc thresholds its
# processes ran under (a torch step faulted in fresh pages every step in some processes without them), every setting a verdict
# depends on, which version of a plug-in model it built, and whether its runs each had a fresh process (a process
# carries an offset of its own: docs/verdict.md). Runs of one runner that differ in any of these make rows of their
# own ("torch (version 2.15.0)"), each judged against the fastest of its block.
RUNNER_KEY_COLUMNS = (
    "framework",
    "framework_version",
    "image_digest",
    "environment_lock",
    "malloc",
    *SETTINGS_COLUMNS,
    "model_hash",
    "run_isolation",
)
# The machine and the measurement protocol, which all the runners of a verdict must share: runners are judged only
# against runners of the same block. The machine is its device model as the runner names it (the CPU model and its
# logical cores, or the GPU): the host's own id is the kernel's boot id, which a reboot changes, and a container's
# hostname is random, so neither can say "the same machine" across time; two hosts with one device model do pool,
# as a cluster's alike nodes are meant to. The protocol: the run settings its declarations put in the block's key (the
# warm-up and measured steps asked, the minimum window, the seeds of the weights and of the inputs), and the design
# that made the runs (whole runs in rounds, or windows in process blocks: a window is not a run, and their spreads
# differ).
BLOCK_KEY_COLUMNS = ("device_name", *(setting.column for setting in stored(BLOCK)), "design")
COMPARABILITY_COLUMNS = (*RUNNER_KEY_COLUMNS, *BLOCK_KEY_COLUMNS)
# A noise floor is a fact about runs of one key: a calibration records its runs' key (beside its configuration and
# framework), and a verdict applies only the floors calibrated on runs of its own key.
FLOOR_KEY_COLUMNS = tuple(c for c in COMPARABILITY_COLUMNS if c != "framework")

# A run that ran out of memory is stored as a summary row of its configuration with these.
FAILURE_COLUMNS = ("status", "error_code", "error")

# --- the store's other frames --------------------------------------------------------------------------------------

# fwbench calibrate: one noise floor per configuration and framework; flagged: why its runs were not on a quiet
# device ("" when they were), which decides whether a comparison applies it (analyse.floors).
CALIBRATION_COLUMNS = (
    *CONFIG_COLUMNS,
    "framework",
    "runs",
    "aa_ratio",
    "aa_ci_low",
    "aa_ci_high",
    "noise_floor",
    "flagged",
    "calibrated_at_unix_s",
    *FLOOR_KEY_COLUMNS,
)
# fwbench max-batch: one search per runner and configuration.
MAX_BATCH_KEY_COLUMNS = ("model", "model_options", "mode", "input_shape", "precision", "device", "runner")
MAX_BATCH_COLUMNS = (
    *MAX_BATCH_KEY_COLUMNS,
    "framework",
    "framework_version",
    "largest_batch",
    "limit",
    "capped",
    "batches_tried",
    "searched_at_unix_s",
)
# A run under a scenario: one row per measured query, in arrival order (the runner's QueryLatencies), so that any
# percentile can be recomputed.
QUERIES_FRAME = "queries"
QUERIES_COLUMNS = (*RUN_IDENTITY_COLUMNS, "query_index", "latency_s", "queue_s")
# fwbench serve-capacity: one search per runner and configuration; its probes are stored as runs.
SERVE_CAPACITY_FRAME = "serve_capacity"
SERVE_CAPACITY_COLUMNS = (
    *MAX_BATCH_KEY_COLUMNS,
    "batch_size",
    "framework",
    "framework_version",
    "percentile",
    "latency_budget_ms",
    "capacity_qps",
    "resolution",
    "capacity_note",
    "probes",
    "searched_at_unix_s",
)
# Each model's FLOPs as the runner that ran it counts them, once per identity.
MODEL_FACTS_FRAME = "model_facts"
MODEL_FACT_IDENTITY = ("runner", "framework", "framework_version", "model", "model_options", "input_shape")
MODEL_FACTS_COLUMNS = (*MODEL_FACT_IDENTITY, "forward_flops", "parameter_count", "flops_method")

# fwbench parity: one row per model variant and pair of runners, with the plug-in's hash it checked.
PARITY_FRAME = "parity"
PARITY_COLUMNS = (
    "model",
    "variant",
    "model_hash",
    "reference_runner",
    "runner",
    "verdict",
    "numeric",
    "checked_at_unix_s",
)

# Every frame a store holds, by the name of its Parquet file.
STORED_FRAMES = {
    "steps": STEPS_COLUMNS,
    "summary": SUMMARY_COLUMNS,
    "power": POWER_COLUMNS,
    "calibration": CALIBRATION_COLUMNS,
    "max_batch": MAX_BATCH_COLUMNS,
    MODEL_FACTS_FRAME: MODEL_FACTS_COLUMNS,
    PARITY_FRAME: PARITY_COLUMNS,
    QUERIES_FRAME: QUERIES_COLUMNS,
    SERVE_CAPACITY_FRAME: SERVE_CAPACITY_COLUMNS,
}

# --- frames the analysis derives ----------------------------------------------------------------------------------

# One row per configuration and runner (analyse.comparison).
# group: what sets the row's block apart where a configuration's runs fall in several blocks (BLOCK_KEY_COLUMNS,
# "" where they are one); variant: what sets the row apart from its runner's other rows in the block. design: which
# design made the row's runs (plan.design); blocks: the process blocks its windows ran in, 0 for runs in rounds, where
# each run is a unit of evidence (runs counts windows then, and run_spread is the spread of the blocks' values).
COMPARISON_COLUMNS = (
    *CONFIG_COLUMNS,
    "runner",
    "group",
    "variant",
    "runner_name",
    "strategy",
    "global_batch_size",
    "straggler_spread",
    "framework",
    "framework_version",
    "container_image",
    "device_name",
    *SETTINGS_COLUMNS,
    "status",
    "runs",
    "failed_runs",
    "steps",
    "median_step_ms",
    "p5_step_ms",
    "p95_step_ms",
    "run_spread",
    "ms_per_sample",
    "throughput_samples_per_s",
    "energy_per_sample_j",
    "mean_power_w",
    "energy_runs",
    "energy_status",
    "ratio_to_fastest",
    "ratio_ci_low",
    "ratio_ci_high",
    "p_value",
    "resolvable",
    "noise_floor",
    "noise_floor_source",
    "noise_floor_flagged",
    "verdict",
    "significant",
    "outcome",
    "max_repetitions",
    "looks",
    "wall_s",
    "flagged",
    "error",
    *MODEL_SOURCE_COLUMNS,
    "parity",
    "design",
    "blocks",
)
SCALING_COLUMNS = (
    *SCALING_KEY_COLUMNS,
    "runner",
    "runner_name",
    "strategy",
    "world_size",
    "nodes",
    "runs",
    "throughput_samples_per_s",
    "baseline_throughput_samples_per_s",
    "scaling_efficiency",
    "straggler_spread",
    "efficiency_note",
)
STRATEGY_PAIR_COLUMNS = (*CONFIG_COLUMNS, "runner_a", "throughput_a", "runner_b", "throughput_b", "ratio_b_to_a")
SERIES_KEY = (*SERIES_COLUMNS, "runner")
OPTIMAL_COLUMNS = (
    *SERIES_KEY,
    "batches",
    "runs_per_batch",
    "best_batch",
    "best_throughput_samples_per_s",
    "best_throughput_low",
    "best_throughput_high",
    "within_noise",
    "optimal_status",
    "out_of_memory_batches",
    "largest_fitting_batch",
    "fit_note",
    "latency_budget_ms",
    "budget_batch",
    "budget_step_ms",
    "budget_note",
)
TREND_COLUMNS = (
    *SERIES_KEY,
    "batches",
    "runs",
    "spearman_rho",
    "spearman_p",
    "ratio_per_doubling",
    "slope_p",
    "trend",
    "flattens_at_batch",
    "flatten_note",
)
EFFICIENCY_COLUMNS = (
    *CONFIG_COLUMNS,
    "runner",
    "runs",
    "forward_flops",
    "flops_per_step",
    "achieved_flops_per_s",
    "device_name",
    "peak_flops_per_s",
    "peak_entry",
    "mfu",
    "efficiency_note",
)
# One row per configuration under a scenario, runner and figure (p50, p90, p99, or throughput offline): the
# geometric mean over runs of each run's figure, and the verdict against the best runner (analyse.serving).
SERVING_COMPARISON_COLUMNS = (
    *CONFIG_COLUMNS,
    "runner",
    "scenario",
    "target_qps",
    "figure",
    "runs",
    "queries",
    "achieved_qps",
    "latency_ms",
    "throughput_samples_per_s",
    "ratio_to_best",
    "ratio_ci_low",
    "ratio_ci_high",
    "p_value",
    "verdict",
    "significant",
    "latency_budget_ms",
    "budget_status",
)
# The report's table of runners: what ran where.
VERSION_COLUMNS = (
    "runner",
    "framework",
    "framework_version",
    "runner_version",
    "python_version",
    "cuda_version",
    "cudnn_version",
    "device",
    "device_name",
    "compilation",
    "runner_options",
)
# Versions side by side (analyse.versions): a configuration's step time per framework version, and each version
# against the one before it.
VERSION_POINT_COLUMNS = (
    *CONFIG_COLUMNS,
    "framework",
    "framework_version",
    "runners",
    "runs",
    "median_step_ms",
    "low_step_ms",
    "high_step_ms",
    "container_image",
    *IMAGE_COLUMNS,
)
VERSION_CHANGE_COLUMNS = (
    *CONFIG_COLUMNS,
    "framework",
    "version_from",
    "version_to",
    "runners_from",
    "runners_to",
    "runs_from",
    "runs_to",
    "ratio",
    "ci_low",
    "ci_high",
    "p_value",
    "noise_floor",
    "noise_floor_source",
    "change",
    "verdict",
    "text",
    "environment",
    "confirmation",
    "confirmation_ratio",
    "confirmation_ci_low",
    "confirmation_ci_high",
    "confirmation_text",
)


def looks_text(looks: tuple[int, ...]) -> str:
    """A sequential design's looks as the summary's looks column holds them: "4,8"; "" for after every unit."""
    return ",".join(str(n) for n in looks)


def looks_of(text: str) -> tuple[int, ...]:
    """The looks a summary's looks column names (looks_text); () for "" or a value no fwbench wrote."""
    parts = str(text or "").split(",")
    return tuple(int(p) for p in parts) if all(p.strip().isdigit() for p in parts) else ()
