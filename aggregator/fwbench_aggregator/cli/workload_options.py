"""What a command measures and how long: option groups (cli.groups). Every command that runs a model takes the
model group; those that time steps for a verdict (compare, calibrate, factors, sweep) take the measurement group
too, and the seeds group where a run's seed is the user's; cli.setting_options holds the groups of how runs are set
up, powered, loaded and repeated. The measurement and seeds groups are made from the run settings' declarations
(plan.settings)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..base.vocabulary import Mode
from ..plan.settings import group
from ..plan.spec import RunSpec, option_pairs
from .common import usage_error
from .groups import settings_group
from .run_option_types import (
    SETTING_OPTIONS,
    DeviceOption,
    ModelOption,
    ModelOptionsOption,
    PrecisionOption,
    ShapeOption,
)


@dataclass(frozen=True)
class ModelOnDevice:
    """--model with its input shape and --option values, at a precision on a device: the run's mode and batch are
    the command's (max-batch searches the batch, serve-capacity only infers)."""

    model: ModelOption = "resnet18"
    shape: ShapeOption = None
    option: ModelOptionsOption = field(default_factory=list)
    precision: PrecisionOption = "fp32"
    device: DeviceOption = None

    def spec(self, mode: Mode, batch_size: int, **settings: Any) -> RunSpec:
        """The run of this model in `mode` at `batch_size`, with the command's other settings."""
        return RunSpec(
            self.model,
            mode,
            batch_size,
            self.shape,
            self.precision,
            self.device,
            model_options=option_pairs(self.option),
            **settings,
        )

    def label(self, mode: Mode, batch_size: int | None = None) -> str:
        """ "resnet18 train, batch 32, fp32": how a table's title names the configuration."""
        batch = f", batch {batch_size}" if batch_size is not None else ""
        return f"{self.model} {mode.value}{batch}, {self.precision.value}"


class _Measurement:
    """How long each run warms up and measures: --warmup, --warmup-until-cv, --stable-window, --steps and
    --min-measure-s, as plan.settings declares them."""

    def settings(self) -> dict[str, Any]:
        """The RunSpec fields this group sets."""
        return {field.name: getattr(self, field.name) for field in fields(self)}  # type: ignore[arg-type]

    def whole_runs(self) -> str:
        """Why these settings need whole runs ("" at the defaults): they say how each run warms up and measures,
        where a block's windows warm up once and measure at least --window-s each."""
        given = [
            f"--{name.replace('_', '-')}"
            for name, value in self.settings().items()
            if value != getattr(type(self), name)
        ]
        if not given:
            return ""
        return f"{given[0]} sets how a whole run warms up or measures, where a block's windows measure --window-s each"


Measurement = settings_group(
    "Measurement", SETTING_OPTIONS, {s.name: s.default for s in group("measurement")}, _Measurement
)


class _Seeds:
    """Where a run's randomness starts: --seed (the weights, and the inputs unless --input-seed) and --input-seed,
    as plan.settings declares them."""

    def settings(self) -> dict[str, Any]:
        """The RunSpec fields this group sets."""
        return {field.name: getattr(self, field.name) for field in fields(self)}  # type: ignore[arg-type]


Seeds = settings_group("Seeds", SETTING_OPTIONS, {s.name: s.default for s in group("seeds")}, _Seeds)


class _Generation:
    """How long a generation request is (--mode generate): --new-tokens, as plan.settings declares it."""

    def settings(self, mode: Mode | None) -> dict[str, Any]:
        """The RunSpec fields this group sets; refused (exit 2) where they do not apply to `mode` (None: a sweep
        whose modes do not include generate)."""
        given = {field.name: getattr(self, field.name) for field in fields(self)}  # type: ignore[arg-type]
        stray = [name for name, value in given.items() if value is not None and mode is not Mode.generate]
        if stray:
            flag = "--" + stray[0].replace("_", "-")
            asked = f"this run's mode is {mode.value}" if mode else "no mode of this sweep is generate"
            raise usage_error(f"it applies to mode generate only; {asked}", flag)
        return given


Generation = settings_group(
    "Generation", SETTING_OPTIONS, {s.name: s.default for s in group("generation")}, _Generation
)
