"""What one run asks of a runner, as one value: `compare`, `max-batch` and every point of a sweep
describe their runs as a RunSpec, and only run.wire.to_request writes the contract's RunRequest from it. The settings
a runner fixes when it starts (StartupSettings), the measurement defaults and the accepted ranges live here too."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

from ..base.vocabulary import Compilation, Layout, Mode, Precision, Profile, Scenario, Strategy

# Measurement windows by default, for sweeps and `compare` alike. A run warms up until its step time is
# stable (at most DEFAULT_WARMUP steps) and measures at least DEFAULT_STEPS steps and at least
# DEFAULT_MIN_MEASURE_S: a GPU window of tens of milliseconds is shorter than a power sensor's period and
# dominated by the moment's offset. Tests keep CI fast with explicit small settings, not small defaults.
DEFAULT_WARMUP = 50
DEFAULT_WARMUP_UNTIL_CV = 0.05
STABLE_WINDOW = 5
DEFAULT_STEPS = 20
DEFAULT_MIN_MEASURE_S = 1.0

# The ranges the runners accept (fwbench_core.validation; tests/test_input_limits.py holds them equal): the
# command line and sweep files refuse anything outside them before a runner starts.
MAX_BATCH_SIZE = 65536
MAX_WARMUP = 10_000
MAX_STEPS = 1_000_000
MAX_SEED = 2**32 - 1  # what both frameworks' seeding takes
MAX_THREADS = 1024
MAX_MEASURE_S = 86_400.0
MIN_POWER_RATE_HZ, MAX_POWER_RATE_HZ = 1.0, 100.0  # or 0: telemetry off
MAX_IDLE_BASELINE_S = 60.0
MAX_NODES = 1024  # machines one run spans
MIN_DISTRIBUTED_TIMEOUT_S, MAX_DISTRIBUTED_TIMEOUT_S = 1.0, 3600.0
MAX_TARGET_QPS = 1e6  # a serving load: queries per second (> 0)
MAX_QUERIES = 1_000_000  # measured queries of one run under a scenario
MAX_BATCH_TIMEOUT_MS = 60_000.0
MIN_NEW_TOKENS, MAX_NEW_TOKENS = 2, 4096  # tokens a generation request adds to each prompt
# Runs per runner by default. With six a side and a per-run spread of 3% (a GPU-bound or steady CPU
# configuration), the resolvable difference is about 6%, so a real 10% difference is called.
DEFAULT_REPETITIONS = 6
# The aggregator's own: more than this is a typing mistake, not a study.
MAX_REPETITIONS = 1000
MAX_COOLDOWN_S = 3600.0
MAX_TIME_BUDGET_S = 365 * 86_400.0  # a sweep's or a configuration's wall-clock budget: a year is no typing mistake
# Runs one study plans, counted before the grid expands: a sweep file's max_runs raises the default up to MAX_RUNS
# (planning 100,000 runs takes about 15 s and the study days; a mistyped grid of millions would exhaust memory).
DEFAULT_MAX_RUNS = 10_000
MAX_RUNS = 100_000


# Where a runner executes each run (its --run-isolation; fwbench_core.isolation.RunIsolation, held equal by
# tests/test_frameworks.py): in its own process, in a fresh process per run, fresh for GPU runs only, or a worker
# process for every 2 CPU runs.
RunIsolation = enum.Enum(
    "RunIsolation", [(name, name) for name in ("thread", "process", "process-on-gpu", "process-per-2-runs")], type=str
)


@dataclass(frozen=True)
class StartupSettings:
    """What a runner fixes when it starts; the aggregator starts every embedded runner with the same."""

    intra_op_threads: int = os.cpu_count() or 1
    inter_op_threads: int = os.cpu_count() or 1
    cudnn_autotune: str = "off"
    reference_dir: str = ""  # the parity reference folder they share; empty: each its own private one
    models_dirs: tuple[str, ...] = ()  # folders of model plug-ins every runner loads
    run_isolation: str = ""  # where each run executes (a runner's --run-isolation); "": the runner's own default

    def flags(self) -> list[str]:
        return [
            "--intra-op-threads",
            str(self.intra_op_threads),
            "--inter-op-threads",
            str(self.inter_op_threads),
            "--cudnn-autotune",
            self.cudnn_autotune,
            *(["--reference-dir", self.reference_dir] if self.reference_dir else []),
            *(flag for folder in self.models_dirs for flag in ("--models-dir", folder)),
            *(["--run-isolation", self.run_isolation] if self.run_isolation else []),
        ]


@dataclass(frozen=True)
class RunSpec:
    """One run's settings. None (and the empty tuple) leave the runner's default."""

    model: str
    mode: Mode = Mode.train
    batch_size: int = 32
    shape: str | None = None  # per sample: 3x224x224 or NAME=N
    precision: Precision = Precision.fp32
    device: str | None = None  # cpu, gpu or gpu:N
    layout: Layout | None = None
    compilation: Compilation | None = None
    warmup: int = DEFAULT_WARMUP
    steps: int = DEFAULT_STEPS
    seed: int = 0
    model_options: tuple[tuple[str, str], ...] = ()
    startup: StartupSettings = StartupSettings()
    warmup_until_cv: float | None = DEFAULT_WARMUP_UNTIL_CV  # None or 0: exactly `warmup` steps
    stable_window: int = STABLE_WINDOW
    min_measure_s: float | None = DEFAULT_MIN_MEASURE_S
    power_rate_hz: float | None = None
    idle_baseline_s: float | None = None
    strategy: Strategy | None = None  # None: single on one device, else the runner's data-parallel one
    devices: str | None = None  # several devices of each runner, "cpu:0,cpu:1"; then `device` is None
    profile: Profile | None = None  # how the runner fills what is left unset; None: equal
    cudnn_autotune: str | None = None  # "on" or "off" for this run (a best profile's choice); None: as startup
    distributed_timeout_s: float | None = None
    # Runs under one key share one build on their runner, which restarts it for each (RunRequest.reuse_key);
    # end_reuse marks the chain's last run, after which the runner frees it. "": a fresh build.
    reuse_key: str = ""
    end_reuse: bool = False
    # A window of an interleaved block (app.blocks): continue the build kept under reuse_key as the last window left
    # it, in the worker process of the block named process_block (RunRequest.continue_reuse, process_block).
    continue_reuse: bool = False
    process_block: str = ""
    # Inference under a scenario (RunRequest.serving); None: back-to-back batches. query_count 0 and arrival_seed 0
    # leave the runner's defaults (its query count; the run's seed).
    scenario: Scenario | None = None
    target_qps: float | None = None  # server only
    query_count: int = 0
    batch_timeout_ms: float | None = None  # server with batch_size > 1
    arrival_seed: int = 0
    input_seed: int | None = None  # the input data's seed; None: the seed's
    new_tokens: int | None = None  # mode generate: tokens each prompt gains; None: the runner's default (32)

    @property
    def device_count(self) -> int:
        """Devices of each runner the run uses."""
        return len(self.devices.split(",")) if self.devices else 1


def per_runner(runner: str, values: list[str], choices: type[enum.Enum]) -> enum.Enum | None:
    """The value of a setting given as VALUE (every runner) or RUNNER=VALUE (one), for this runner: RUNNER=VALUE wins
    over a plain VALUE; None leaves its default."""
    chosen = None
    for value in values:
        name, sep, setting = value.partition("=")
        if not sep:
            chosen = chosen or value
        elif name == runner:
            return choices(setting)
    return chosen and choices(chosen)


def option_pairs(options: list[str]) -> tuple[tuple[str, str], ...]:
    """["head=mlm"] -> (("head", "mlm"),), as the command line's --option values give them."""
    return tuple(sorted(tuple(value.split("=", 1)) for value in options))
