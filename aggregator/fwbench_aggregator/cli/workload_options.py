"""What a command measures and how long: two option groups (cli.groups). Every command that runs a model takes the
model group; those that time steps for a verdict (compare, calibrate, factors) take the measurement group too, and
cli.setting_options holds the groups of how runs are set up, powered, loaded and repeated."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..base.vocabulary import Mode
from ..plan import spec as plan
from ..plan.spec import RunSpec, option_pairs
from .options import (
    DeviceOption, MinMeasureOption, ModelOption, ModelOptionsOption, PrecisionOption, ShapeOption, StableWindowOption,
    StepsOption, WarmupOption, WarmupUntilCvOption,
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
        return RunSpec(self.model, mode, batch_size, self.shape, self.precision, self.device,
                       model_options=option_pairs(self.option), **settings)

    def label(self, mode: Mode, batch_size: int | None = None) -> str:
        """"resnet18 train, batch 32, fp32": how a table's title names the configuration."""
        batch = f", batch {batch_size}" if batch_size is not None else ""
        return f"{self.model} {mode.value}{batch}, {self.precision.value}"


@dataclass(frozen=True)
class Measurement:
    """How long each run warms up and measures: --warmup, --warmup-until-cv, --stable-window, --steps and
    --min-measure-s."""

    warmup: WarmupOption = plan.DEFAULT_WARMUP
    warmup_until_cv: WarmupUntilCvOption = plan.DEFAULT_WARMUP_UNTIL_CV
    stable_window: StableWindowOption = plan.STABLE_WINDOW
    steps: StepsOption = plan.DEFAULT_STEPS
    min_measure_s: MinMeasureOption = plan.DEFAULT_MIN_MEASURE_S

    def settings(self) -> dict[str, Any]:
        """The RunSpec fields this group sets."""
        return {"warmup": self.warmup, "warmup_until_cv": self.warmup_until_cv, "stable_window": self.stable_window,
                "steps": self.steps, "min_measure_s": self.min_measure_s}

    def whole_runs(self) -> str:
        """Why these settings need whole runs ("" at the defaults): they say how each run warms up and measures,
        where a block's windows warm up once and measure at least --window-s each."""
        given = [f"--{name.replace('_', '-')}" for name, value in self.settings().items()
                 if value != getattr(Measurement, name)]
        if not given:
            return ""
        return f"{given[0]} sets how a whole run warms up or measures, where a block's windows measure --window-s each"
