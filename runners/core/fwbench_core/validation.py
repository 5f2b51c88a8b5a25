"""Turning a run request into a fully resolved, valid run configuration."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .catalog import get_spec
from .errors import FailedPrecondition, InvalidArgument
from .spec import Device, DeviceKind, DeviceRef, ModelSpec, Mode, Precision, RunConfig, RunRequest

MAX_BATCH_SIZE = 65536
MAX_WARMUP_STEPS = 10_000
MAX_MEASURED_STEPS = 1_000_000
DEFAULT_WARMUP_STEPS = 5
DEFAULT_MEASURED_STEPS = 20
DEFAULT_PRECISION = Precision.FP32


def _choices(enum_type) -> str:
    return ", ".join(member.value for member in enum_type)


def resolve_shape(spec: ModelSpec, shape: Sequence[int]) -> tuple[int, ...]:
    if not shape:
        return spec.default_input_shape
    shape = tuple(shape)
    accepted = spec.describe_accepted_shapes()
    shown = "x".join(map(str, shape))
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
            raise InvalidArgument(f"model_options has {name!r}, which {spec.name} does not take; its options: {accepted}")
    resolved = {}
    for name, option in known.items():
        value = options.get(name, option.default)
        if value not in option.choices:
            raise InvalidArgument(
                f"model_options {name}={value!r} is not accepted by {spec.name}; accepted values: {', '.join(option.choices)}"
            )
        resolved[name] = value
    return resolved


def resolve_model(
    model: str, shape: Sequence[int], options: Mapping[str, str], model_names: Sequence[str]
) -> tuple[ModelSpec, tuple[int, ...], dict[str, str]]:
    spec = get_spec(model)
    if spec.name not in model_names:
        raise FailedPrecondition(f"model {spec.name!r} is in the catalog but this runner has no builder for it")
    return spec, resolve_shape(spec, shape), resolve_options(spec, options)


def resolve_device(requested: DeviceRef | None, devices: Sequence[Device]) -> Device:
    by_ref = {device.ref: device for device in devices}
    if requested is None:
        gpus = [d for d in devices if d.ref.kind is DeviceKind.GPU]
        return gpus[0] if gpus else by_ref[DeviceRef(DeviceKind.CPU, 0)]
    if requested not in by_ref:
        available = ", ".join(str(device.ref) for device in devices)
        raise FailedPrecondition(f"device {requested} is not available on this runner; available devices: {available}")
    return by_ref[requested]


def _in_range(field: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise InvalidArgument(f"{field} must be between {low} and {high}, got {value}")
    return value


def resolve(
    request: RunRequest,
    devices: Sequence[Device],
    supported_precisions: Callable[[Device], frozenset[Precision]],
    model_names: Sequence[str],
) -> RunConfig:
    """Validate `request` and fill in defaults; raises a RunnerError naming the field."""
    spec, input_shape, model_options = resolve_model(
        request.model, request.input_shape, request.model_options, model_names
    )
    if request.mode is None:
        raise InvalidArgument(f"mode must be set; accepted values: {_choices(Mode)}")
    batch_size = _in_range("batch_size", request.batch_size, 1, MAX_BATCH_SIZE)
    device = resolve_device(request.device, devices)
    precision = request.precision or DEFAULT_PRECISION
    supported = supported_precisions(device)
    if precision not in supported:
        names = ", ".join(p.value for p in Precision if p in supported)
        raise FailedPrecondition(
            f"precision {precision.value} is not supported on {device.ref} by this runner; supported there: {names}"
        )
    warmup = DEFAULT_WARMUP_STEPS if request.warmup_steps is None else request.warmup_steps
    measured = DEFAULT_MEASURED_STEPS if request.measured_steps is None else request.measured_steps
    return RunConfig(
        model=spec,
        mode=request.mode,
        batch_size=batch_size,
        input_shape=input_shape,
        precision=precision,
        device=device,
        warmup_steps=_in_range("warmup_steps", warmup, 0, MAX_WARMUP_STEPS),
        measured_steps=_in_range("measured_steps", measured, 1, MAX_MEASURED_STEPS),
        seed=request.seed,
        model_options=model_options,
    )
