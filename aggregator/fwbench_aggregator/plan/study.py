"""Sweeps: a grid of benchmark configurations, described in YAML or by command-line shorthands.

    runners: [torch, tensorflow]        # default: those frameworks.toml compares by default (torch, tensorflow)
    models: [resnet18, bert_tiny]       # required
    modes: [train, infer]               # default: [train]
    batch_sizes: [16, 32, 64]           # default: [32]
    shapes: [3x32x32, 3x64x64]          # or per model: {resnet18: [3x32x32], bert_tiny: [seq=128]}; default: the model's
    precisions: [fp32, amp_bf16]        # default: [fp32]
    devices: [gpu:0, "gpu:0,gpu:1"]     # one device, or several of each runner for one run; default: its first GPU, else its CPU
    strategies: [ddp, mirrored]         # or per runner: {torch: [dp, ddp], tensorflow: [mirrored]}; default: the runner's
    nodes: [1, 2]                       # machines one run spans (a Slurm allocation's, fwbench slurm); default: [1]
    repetitions: auto                   # runs per runner and point: auto (default) looks after every round and stops
                                        # once the point's verdict is settled; a number runs exactly that many
    max_repetitions: 20                 # under auto: the most runs per runner and point; default: 20
    time_budget_s: 3600                 # under auto: the sweep's seconds, spread over its points; default: none
    steps: 20                           # every run setting (plan.settings: warm-up, measured steps and window,
                                        # seeds) by its option's name; default: the option's
    options: {bert_tiny: {head: mlm}}   # model options, per model
    layout: channels_last               # default: the runner's
    compilation: eager                  # or per runner: {torch: torch_compile, tensorflow: xla}
    cooldown_s: 10                      # seconds between runs; default: 0
    reuse_builds: true                  # a runner's batch sizes of one repetition share one build; default: true
    max_runs: 20000                     # the most runs the study may plan; default: 10,000 (at most 100,000)

Files are read and checked in study_file.py, command-line shorthands in command_line_sweep.py (the repetitions
fields here, in repetition_fields). Under repetitions auto the grid holds max_repetitions of every point, the most it may run; the
sweep (app.sweep_rounds) looks after each round of a point and leaves out the rest of it once its verdict is settled,
by the rule compare uses (app.rounds, analyse.sequential). A point is a configuration less its runner
(Configuration.point): the runners compared at one model, mode, batch size, shape, precision, device, ... .
The grid expands with the frameworks interleaved: for each point (less its batch size) and each repetition,
every runner in turn (A, B, B, A, ...), so that drift over a long sweep favours neither; each runner's turn
runs the batch sizes one after the other. With reuse_builds they are one chain that builds the model once
(RunRequest.reuse_key): each run restarts from the seed's weights and makes its own inputs, and TensorFlow
traces its step again for every batch size. Repetitions never share a build, so runs stay independent.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..base.frameworks import default_names as default_framework_names
from ..base.vocabulary import Compilation, Layout, Mode, Precision, Profile, Strategy
from .field_checks import Checker, finite, is_int, number
from .keys import config_key
from .spec import (
    DEFAULT_MIN_MEASURE_S,
    DEFAULT_STEPS,
    DEFAULT_WARMUP,
    DEFAULT_WARMUP_UNTIL_CV,
    MAX_REPETITIONS,
    MAX_TIME_BUDGET_S,
    RunSpec,
    StartupSettings,
)

AUTO = "auto"
# Under repetitions auto, the most runs per runner of one configuration (compare's --max-repetitions, a sweep's
# max_repetitions): analyse.sequential spreads its level over the looks up to it, and says why 20.
DEFAULT_MAX_REPETITIONS = 20
# A verdict needs three runs a side (analyse.stats.MIN_REPETITIONS): the smallest budget a sequential design takes.
MIN_MAX_REPETITIONS = 3


@dataclass(frozen=True)
class Configuration:
    """One run: one runner, one point of the grid, one repetition."""

    runner: str
    model: str
    mode: Mode
    batch_size: int
    shape: str | None
    precision: Precision
    device: str | None
    repetition: int
    model_options: tuple[tuple[str, str], ...] = ()
    layout: Layout | None = None
    compilation: Compilation | None = None
    warmup: int = DEFAULT_WARMUP
    steps: int = DEFAULT_STEPS
    warmup_until_cv: float = DEFAULT_WARMUP_UNTIL_CV
    min_measure_s: float = DEFAULT_MIN_MEASURE_S
    strategy: Strategy | None = None
    devices: str | None = None  # several devices of the runner, "cpu:0,cpu:1"; then `device` is None
    nodes: int = 1  # machines the run spans: one job across that many nodes of a Slurm allocation
    profile: Profile | None = None  # None: equal
    # Under the best profile, the settings its runner's search chose (("layout", "channels_first"), ...): how the run
    # is made, not part of its key (the point is what the study asked for).
    settings: tuple[tuple[str, str], ...] = ()
    # The runs that share one build: this runner, this point less its batch size, this repetition; "" for none.
    # Not part of the store key: it changes how a run is prepared, not what it measures.
    reuse_chain: str = ""
    # The run settings (plan.settings) given away from their defaults beyond the fields above: (("seed", 3), ...).
    run_settings: tuple[tuple[str, object], ...] = ()

    def run_spec(self, startup: StartupSettings, reuse_key: str = "", end_reuse: bool = False) -> RunSpec:
        """The run this configuration asks of its runner, with the runners' startup settings and its chain's key."""
        chosen = dict(self.settings)
        return RunSpec(
            self.model,
            self.mode,
            self.batch_size,
            self.shape,
            self.precision,
            self.device,
            Layout(chosen["layout"]) if "layout" in chosen else self.layout,
            Compilation(chosen["compilation"]) if "compilation" in chosen else self.compilation,
            self.warmup,
            self.steps,
            model_options=self.model_options,
            startup=startup,
            warmup_until_cv=self.warmup_until_cv,
            min_measure_s=self.min_measure_s,
            strategy=self.strategy,
            devices=self.devices,
            reuse_key=reuse_key,
            end_reuse=end_reuse,
            profile=self.profile,
            cudnn_autotune=chosen.get("cudnn_autotune"),
            **dict(self.run_settings),
        )

    def key_fields(self, **settings: object) -> dict[str, object]:
        """The fields a result depends on, JSON-ready, for plan.keys.config_key. Extra keyword arguments
        (seed, thread counts, ...) join the settings, so a change to them makes a new key; so do the run settings
        given (run_settings), which only a setting away from its default adds, so that keys made before it stay."""
        return {
            "runner": self.runner,
            "model": self.model,
            "model_options": dict(self.model_options),
            "mode": self.mode.value,
            "batch_size": self.batch_size,
            "input_shape": self.shape,
            "precision": self.precision.value,
            "device": self.device,
            "layout": self.layout.value if self.layout else None,
            "compilation": self.compilation.value if self.compilation else None,
            "settings": {
                "warmup_steps": self.warmup,
                "warmup_until_cv": self.warmup_until_cv,
                "measured_steps": self.steps,
                "min_measure_s": self.min_measure_s,
                **settings,
                **dict(self.run_settings),
            },
            "repetition": self.repetition,
            # Only where set: the keys of runs stored before distributed runs existed stay the same.
            **({"strategy": self.strategy.value} if self.strategy else {}),
            **({"devices": self.devices} if self.devices else {}),
            **({"nodes": self.nodes} if self.nodes > 1 else {}),
            **({"profile": self.profile.value} if self.profile and self.profile.value != "equal" else {}),
        }

    def config_key(self, startup: StartupSettings) -> str:
        """The configuration's key, which a sweep records with each of its runs (its id is the run's own) to find
        them on a resume: its fields and the runners' start-up settings, so that a change to them makes a new key."""
        return config_key(
            self.key_fields(
                seed=0,
                intra_op_threads=startup.intra_op_threads,
                inter_op_threads=startup.inter_op_threads,
                cudnn_autotune=startup.cudnn_autotune,
            )
        )

    def point(self) -> Configuration:
        """The runners compared at one point of the grid: this configuration less its runner, strategy (the runner
        label carries it, as a comparison row's does), repetition and how it is made."""
        return replace(self, runner="", strategy=None, repetition=0, reuse_chain="", settings=())

    def family(self) -> tuple:
        """What the runs that must share a machine have in common: everything but the runner, its strategy, the
        batch size and the repetition. A comparison's runs all run on one machine, so a difference between nodes is never
        reported as one between frameworks, and a reuse chain stays on the runner that holds its build."""
        return (
            self.model,
            self.model_options,
            self.mode,
            self.shape,
            self.precision,
            self.device,
            self.devices,
            self.layout,
            self.nodes,
            self.profile,
        )


@dataclass(frozen=True)
class Sweep:
    models: tuple[str, ...]
    runners: tuple[str, ...] = field(default_factory=lambda: tuple(default_framework_names()))
    modes: tuple[Mode, ...] = (Mode.train,)
    batch_sizes: tuple[int, ...] = (32,)
    shapes: dict[str, tuple[str | None, ...]] = field(default_factory=dict)  # per model; absent: (None,)
    precisions: tuple[Precision, ...] = (Precision.fp32,)
    devices: tuple[str | None, ...] = (None,)
    repetitions: int | None = None  # runs per runner and point; None: auto, as many as the verdict needs
    max_repetitions: int = DEFAULT_MAX_REPETITIONS  # under auto: the most runs per runner and point
    time_budget_s: float | None = None  # under auto: the whole sweep's, spread over its points (app.sweep_rounds)
    warmup: int = DEFAULT_WARMUP
    steps: int = DEFAULT_STEPS
    warmup_until_cv: float = DEFAULT_WARMUP_UNTIL_CV
    min_measure_s: float = DEFAULT_MIN_MEASURE_S
    options: dict[str, dict[str, str]] = field(default_factory=dict)
    layout: Layout | None = None
    compilation: dict[str, Compilation] = field(default_factory=dict)  # per runner; absent: the runner's default
    cooldown_s: float = 0.0
    strategies: dict[str, tuple[Strategy, ...]] = field(default_factory=dict)  # per runner; absent: its default
    reuse_builds: bool = True
    nodes: tuple[int, ...] = (1,)
    models_dirs: tuple[str, ...] = ()  # folders of model plug-ins the runners fwbench starts load
    profiles: tuple[Profile | None, ...] = (None,)  # None: the default, equal
    run_settings: tuple[tuple[str, object], ...] = ()  # as Configuration.run_settings

    @property
    def auto(self) -> bool:
        return self.repetitions is None

    @property
    def planned_repetitions(self) -> int:
        """Runs per runner and point in the grid: the fixed number, or under auto the most a point may take."""
        return self.max_repetitions if self.repetitions is None else self.repetitions

    @property
    def design_budget(self) -> int:
        """What each run stores as the sequential design it was made under: max_repetitions under auto, else 0."""
        return self.max_repetitions if self.repetitions is None else 0

    def run_count(self) -> int:
        """len(self.configurations()), counted without building them, so that too large a study is refused first."""
        points = len(self.modes) * len(self.precisions) * len(self.devices) * len(self.nodes) * len(self.profiles)
        shapes = sum(len(self.shapes.get(model, (None,))) for model in self.models)
        # Per point and repetition, each runner runs each of its strategies (once where it has none).
        turns = sum(len(self.strategies.get(runner, (None,))) for runner in self.runners)
        return shapes * points * turns * self.planned_repetitions * len(self.batch_sizes)

    def configurations(self) -> list[Configuration]:
        """The grid, model outermost, then mode, shape, precision, device, strategy, profile; within each point,
        repetition after repetition, the runners counterbalanced (A B B A ...), and each runner's repetition
        its batch sizes in order: one reuse chain with reuse_builds. A runner's strategies pair with each
        devices entry (a strategy the devices cannot run is refused before the study runs)."""
        out = []
        strategy_count = max((len(v) for v in self.strategies.values()), default=1)
        for model in self.models:
            points = itertools.product(
                self.modes,
                self.shapes.get(model, (None,)),
                self.precisions,
                self.devices,
                self.nodes,
                range(strategy_count),
                self.profiles,
            )
            for mode, shape, precision, device, nodes, s, profile in points:
                for repetition, runner in counterbalanced(self.runners, self.planned_repetitions):
                    own = self.strategies.get(runner, (None,))
                    if s >= len(own):
                        continue
                    several = device is not None and "," in device
                    chain = [
                        Configuration(
                            runner,
                            model,
                            mode,
                            batch_size,
                            shape,
                            precision,
                            None if several else device,
                            repetition,
                            tuple(sorted(self.options.get(model, {}).items())),
                            self.layout,
                            self.compilation.get(runner),
                            self.warmup,
                            self.steps,
                            self.warmup_until_cv,
                            self.min_measure_s,
                            own[s],
                            device if several else None,
                            nodes,
                            profile,
                            run_settings=self.run_settings,
                        )
                        for batch_size in self.batch_sizes
                    ]
                    if self.reuse_builds and len(chain) > 1:
                        key = config_key({**chain[0].key_fields(), "batch_size": None})
                        chain = [replace(c, reuse_chain=key) for c in chain]
                    out.extend(chain)
        return out


def counterbalanced(runners: Sequence[str], repetitions: int) -> list[tuple[int, str]]:
    """(repetition, runner) in run order: the runners forwards, then backwards (A B, B A, A B, ...), so
    that every runner's average position is the same and a drift (warming, throttling) favours none."""
    return [
        (repetition, runner)
        for repetition in range(repetitions)
        for runner in (runners if repetition % 2 == 0 else list(reversed(runners)))
    ]


def repetition_fields(raw: Mapping, checker: Checker) -> dict[str, object]:
    """repetitions (auto, or a number of runs), max_repetitions and time_budget_s, checked together: the last two
    apply under auto only. The fields given, for Sweep."""
    values: dict[str, object] = {}
    given = raw.get("repetitions")
    if given is not None and given != AUTO:
        if not is_int(given) or not 1 <= given <= MAX_REPETITIONS:
            checker.attempt(
                lambda: checker.fail(
                    ("repetitions",),
                    f"{given!r} is not accepted; accepted values: "
                    f"{AUTO}, or a number of runs from 1 to {MAX_REPETITIONS}",
                )
            )
        else:
            values["repetitions"] = given
    values["max_repetitions"] = checker.attempt(
        lambda: number(raw, "max_repetitions", checker, MIN_MAX_REPETITIONS, MAX_REPETITIONS)
    )
    values["time_budget_s"] = checker.attempt(lambda: _time_budget(raw, checker))
    if is_int(given):
        for name in ("max_repetitions", "time_budget_s"):
            if raw.get(name) is not None:
                checker.attempt(
                    lambda name=name: checker.fail(
                        (name,),
                        f"applies under repetitions: {AUTO} only, and repetitions is {given}; set repetitions: "
                        f"{AUTO}, or leave {name} out",
                    )
                )
    return {name: value for name, value in values.items() if value is not None}


def _time_budget(raw: Mapping, checker: Checker) -> float | None:
    value = raw.get("time_budget_s")
    if value is None:
        return None
    seconds = finite(value)
    if seconds is None or not 0 < seconds <= MAX_TIME_BUDGET_S:
        checker.fail(
            ("time_budget_s",),
            f"{value!r} is not accepted; accepted: a number of seconds above 0, at most "
            f"{MAX_TIME_BUDGET_S:.0f} (a year), e.g. 3600",
        )
    return seconds
