"""What the aggregator reads of a runner's replies, as plain frozen values: run.wire reads each from its message at
the edge, so no module above sees the contract's generated classes. Only the fields the aggregator reads are here;
an enum is its text in base.vocabulary's words ("" where the reply leaves it at the runner's default), and a field
the reply may leave unset is None where it does."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# How results write an enum a reply left at zero (base.vocabulary.to_text's word for it): no runner leaves a run's
# mode, precision, device or compilation unset, so in a result it marks a broken reply.
UNSPECIFIED = "unspecified"


@dataclass(frozen=True)
class Device:
    kind: str  # a DeviceKind: "cpu", "gpu"
    index: int
    name: str = ""
    memory_bytes: int = 0  # 0 where unknown
    driver_version: str = ""

    @property
    def text(self) -> str:
        """As results name a device: "gpu:1"."""
        return f"{self.kind or UNSPECIFIED}:{self.index}"


@dataclass(frozen=True)
class Plugin:
    """A folder of model plug-ins a runner was pointed at; `error` says why it is not served."""

    folder: str
    origin: str = ""
    models: tuple[str, ...] = ()
    content_hash: str = ""
    error: str = ""


@dataclass(frozen=True)
class RunnerDescription:
    """A runner as it describes itself (Describe)."""

    framework: str = ""
    framework_version: str = ""
    python_version: str = ""
    cuda_version: str = ""
    cudnn_version: str = ""
    runner_version: str = ""
    protocol: str = ""
    devices: tuple[Device, ...] = ()
    precisions: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict)
    plugins: tuple[Plugin, ...] = ()
    record: Mapping[str, object] = field(default_factory=dict)  # the whole reply, as the manifest keeps it


@dataclass(frozen=True)
class Load:
    """A run's load as resolved: "" scenario for back-to-back batches."""

    scenario: str = ""
    target_qps: float = 0.0
    batch_timeout_ms: float = 0.0

    @property
    def text(self) -> str:
        """As results name it: "", "single_stream", "offline", "server 200 qps" or "server 200 qps, batch timeout
        5 ms"."""
        if self.scenario != "server":
            return self.scenario
        timeout = f", batch timeout {self.batch_timeout_ms:g} ms" if self.batch_timeout_ms else ""
        return f"server {self.target_qps:g} qps{timeout}"


@dataclass(frozen=True)
class Resolved:
    """The run a runner runs (or would run) for a request, every default resolved (ResolvedConfig)."""

    model: str = ""
    mode: str = ""
    batch_size: int = 0
    input_shape: tuple[int, ...] = ()
    precision: str = ""
    device: Device = Device("", 0)
    devices: tuple[Device, ...] = ()  # every device of this runner in the run
    strategy: str = ""
    node_count: int | None = None  # None: a runner on its own
    world_size: int = 0
    global_batch_size: int = 0
    model_options: Mapping[str, str] = field(default_factory=dict)
    profile: str = ""
    serving: Load = Load()
    layout: str = ""
    compilation: str = ""
    cudnn_autotune: str = ""
    tf32: str = ""
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    warmup_steps: int = 0
    measured_steps: int = 0
    min_measure_s: float = 0.0
    seed: int = 0
    parameter_count: int = 0
    model_source: str = ""
    model_content_hash: str = ""
    # Every run setting plan.settings sends (its RunRequest field), as resolved, by the setting's name; None: a runner
    # older than the setting.
    settings: Mapping[str, object] = field(default_factory=dict)
    record: Mapping[str, object] = field(default_factory=dict)  # the whole reply, as the manifest keeps it


@dataclass(frozen=True)
class StepTiming:
    index: int
    warmup: bool
    start_s: float
    step_time_s: float
    device_time_s: float | None = None
    rank_step_time_s: tuple[float, ...] = ()  # a job's every rank, in rank order; () for one rank
    time_to_first_token_s: float | None = None  # a generation request's prefill; None outside mode generate
    decode_time_s: float | None = None  # and its decode steps


@dataclass(frozen=True)
class PowerSample:
    time_s: float
    phase: str
    device: str
    power_source: str = ""
    power_w: float | None = None
    energy_j: float | None = None
    gpu_util_pct: float | None = None
    memory_util_pct: float | None = None
    memory_used_bytes: int | None = None
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None


@dataclass(frozen=True)
class QueryLatencies:
    latency_s: tuple[float, ...]
    queue_s: tuple[float, ...]
    first_index: int = 0
    first_token_latency_s: tuple[float, ...] = ()  # mode generate: arrival to first token; empty otherwise


@dataclass(frozen=True)
class DeviceState:
    """The device and host at one moment; a figure that could not be read is None."""

    load_avg_1m: float | None = None
    other_cpu_busy_cores: float | None = None
    other_gpu_processes: int | None = None
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    free_memory_bytes: int | None = None
    total_memory_bytes: int | None = None


@dataclass(frozen=True)
class Energy:
    """The run's energy over its measured window; a figure it could not support is None, its reason in `reasons`."""

    energy_source: str = ""
    sample_count: int = 0
    window_s: float | None = None
    achieved_rate_hz: float | None = None
    counter_energy_j: float | None = None
    integrated_energy_j: float | None = None
    energy_disagreement: float | None = None
    energy_j: float | None = None
    mean_power_w: float | None = None
    peak_power_w: float | None = None
    idle_power_w: float | None = None
    energy_above_idle_j: float | None = None
    energy_per_sample_j: float | None = None
    energy_above_idle_per_sample_j: float | None = None
    reasons: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Serving:
    """A run under a scenario, as the runner measured it; a figure it could not support is None."""

    scenario: str
    target_qps: float = 0.0
    query_count: int = 0
    duration_s: float = 0.0
    achieved_qps: float = 0.0
    throughput_samples_per_s: float = 0.0
    p50_latency_s: float | None = None
    p90_latency_s: float | None = None
    p99_latency_s: float | None = None
    mean_latency_s: float = 0.0
    mean_batch_queries: float = 0.0
    reasons: Mapping[str, str] = field(default_factory=dict)
    # Mode generate: per query, from arrival to first token (the wait included) and its decode time per token.
    p50_first_token_latency_s: float | None = None
    p90_first_token_latency_s: float | None = None
    p99_first_token_latency_s: float | None = None
    p50_time_per_output_token_s: float | None = None
    p90_time_per_output_token_s: float | None = None
    p99_time_per_output_token_s: float | None = None
    generated_tokens_per_s: float = 0.0


@dataclass(frozen=True)
class Generation:
    """A generation run's figures over its measured requests (runner.proto's GenerationSummary)."""

    new_tokens: int = 0
    prompt_tokens: int = 0
    median_time_to_first_token_s: float = 0.0
    p90_time_to_first_token_s: float = 0.0
    median_token_latency_s: float = 0.0
    p90_token_latency_s: float = 0.0
    p99_token_latency_s: float = 0.0
    decode_tokens_per_s: float = 0.0
    median_request_latency_s: float = 0.0
    first_prompt_tokens: tuple[int, ...] = ()
    tokens_sha256: str = ""


@dataclass(frozen=True)
class Summary:
    """What a run measured, the last thing it streams."""

    measured_steps: int = 0
    mean_step_time_s: float = 0.0
    median_step_time_s: float = 0.0
    p95_step_time_s: float = 0.0
    throughput_samples_per_s: float = 0.0
    peak_memory_bytes: int | None = None
    peak_memory_source: str = ""
    time_to_first_step_s: float = 0.0
    started_at_unix_s: float = 0.0
    finished_at_unix_s: float = 0.0
    warmup_steps_run: int = 0
    warmup_stable: bool = False
    timer_disagreement: float | None = None
    flags: tuple[str, ...] = ()
    energy: Energy | None = None  # None: telemetry was off
    device_before: DeviceState = DeviceState()
    device_after: DeviceState = DeviceState()
    device_flags: tuple[str, ...] = ()
    straggler_spread: float | None = None  # None with one rank
    build_reused: bool = False
    first_step_traced: bool = False
    serving: Serving | None = None  # None: back-to-back batches
    build_continued: bool = False
    process_id: int = 0
    generation: Generation | None = None  # None outside mode generate


@dataclass(frozen=True)
class Progress:
    phase: str
    steps_done: int
    steps_total: int
