"""How a command's runs are set up, powered, loaded and repeated: option groups (cli.groups) beside the model and
measurement groups. compare takes them all, calibrate the profile group, serve-capacity the start-up group."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..app.rounds import Repetitions
from ..base.vocabulary import Mode, Scenario, Switch
from ..plan.design import DEFAULT_BLOCK_WINDOWS, DEFAULT_WINDOW_S, BlockDesign, Design, DesignChoice
from ..plan.serving_fields import Load, load_problem
from ..plan.spec import RunSpec, StartupSettings
from .common import usage_error
from .repetition_option_types import (
    AUTO,
    AutoRepetitionsOption,
    BlockWindowsOption,
    DesignOption,
    MaxRepetitionsOption,
    TimeBudgetOption,
    WindowOption,
)
from .run_option_types import (
    CPU_COUNT,
    CompilationOption,
    CudnnAutotuneOption,
    DevicesOption,
    IdleBaselineOption,
    LayoutOption,
    PowerRateOption,
    ProfileOption,
    StrategyOption,
    ThreadsOption,
)
from .serving_option_types import (
    BatchTimeoutOption,
    LatencyBudgetOption,
    QueriesOption,
    ScenarioOption,
    TargetQpsOption,
)

# The load fields as the command line names them, for the load rules' messages.
OPTION_NAMES = {
    "scenario": "--scenario",
    "target_qps": "--target-qps",
    "queries": "--queries",
    "batch_timeout_ms": "--batch-timeout-ms",
}


def checked_load(
    mode: Mode,
    scenario: Scenario | None,
    target_qps: float | None,
    queries: int | None,
    batch_timeout_ms: float | None,
    latency_budget_ms: float | None = None,
) -> Load | None:
    """The load the options ask for, or None for back-to-back batches; a usage error (exit 2) naming the option
    where they cannot run."""
    if scenario is None:
        given = [
            name
            for name, value in (
                ("--target-qps", target_qps),
                ("--queries", queries),
                ("--batch-timeout-ms", batch_timeout_ms),
                ("--latency-budget-ms", latency_budget_ms),
            )
            if value is not None
        ]
        if given:
            raise usage_error(
                f"{given[0]} applies to a serving scenario: add --scenario (single_stream, server or "
                "offline) with --mode infer"
            )
        return None
    load = Load(scenario, target_qps, queries or 0, batch_timeout_ms)
    problem = load_problem(mode, load, OPTION_NAMES)
    if problem:
        raise usage_error(problem)
    return load


@dataclass(frozen=True)
class Startup:
    """What every runner fixes when it starts: --intra-op-threads, --inter-op-threads and --cudnn-autotune."""

    cudnn_autotune: CudnnAutotuneOption = "off"
    intra_op_threads: ThreadsOption = CPU_COUNT
    inter_op_threads: ThreadsOption = CPU_COUNT

    def settings(self) -> StartupSettings:
        return StartupSettings(self.intra_op_threads, self.inter_op_threads, Switch(self.cudnn_autotune).value)


@dataclass(frozen=True)
class Profile:
    """How the settings left unset are chosen: --profile, and --layout for image models."""

    profile: ProfileOption = "equal"
    layout: LayoutOption = None

    def settings(self) -> dict[str, Any]:
        return {"profile": self.profile, "layout": self.layout}


@dataclass(frozen=True)
class Execution:
    """How each runner executes the model: --compilation, --strategy (both per runner) and --devices."""

    compilation: CompilationOption = field(default_factory=list)
    strategy: StrategyOption = field(default_factory=list)
    devices: DevicesOption = None

    def settings(self) -> dict[str, Any]:
        """The RunSpec fields this group sets; compilation and strategy are the request's, per runner."""
        return {"devices": self.devices}


@dataclass(frozen=True)
class Power:
    """Power telemetry: --power-rate-hz and --idle-baseline-s."""

    power_rate_hz: PowerRateOption = 20.0
    idle_baseline_s: IdleBaselineOption = 1.0

    def settings(self) -> dict[str, Any]:
        return {"power_rate_hz": self.power_rate_hz, "idle_baseline_s": self.idle_baseline_s}


@dataclass(frozen=True)
class ServingLoad:
    """A serving scenario's load: --scenario, --target-qps, --queries, --batch-timeout-ms and --latency-budget-ms."""

    scenario: ScenarioOption = None
    target_qps: TargetQpsOption = None
    queries: QueriesOption = None
    batch_timeout_ms: BatchTimeoutOption = None
    latency_budget_ms: LatencyBudgetOption = None

    def load(self, mode: Mode) -> Load | None:
        """The load asked for, or None for back-to-back batches; a usage error naming the option that cannot run."""
        return checked_load(
            mode, self.scenario, self.target_qps, self.queries, self.batch_timeout_ms, self.latency_budget_ms
        )

    def settings(self, mode: Mode) -> dict[str, Any]:
        """The RunSpec fields the load sets (none for back-to-back batches)."""
        load = self.load(mode)
        if load is None:
            return {}
        return {
            "scenario": load.scenario,
            "target_qps": load.target_qps,
            "query_count": load.query_count,
            "batch_timeout_ms": load.batch_timeout_ms,
        }


@dataclass(frozen=True)
class Rounds:
    """How many runs a verdict gets: --repetitions (auto or N), --max-repetitions and --time-budget-s."""

    repetitions: AutoRepetitionsOption = AUTO
    max_repetitions: MaxRepetitionsOption = None
    time_budget_s: TimeBudgetOption = None

    def repetitions_plan(self) -> Repetitions:
        fixed = None if self.repetitions == AUTO else int(self.repetitions)
        return Repetitions(fixed, self.max_repetitions, self.time_budget_s)


@dataclass(frozen=True)
class Evidence:
    """How the evidence is made: --design (auto, rounds of whole runs, or interleaved process blocks), --block-windows
    and --window-s."""

    design: DesignOption = Design.auto.value
    block_windows: BlockWindowsOption = DEFAULT_BLOCK_WINDOWS
    window_s: WindowOption = DEFAULT_WINDOW_S

    def choice(
        self, spec: RunSpec, cooldown_s: float = 0.0, runners: tuple[str, ...] = (), whole_runs: str = ""
    ) -> DesignChoice:
        """The design asked for. Auto is blocks where the runs can be windows and rounds where they cannot (a GPU is
        known once the runners resolve their devices: DesignChoice.on_devices); `whole_runs` says why another option
        needs whole runs. A usage error (exit 2) where blocks are asked for and cannot measure, or a block option is
        given without blocks."""
        problem = whole_runs or blocks_problem(spec, cooldown_s, runners)
        given = [
            name
            for name, value, default in (
                ("--block-windows", self.block_windows, DEFAULT_BLOCK_WINDOWS),
                ("--window-s", self.window_s, DEFAULT_WINDOW_S),
            )
            if value != default
        ]
        if self.design == Design.rounds.value:
            if given:
                raise usage_error(f"{given[0]} applies to --design blocks")
            return DesignChoice()
        if problem:
            if self.design == Design.blocks.value:
                raise usage_error(f"{problem}: use --design rounds", "--design")
            if given:
                raise usage_error(f"{given[0]} applies to --design blocks, and {problem}", given[0])
            return DesignChoice(auto=True, rounds_because=problem)
        return DesignChoice(BlockDesign(self.block_windows, self.window_s), auto=self.design == Design.auto.value)


def blocks_problem(spec: RunSpec, cooldown_s: float, runners: tuple[str, ...]) -> str:
    """Why a run cannot be measured in windows of process blocks ("" where it can): a block's windows step one
    device's build in one worker process, back to back."""
    if spec.devices or spec.strategy or any("," in runner for runner in runners):
        return "blocks measure single-device runs: a distributed run's ranks each have a process of their own"
    if spec.scenario:
        return "blocks time back-to-back steps: a serving scenario's queries run as whole runs"
    if cooldown_s:
        return "--cooldown-s waits between whole runs: a block's windows follow each other"
    return ""
