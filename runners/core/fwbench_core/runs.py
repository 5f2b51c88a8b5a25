"""A run as asked for (RunRequest) and as resolved (RunConfig), with the parts they share: the warm-up rule, the
serving load, the job it spans and a worker's place in it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .choices import Compilation, Layout, Mode, Precision, Profile, Scenario, Strategy, Switch, Tf32
from .devices import Device, DeviceRef
from .models import Head, ModelSpec


@dataclass(frozen=True)
class Cluster:
    """A runner's part in a job that spans several runners (machines)."""

    node_rank: int
    node_count: int
    endpoints: tuple[str, ...]  # HOST:PORT per runner in node_rank order: the frameworks' rendezvous addresses


@dataclass(frozen=True)
class WorkerPlace:
    """One worker process's part in a distributed run, set by the core in each worker it starts."""

    local_rank: int  # among this runner's worker processes
    rank: int  # among every worker process of the job
    world_size: int  # worker processes in the job: what a collective counts
    # HOST:PORT of the job's rendezvous: PyTorch's c10d TCP store, hosted by rank 0.
    rendezvous: str
    # HOST:PORT of every runner's worker in node order (TensorFlow's TF_CONFIG cluster); empty on one runner.
    workers: tuple[str, ...] = ()


@dataclass(frozen=True)
class WarmupUntilStable:
    cv_threshold: float
    window: int = 5


@dataclass(frozen=True)
class Serving:
    """The load of an inference run under a scenario. As requested, 0 means the default; as resolved (RunConfig),
    query_count and arrival_seed are filled in."""

    scenario: Scenario | None  # None only as requested: a serving message that names no scenario
    target_qps: float = 0.0  # server: the mean arrival rate
    query_count: int = 0
    batch_timeout_ms: float = 0.0  # server with batch_size > 1: the longest the oldest query waits for a batch
    arrival_seed: int = 0
    # single_stream with the default count: query_count is a minimum, and the queries last at least this long too
    # (how long a query takes is only known by running it). Resolved only; never on the wire.
    min_duration_s: float = 0.0


@dataclass(frozen=True)
class RunRequest:
    """A run as asked for; None means 'the runner's default'."""

    model: str
    mode: Mode | None
    batch_size: int
    input_shape: tuple[int, ...] = ()
    precision: Precision | None = None
    device: DeviceRef | None = None
    warmup_steps: int | None = None
    measured_steps: int | None = None
    seed: int = 0
    model_options: dict[str, str] = field(default_factory=dict)
    layout: Layout | None = None
    compilation: Compilation | None = None
    cudnn_autotune: Switch | None = None
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    warmup_until_stable: WarmupUntilStable | None = None
    min_measure_s: float | None = None
    power_sample_rate_hz: float | None = None
    idle_baseline_s: float | None = None
    strategy: Strategy | None = None
    devices: tuple[DeviceRef, ...] = ()  # several devices of this runner; then `device` is None
    cluster: Cluster | None = None
    distributed_timeout_s: float | None = None
    reuse_key: str = ""  # keep the workload for a next run with this key; "": build afresh, keep nothing
    end_reuse: bool = False  # the last run under reuse_key: free the workload afterwards
    profile: Profile | None = None
    serving: Serving | None = None  # None: back-to-back steps
    continue_reuse: bool = False  # a window: step the kept workload as the last run left it
    process_block: str = ""  # runs naming one block run in one worker process of their own; "": as isolation says
    input_seed: int | None = None  # the input data's seed; None: the seed
    new_tokens: int | None = None  # Mode.GENERATE: tokens each prompt gains; None: the default
    fresh_warmup_steps: int | None = None  # continue_reuse finding nothing: warm up this many; None: the default rule


@dataclass(frozen=True)
class RunConfig:
    """A run with every default resolved and every value validated."""

    model: ModelSpec
    mode: Mode
    batch_size: int
    input_shape: tuple[int, ...]
    precision: Precision
    device: Device
    warmup_steps: int
    measured_steps: int
    seed: int
    model_options: dict[str, str] = field(default_factory=dict)
    layout: Layout | None = None  # None for models without an image layout
    compilation: Compilation = Compilation.EAGER
    cudnn_autotune: Switch = Switch.OFF
    intra_op_threads: int = 1
    inter_op_threads: int = 1
    warmup_until_stable: WarmupUntilStable | None = None
    min_measure_s: float = 0.0
    power_sample_rate_hz: float = 0.0  # 0: telemetry off
    idle_baseline_s: float = 0.0
    strategy: Strategy = Strategy.SINGLE
    devices: tuple[Device, ...] = ()  # every device of this runner in the run; () means (device,)
    cluster: Cluster | None = None
    distributed_timeout_s: float = 0.0
    place: WorkerPlace | None = None  # set in each worker process of a distributed run
    reuse_key: str = ""
    end_reuse: bool = False
    profile: Profile = Profile.EQUAL
    tf32: Tf32 | None = None  # None: the device has no TF32
    serving: Serving | None = None  # None: back-to-back steps
    continue_reuse: bool = False
    process_block: str = ""
    input_seed: int | None = None  # None: the seed
    new_tokens: int | None = None  # Mode.GENERATE: tokens each prompt gains (2 or more); None in other modes
    fresh_warmup_steps: int | None = None  # a window that continues nothing warms up this many; None: the default rule

    @property
    def data_seed(self) -> int:
        """The seed of the run's inputs and targets: its input seed, or its seed where none was given."""
        return self.seed if self.input_seed is None else self.input_seed

    @property
    def head(self) -> Head:
        return self.model.head(self.model_options)

    @property
    def progress_total(self) -> int:
        """What a run's progress counts to: warm-up steps, then measured steps or, under a scenario, queries."""
        return self.warmup_steps + (self.serving.query_count if self.serving else self.measured_steps)

    def reuses(self, kept: RunConfig) -> bool:
        """Whether this run may step the workload kept from run `kept`: the same non-empty reuse key, and the
        same configuration but for the batch size and the measurement settings."""
        if not self.reuse_key or self.reuse_key != kept.reuse_key:
            return False
        kept_measured_as_this = replace(
            kept,
            batch_size=self.batch_size,
            warmup_steps=self.warmup_steps,
            measured_steps=self.measured_steps,
            warmup_until_stable=self.warmup_until_stable,
            min_measure_s=self.min_measure_s,
            power_sample_rate_hz=self.power_sample_rate_hz,
            idle_baseline_s=self.idle_baseline_s,
            end_reuse=self.end_reuse,
            serving=self.serving,
            continue_reuse=self.continue_reuse,
            fresh_warmup_steps=self.fresh_warmup_steps,
        )
        return kept_measured_as_this == self

    def continues(self, kept: RunConfig) -> bool:
        """Whether this run steps the kept workload as run `kept` left it: a window of one measurement."""
        return self.continue_reuse and self.batch_size == kept.batch_size and self.reuses(kept)

    @property
    def run_devices(self) -> tuple[Device, ...]:
        return self.devices or (self.device,)

    @property
    def node_count(self) -> int:
        return self.cluster.node_count if self.cluster else 1

    @property
    def world_size(self) -> int:
        """Replicas in the whole job: devices per runner times runners."""
        return len(self.run_devices) * self.node_count

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    @property
    def distributed(self) -> bool:
        return self.strategy is not Strategy.SINGLE

    @property
    def process_devices(self) -> tuple[Device, ...]:
        """The devices one worker process drives: its own under DDP, else all of this runner's."""
        if self.strategy is Strategy.DDP and self.place is not None:
            return (self.run_devices[self.place.local_rank],)
        return self.run_devices

    @property
    def samples_per_step(self) -> int:
        """Samples one worker process steps: the per-device batch on each device it drives."""
        return self.batch_size * len(self.process_devices)
