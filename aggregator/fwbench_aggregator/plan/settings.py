"""The run settings a user sets, each declared once, here: its type, default and accepted range (the limits of
plan.spec), its command-line help, whether a sweep file takes it, the summary column it is stored as and whether
that column is part of the comparability key, how the key part reads in a label, and the RunRequest field it is
sent in and resolved as. The command line's option groups (cli.workload_options), a sweep file's fields and their
checks (plan.study_file), the store's columns and key (store.run_columns, store.comparability_columns), what a summary stores (store.records) and the
labels (analyse.alike) are made from these declarations, and run.wire sends each in its RunRequest field and reads it
back from the ResolvedConfig by name; tests/test_settings_declared_once.py holds every other module to them. A new
setting is one Setting here and one RunSpec field (this module imports spec's limits, so spec cannot read these
declarations); on the runner's side, its fields in the .proto, in fwbench_core.runs and its check in the core's
validation. A stored setting added later names the store format it is first stored in (stored_since), which raises
the format and gives older runs its default (store.migrations)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .field_checks import Checker, finite, number
from .spec import (
    DEFAULT_MIN_MEASURE_S,
    DEFAULT_STEPS,
    DEFAULT_WARMUP,
    DEFAULT_WARMUP_UNTIL_CV,
    MAX_MEASURE_S,
    MAX_NEW_TOKENS,
    MAX_SEED,
    MAX_STEPS,
    MAX_WARMUP,
    MIN_NEW_TOKENS,
    STABLE_WINDOW,
)

# A run's settings are part of the comparability key (store.comparability_columns) as the runner's or the block's.
BLOCK = "block"


@dataclass(frozen=True)
class Setting:
    """One run setting. `name` is its RunSpec field, its option (--name) and its sweep file field."""

    name: str
    kind: type  # int or float
    default: float | None  # None: `default_from`'s value
    low: float
    high: float
    help: str
    group: str  # the option group that takes it: "measurement", "seeds" or "generation"
    # A sweep file's own check where the range alone does not say it (None: a number from low to high).
    sweep_check: Callable[[Mapping, Checker], object] | None = None
    column: str = ""  # the summary column it is stored as; "": not stored
    key: str = ""  # BLOCK where the stored column is part of the block's key
    label: str = ""  # how the key part reads in a row's label: "seed 1"
    request: str = ""  # the RunRequest and ResolvedConfig field (an optional one where default_from is set)
    default_from: str = ""  # where `default` is None: the setting whose value it takes (in a request, a store)
    stored_since: int = 1  # the store format that first stored its column; older runs read `default_from`'s
    modes: tuple[str, ...] = ()  # the modes a request carries it in; (): every mode

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def sweep_value(self, raw: Mapping, checker: Checker) -> object:
        """The sweep file's value of this setting, checked; None where the file leaves it out."""
        if self.sweep_check is not None:
            return self.sweep_check(raw, checker)
        return number(raw, self.name, checker, self.low, self.high, integer=self.kind is int)


def _warmup_until_cv(raw: Mapping, checker: Checker) -> float | None:
    if "warmup_until_cv" not in raw:
        return None
    value = finite(raw["warmup_until_cv"])
    if value is None or not 0 <= value < 1:
        shown = raw["warmup_until_cv"] if value is None else value
        checker.fail(
            ("warmup_until_cv",),
            f"{shown!r} is not a coefficient of variation; accepted: 0 (off) up to below 1, e.g. 0.05",
        )
    return value


SETTINGS = (
    Setting(
        "warmup",
        int,
        DEFAULT_WARMUP,
        0,
        MAX_WARMUP,
        "the most warm-up steps (a fixed count with --warmup-until-cv 0 or below --stable-window); excluded from "
        "the figures",
        "measurement",
        column="warmup_steps",
        key=BLOCK,
        label="warm-up",
        request="warmup_steps",
    ),
    Setting(
        "warmup_until_cv",
        float,
        DEFAULT_WARMUP_UNTIL_CV,
        0.0,
        0.99,
        "warm up until the last --stable-window steps vary less than this; 0: exactly --warmup steps",
        "measurement",
        sweep_check=_warmup_until_cv,
    ),
    Setting("stable_window", int, STABLE_WINDOW, 2, MAX_WARMUP, "steps in the warm-up stability window", "measurement"),
    Setting(
        "steps",
        int,
        DEFAULT_STEPS,
        1,
        MAX_STEPS,
        "measured steps (at least)",
        "measurement",
        column="measured_steps_asked",
        key=BLOCK,
        label="steps",
        request="measured_steps",
    ),
    Setting(
        "min_measure_s",
        float,
        DEFAULT_MIN_MEASURE_S,
        0.0,
        MAX_MEASURE_S,
        "measure for at least this many seconds per run",
        "measurement",
        column="min_measure_s",
        key=BLOCK,
        label="window",
        request="min_measure_s",
    ),
    Setting(
        "seed",
        int,
        0,
        0,
        MAX_SEED,
        "random seed for the weights (and the inputs, unless --input-seed), the same on every runner",
        "seeds",
        column="seed",
        key=BLOCK,
        label="seed",
        request="seed",
    ),
    # Another input seed is another protocol: the same weights stepped on other data.
    Setting(
        "input_seed",
        int,
        None,
        0,
        MAX_SEED,
        "random seed for the input data, the same on every runner; default: the --seed",
        "seeds",
        column="input_seed",
        key=BLOCK,
        label="input seed",
        request="input_seed",
        default_from="seed",
        stored_since=10,
    ),
    # A generation request's length: part of the workload, so runs of other lengths are other protocols.
    Setting(
        "new_tokens",
        int,
        None,
        MIN_NEW_TOKENS,
        MAX_NEW_TOKENS,
        "mode generate: tokens each prompt gains by greedy decoding, never stopping early (the prompt is --shape "
        "seq=P); default: 32",
        "generation",
        column="new_tokens",
        key=BLOCK,
        label="new tokens",
        request="new_tokens",
        stored_since=11,
        modes=("generate",),
    ),
)
BY_NAME = {setting.name: setting for setting in SETTINGS}


def group(name: str) -> tuple[Setting, ...]:
    """The settings one option group takes, in declaration order."""
    return tuple(setting for setting in SETTINGS if setting.group == name)


def stored(key: str = "") -> tuple[Setting, ...]:
    """The settings stored as summary columns (with `key`: those of that part of the comparability key)."""
    return tuple(setting for setting in SETTINGS if setting.column and (not key or setting.key == key))


def non_default(values: Mapping[str, object]) -> dict[str, object]:
    """The settings among `values` that differ from their defaults (a default taken from another setting is None):
    what makes a configuration's key, so that a setting left at its default keeps every key it had before it
    existed."""
    return {
        name: value
        for name, value in values.items()
        if name in BY_NAME and value is not None and value != BY_NAME[name].default
    }
