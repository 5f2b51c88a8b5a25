"""How long a run warms up and measures, and how its power is sampled: the defaults a request that leaves them unset
gets, each value checked, and the warm-up a window that found nothing to continue gets."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import InvalidArgument
from .limits import MAX_IDLE_BASELINE_S, MAX_MEASURE_S, MAX_WARMUP_STEPS, in_range
from .power import DEFAULT_RATE_HZ, energy_window_s, validate_rate_hz
from .runs import RunConfig, RunRequest, WarmupUntilStable

DEFAULT_MEASURED_STEPS = 20
# Unless the request says otherwise, warm up until the step time is stable: a fixed handful of steps is
# too few after compilation or autotuning and too many for a tiny model. The cap bounds a run that never
# settles (its summary says so).
DEFAULT_WARMUP_UNTIL_STABLE = WarmupUntilStable(cv_threshold=0.05, window=5)
DEFAULT_WARMUP_CAP_STEPS = 50
# Measure at least this long by default as well as the step count: a few fast steps are a few ms, in which
# one scheduling hiccup or clock change is most of the figure.
DEFAULT_MIN_MEASURE_S = 1.0
# The sampler's samples at a phase's ends follow the phase changes by a thread wake-up, so a measured
# window of exactly the energy minimum can come out a little short of it.
ENERGY_WINDOW_MARGIN_S = 0.1
DEFAULT_POWER_SAMPLE_RATE_HZ = DEFAULT_RATE_HZ
DEFAULT_IDLE_BASELINE_S = 1.0


def default_min_measure_s(power_sample_rate_hz: float) -> float:
    """The measuring time a request that leaves it unset gets: with power sampled, long enough for an
    energy figure at that rate."""
    if not power_sample_rate_hz:
        return DEFAULT_MIN_MEASURE_S
    return max(DEFAULT_MIN_MEASURE_S, energy_window_s(power_sample_rate_hz) + ENERGY_WINDOW_MARGIN_S)


@dataclass(frozen=True)
class Steps:
    """A run's warm-up and measured steps, and the rule that ends its warm-up once stable."""

    warmup: int  # a cap where warm-up runs until stable
    measured: int
    stable: WarmupUntilStable | None


def resolve_steps(request: RunRequest) -> Steps:
    stable = request.warmup_until_stable
    if request.warmup_steps is None:
        warmup = DEFAULT_WARMUP_CAP_STEPS
        stable = stable or DEFAULT_WARMUP_UNTIL_STABLE
    else:
        warmup = request.warmup_steps
    measured = DEFAULT_MEASURED_STEPS if request.measured_steps is None else request.measured_steps
    if stable is not None:
        if not 0.0 < stable.cv_threshold < 1.0:
            raise InvalidArgument(
                f"warmup_until_stable.cv_threshold must be between 0 and 1, got {stable.cv_threshold}"
            )
        in_range("warmup_until_stable.window", stable.window, 2, MAX_WARMUP_STEPS)
        if warmup < stable.window:
            raise InvalidArgument(
                f"warmup_steps ({warmup}) caps warm-up until stable and must be at least its window ({stable.window})"
            )
    return Steps(warmup, measured, stable)


@dataclass(frozen=True)
class MeasuringWindow:
    """How long a run measures, and how its power is sampled."""

    power_sample_rate_hz: float  # 0: telemetry off
    min_measure_s: float
    idle_baseline_s: float


def resolve_window(request: RunRequest, distributed: bool) -> MeasuringWindow:
    rate_hz = DEFAULT_POWER_SAMPLE_RATE_HZ if request.power_sample_rate_hz is None else request.power_sample_rate_hz
    if rate_hz and distributed:
        # Not sampled yet across a job's devices: the run's summary says so instead of one device's figure.
        rate_hz = 0.0
    if rate_hz:
        try:
            validate_rate_hz(rate_hz)
        except ValueError as error:
            raise InvalidArgument(f"{error}; 0 turns telemetry off") from None
    min_measure_s = default_min_measure_s(rate_hz) if request.min_measure_s is None else request.min_measure_s
    if not 0.0 <= min_measure_s <= MAX_MEASURE_S:
        raise InvalidArgument(f"min_measure_s must be between 0 and {MAX_MEASURE_S}, got {min_measure_s}")
    idle_baseline_s = DEFAULT_IDLE_BASELINE_S if request.idle_baseline_s is None else request.idle_baseline_s
    if not 0.0 <= idle_baseline_s <= MAX_IDLE_BASELINE_S:
        raise InvalidArgument(f"idle_baseline_s must be between 0 and {MAX_IDLE_BASELINE_S}, got {idle_baseline_s}")
    return MeasuringWindow(rate_hz, min_measure_s, idle_baseline_s if rate_hz else 0.0)


def first_window(config: RunConfig) -> RunConfig:
    """A window (continue_reuse) that found nothing to continue: its fresh build first warms up exactly its
    fresh_warmup_steps, or where it names none by the default rule, until stable within DEFAULT_WARMUP_CAP_STEPS more
    steps, as a run with no warm-up asked would."""
    if config.fresh_warmup_steps is not None:
        return replace(config, warmup_steps=config.fresh_warmup_steps, warmup_until_stable=None)
    return replace(
        config,
        warmup_steps=config.warmup_steps + DEFAULT_WARMUP_CAP_STEPS,
        warmup_until_stable=config.warmup_until_stable or DEFAULT_WARMUP_UNTIL_STABLE,
    )
