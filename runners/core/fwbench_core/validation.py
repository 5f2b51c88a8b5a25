"""Turning a run request into a fully resolved, valid run configuration."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from .catalog import Catalog
from .choices import Compilation, InputKind, Layout, Mode, Precision, Profile, Strategy, Switch, Tf32
from .devices import Capabilities, CompilationLimits, Device
from .errors import FailedPrecondition, InvalidArgument, did_you_mean, echoed
from .limits import (
    MAX_BATCH_SIZE,
    MAX_DISTRIBUTED_TIMEOUT_S,
    MAX_IDLE_BASELINE_S,
    MAX_MEASURE_S,
    MAX_MEASURED_STEPS,
    MAX_REFERENCE_BATCH_SIZE,
    MAX_REUSE_KEY_LENGTH,
    MAX_SEED,
    MAX_THREADS,
    MAX_WARMUP_STEPS,
    in_range,
)
from .models import ModelConfig, ModelSpec, ReferenceRequest
from .placement import resolve_cluster, resolve_devices, resolve_strategy
from .power import DEFAULT_RATE_HZ, energy_window_s, validate_rate_hz
from .runs import RunConfig, RunRequest, WarmupUntilStable
from .serving import resolve_serving

# A parity reference holds a batch's input and output: a few samples show the same network.
DEFAULT_REFERENCE_BATCH_SIZE = 2
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
DEFAULT_PRECISION = Precision.FP32
DEFAULT_LAYOUT = Layout.CHANNELS_LAST
DEFAULT_POWER_SAMPLE_RATE_HZ = DEFAULT_RATE_HZ
DEFAULT_IDLE_BASELINE_S = 1.0
# A distributed run's ranks wait for each other (rendezvous, collectives) at most this long by default.
DEFAULT_DISTRIBUTED_TIMEOUT_S = 120.0


def _choices(enum_type) -> str:
    return ", ".join(member.value for member in enum_type)


def resolve_shape(spec: ModelSpec, shape: Sequence[int]) -> tuple[int, ...]:
    if not shape:
        return spec.default_input_shape
    shape = tuple(shape)
    accepted = spec.describe_accepted_shapes()
    shown = echoed("x".join(map(str, shape)), quote=False)
    if len(shape) != len(spec.default_input_shape):
        raise InvalidArgument(f"input_shape {shown} has rank {len(shape)}; {spec.name} accepts {accepted}")
    if not all(low <= size <= high for size, low, high in zip(shape, spec.min_input_shape, spec.max_input_shape)):
        raise InvalidArgument(f"input_shape {shown} is out of range; {spec.name} accepts {accepted}")
    return shape


def resolve_options(spec: ModelSpec, options: Mapping[str, str]) -> dict[str, str]:
    """Every option of the model, set to the requested choice or its default."""
    known = {option.name: option for option in spec.options}
    for name in options:
        if name not in known:
            accepted = ", ".join(known) if known else "none"
            raise InvalidArgument(
                f"model_options has {echoed(name)}, which {spec.name} does not take{did_you_mean(name, known)}; "
                f"its options: {accepted}"
            )
    resolved = {}
    for name, option in known.items():
        value = options.get(name, option.default)
        if value not in option.choices:
            raise InvalidArgument(
                f"model_options {name}={echoed(value)} is not accepted by {spec.name}{did_you_mean(value, option.choices)}; "
                f"accepted values: {', '.join(option.choices)}"
            )
        resolved[name] = value
    return resolved


def resolve_model(
    model: str, shape: Sequence[int], options: Mapping[str, str], catalog: Catalog
) -> tuple[ModelSpec, tuple[int, ...], dict[str, str]]:
    spec = catalog.spec(model)
    return spec, resolve_shape(spec, shape), resolve_options(spec, options)


def resolve_model_config(
    model: str, shape: Sequence[int], options: Mapping[str, str], catalog: Catalog, batch_size: int, seed: int
) -> ModelConfig:
    """The model, batch and seed that inspection and parity checks build, validated as a run's are."""
    spec, input_shape, model_options = resolve_model(model, shape, options, catalog)
    return ModelConfig(
        spec, input_shape, model_options, in_range("batch_size", batch_size, 1, MAX_BATCH_SIZE), _seed(seed)
    )


def _seed(seed: int) -> int:
    return in_range("seed", seed, 0, MAX_SEED)


def _refuse_unless(value: enum.Enum, supported: frozenset, field: str, device: Device, framework: str) -> None:
    if value not in supported:
        names = ", ".join(member.value for member in type(value) if member in supported)
        raise FailedPrecondition(
            f"{field} {value.value} is not supported on {device.ref} by the {framework} runner; supported there: {names}"
        )


def _limits(can: Capabilities, compilation: Compilation) -> CompilationLimits:
    return can.compilation_limits.get(compilation, CompilationLimits())


def _refuse_with(value: enum.Enum, supported: frozenset, field: str, compilation: Compilation, framework: str) -> None:
    if value not in supported:
        names = ", ".join(member.value for member in type(value) if member in supported)
        raise FailedPrecondition(
            f"{field} {value.value} is not supported with compilation {compilation.value} by the {framework} runner; "
            f"supported with it: {names}"
        )


def _threads(field: str, requested: int, configured: int, adjustable: bool, framework: str) -> int:
    if requested in (0, configured):
        return configured
    if adjustable:
        return in_range(field, requested, 1, MAX_THREADS)
    flag = "--" + field.replace("_", "-")
    raise FailedPrecondition(
        f"{field} {requested} differs from this {framework} runner's {configured}, which it fixes at start-up; "
        f"start the runner with {flag} {requested}"
    )


def default_min_measure_s(power_sample_rate_hz: float) -> float:
    """The measuring time a request that leaves it unset gets: with power sampled, long enough for an
    energy figure at that rate."""
    if not power_sample_rate_hz:
        return DEFAULT_MIN_MEASURE_S
    return max(DEFAULT_MIN_MEASURE_S, energy_window_s(power_sample_rate_hz) + ENERGY_WINDOW_MARGIN_S)


def resolve_tf32(precision: Precision, profile: Profile, can: Capabilities) -> Tf32 | None:
    """TF32 asked for, or strict float32 (the equal profile), or the framework's own default (native, best);
    None on a device without TF32."""
    if Precision.TF32 not in can.precisions:
        return None
    if precision is Precision.TF32:
        return Tf32.ON
    return can.native_tf32 if profile.framework_defaults else Tf32.OFF


@dataclass(frozen=True)
class _Settings:
    """What a request sets of the framework: each checked against the device's capabilities and the compilation."""

    precision: Precision
    compilation: Compilation
    layout: Layout | None
    cudnn_autotune: Switch


def _resolve_settings(
    request: RunRequest,
    mode: Mode,
    spec: ModelSpec,
    strategy: Strategy,
    can: Capabilities,
    device: Device,
    profile: Profile,
    framework: str,
) -> _Settings:
    precision = request.precision or DEFAULT_PRECISION
    _refuse_unless(precision, can.precisions, "precision", device, framework)
    compilation = request.compilation or can.default_compilation
    _refuse_unless(compilation, can.compilations, "compilation", device, framework)
    limits = _limits(can, compilation)
    if mode not in limits.modes:
        modes = ", ".join(m.value for m in Mode if m in limits.modes)
        others = ", ".join(c.value for c in Compilation if c in can.compilations and mode in _limits(can, c).modes)
        raise InvalidArgument(
            f"compilation {compilation.value} runs mode {modes} only, not mode {mode.value}; "
            f"compilations for mode {mode.value} on the {framework} runner: {others}"
        )
    _refuse_with(precision, limits.precisions, "precision", compilation, framework)
    _refuse_with(strategy, limits.strategies, "strategy", compilation, framework)
    if spec.input_kind is InputKind.IMAGE:
        # Unset, a layout the compilation cannot take gives way to one it can.
        allowed = can.layouts & limits.layouts
        fallback = next(member for member in Layout if member in allowed)
        preferred = can.native_layout if profile.framework_defaults else DEFAULT_LAYOUT
        layout = request.layout or (preferred if preferred in allowed else fallback)
        _refuse_unless(layout, can.layouts, "layout", device, framework)
        _refuse_with(layout, limits.layouts, "layout", compilation, framework)
    elif request.layout is not None:
        raise InvalidArgument(f"layout applies to image models only; {spec.name} takes {spec.input_convention} input")
    else:
        layout = None
    # A runner fixes autotuning at start-up where its framework cannot change it per run: then that setting.
    native_autotune = next(s for s in (can.native_cudnn_autotune, Switch.OFF, Switch.ON) if s in can.cudnn_autotune)
    autotune = request.cudnn_autotune or (native_autotune if profile.framework_defaults else Switch.OFF)
    _refuse_unless(autotune, can.cudnn_autotune, "cudnn_autotune", device, framework)
    return _Settings(precision, compilation, layout, autotune)


@dataclass(frozen=True)
class _Steps:
    warmup: int  # a cap where warm-up runs until stable
    measured: int
    stable: WarmupUntilStable | None


def _resolve_steps(request: RunRequest) -> _Steps:
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
    return _Steps(warmup, measured, stable)


@dataclass(frozen=True)
class _Window:
    """How long a run measures, and how its power is sampled."""

    power_sample_rate_hz: float  # 0: telemetry off
    min_measure_s: float
    idle_baseline_s: float


def _resolve_window(request: RunRequest, distributed: bool) -> _Window:
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
    return _Window(rate_hz, min_measure_s, idle_baseline_s if rate_hz else 0.0)


def _distributed_timeout_s(request: RunRequest) -> float:
    timeout_s = (
        DEFAULT_DISTRIBUTED_TIMEOUT_S if request.distributed_timeout_s is None else request.distributed_timeout_s
    )
    if not 1.0 <= timeout_s <= MAX_DISTRIBUTED_TIMEOUT_S:
        raise InvalidArgument(
            f"distributed_timeout_s must be between 1 and {MAX_DISTRIBUTED_TIMEOUT_S:.0f}, got {timeout_s}"
        )
    return timeout_s


def resolve(
    request: RunRequest,
    devices: Sequence[Device],
    capabilities: Callable[[Device], Capabilities],
    catalog: Catalog,
    framework: str = "this",
) -> RunConfig:
    """Validate `request` and fill in defaults; raises a RunnerError naming the field. Checked in this order, each
    part by its own function: the model, the placement, the framework's settings, the steps, the measuring window
    and power, then the bounds and serving."""
    spec, input_shape, model_options = resolve_model(request.model, request.input_shape, request.model_options, catalog)
    mode = request.mode
    if mode is None:
        raise InvalidArgument(f"mode must be set; accepted values: {_choices(Mode)}")
    batch_size = in_range("batch_size", request.batch_size, 1, MAX_BATCH_SIZE)
    run_devices = resolve_devices(request, devices)
    device = run_devices[0]
    can = capabilities(device)
    cluster = resolve_cluster(request.cluster)
    strategy = resolve_strategy(request.strategy, run_devices, cluster, can, framework)
    distributed = strategy is not Strategy.SINGLE
    timeout_s = _distributed_timeout_s(request)
    profile = request.profile or Profile.EQUAL
    settings = _resolve_settings(request, mode, spec, strategy, can, device, profile, framework)
    steps = _resolve_steps(request)
    window = _resolve_window(request, distributed)
    return RunConfig(
        reuse_key=resolve_key("reuse_key", request.reuse_key),
        end_reuse=request.end_reuse,
        continue_reuse=_continue_reuse(request),
        process_block=_process_block(request, distributed),
        profile=profile,
        model=spec,
        mode=mode,
        batch_size=batch_size,
        input_shape=input_shape,
        precision=settings.precision,
        device=device,
        warmup_steps=in_range("warmup_steps", steps.warmup, 0, MAX_WARMUP_STEPS),
        measured_steps=in_range("measured_steps", steps.measured, 1, MAX_MEASURED_STEPS),
        seed=_seed(request.seed),
        input_seed=(
            request.seed if request.input_seed is None else in_range("input_seed", request.input_seed, 0, MAX_SEED)
        ),
        model_options=model_options,
        layout=settings.layout,
        compilation=settings.compilation,
        cudnn_autotune=settings.cudnn_autotune,
        tf32=resolve_tf32(settings.precision, profile, can),
        intra_op_threads=_threads(
            "intra_op_threads",
            request.intra_op_threads,
            can.intra_op_threads,
            can.intra_op_threads_adjustable,
            framework,
        ),
        inter_op_threads=_threads("inter_op_threads", request.inter_op_threads, can.inter_op_threads, False, framework),
        warmup_until_stable=steps.stable,
        min_measure_s=window.min_measure_s,
        power_sample_rate_hz=window.power_sample_rate_hz,
        idle_baseline_s=window.idle_baseline_s,
        strategy=strategy,
        devices=run_devices if distributed else (),
        cluster=cluster,
        distributed_timeout_s=timeout_s if distributed else 0.0,
        serving=resolve_serving(request, mode, batch_size, strategy, window.min_measure_s),
    )


def _continue_reuse(request: RunRequest) -> bool:
    if request.continue_reuse and not request.reuse_key:
        raise InvalidArgument("continue_reuse continues the workload kept under reuse_key: set reuse_key too")
    return request.continue_reuse


def _process_block(request: RunRequest, distributed: bool) -> str:
    block = resolve_key("process_block", request.process_block)
    if block and distributed:
        raise InvalidArgument(
            "process_block applies to single-device runs: every rank of a distributed run already "
            "runs in a worker process of its own; leave it empty"
        )
    return block


def first_window(config: RunConfig) -> RunConfig:
    """A window (continue_reuse) that found nothing to continue: its fresh build first warms up by the default rule,
    until stable within DEFAULT_WARMUP_CAP_STEPS more steps, as a run with no warm-up asked would."""
    return replace(
        config,
        warmup_steps=config.warmup_steps + DEFAULT_WARMUP_CAP_STEPS,
        warmup_until_stable=config.warmup_until_stable or DEFAULT_WARMUP_UNTIL_STABLE,
    )


def resolve_key(field_name: str, key: str) -> str:
    if len(key) > MAX_REUSE_KEY_LENGTH or not all(" " <= character <= "~" for character in key):
        empty = "builds every run afresh" if field_name == "reuse_key" else "runs as the runner's run isolation says"
        raise InvalidArgument(
            f"{field_name} {echoed(key)} is not accepted: printable ASCII (space to '~'), at most "
            f"{MAX_REUSE_KEY_LENGTH} characters; empty {empty}"
        )
    return key


def resolve_reference(request: ReferenceRequest, catalog: Catalog) -> ModelConfig:
    """The model a parity reference is exported or compared for; raises a RunnerError naming the field."""
    spec, input_shape, model_options = resolve_model(request.model, request.input_shape, request.model_options, catalog)
    batch_size = request.batch_size or DEFAULT_REFERENCE_BATCH_SIZE
    if not 1 <= batch_size <= MAX_REFERENCE_BATCH_SIZE:
        raise InvalidArgument(
            f"batch_size must be between 1 and {MAX_REFERENCE_BATCH_SIZE} for a reference "
            f"(0 means {DEFAULT_REFERENCE_BATCH_SIZE}), got {batch_size}"
        )
    return ModelConfig(spec, input_shape, model_options, batch_size, _seed(request.seed))
