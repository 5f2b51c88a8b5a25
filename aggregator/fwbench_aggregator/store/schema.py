"""The store's format: the version of what it writes, and every frame it holds with the columns of each. The
columns of a run's own frames are in store.run_columns, the comparability key in store.comparability_columns, and
the frames the analysis derives in store.analysis_columns.

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
 11  mode generate: a run's summary stores its new tokens (part of the block key; empty in other modes and older runs)
     and its generation figures (run_columns.GENERATION_SUMMARY_COLUMNS), its steps each request's time to first
     token and decode time; older runs read them empty
 12  mode generate under a scenario: a run's summary stores each query's first token latency (from its arrival, the
     wait included) and time per output token as p50/p90/p99 and the tokens served per second
     (run_columns.SERVING_FIELDS), and its queries frame each query's first_token_latency_s; empty in other modes and
     older runs
From 10 on, a run setting first stored in a format says so where it is declared (plan.settings: stored_since), and
the format follows: store.migrations gives older runs its default.
"""

from __future__ import annotations

from ..plan.settings import stored
from .comparability_columns import FLOOR_KEY_COLUMNS
from .run_columns import CONFIG_COLUMNS, POWER_COLUMNS, RUN_IDENTITY_COLUMNS, STEPS_COLUMNS, SUMMARY_COLUMNS

# The last format the store's own changes made (the list above); a run setting stored since a later one raises it.
CHANGES_FORMAT = 12
STORE_FORMAT = max(CHANGES_FORMAT, *(setting.stored_since for setting in stored()))

# --- the store's frames beside a run's own ----------------------------------------------------------------------------

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
# percentile can be recomputed (mode generate: its first token latency too, and its time per output token from it).
QUERIES_FRAME = "queries"
QUERIES_COLUMNS = (*RUN_IDENTITY_COLUMNS, "query_index", "latency_s", "queue_s", "first_token_latency_s")
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
