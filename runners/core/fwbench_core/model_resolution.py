"""A request's model resolved against the catalog: its input shape and options checked and defaulted, for a run, an
inspection or a parity reference."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .catalog import Catalog
from .choices import Precision
from .errors import InvalidArgument, did_you_mean, echoed
from .limits import MAX_BATCH_SIZE, MAX_REFERENCE_BATCH_SIZE, MAX_SEED, in_range
from .models import ModelConfig, ModelSpec, ReferenceRequest

# A parity reference holds a batch's input and output: a few samples show the same network.
DEFAULT_REFERENCE_BATCH_SIZE = 2

# The precisions a reference's tokens are generated in: every runner checks references on the CPU, where these run.
REFERENCE_PRECISIONS = (Precision.FP32, Precision.AMP_BF16)


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
        spec, input_shape, model_options, in_range("batch_size", batch_size, 1, MAX_BATCH_SIZE), resolve_seed(seed)
    )


def resolve_seed(seed: int) -> int:
    return in_range("seed", seed, 0, MAX_SEED)


def resolve_reference(request: ReferenceRequest, catalog: Catalog) -> ModelConfig:
    """The model a parity reference is exported or compared for; raises a RunnerError naming the field."""
    spec, input_shape, model_options = resolve_model(request.model, request.input_shape, request.model_options, catalog)
    batch_size = request.batch_size or DEFAULT_REFERENCE_BATCH_SIZE
    if not 1 <= batch_size <= MAX_REFERENCE_BATCH_SIZE:
        raise InvalidArgument(
            f"batch_size must be between 1 and {MAX_REFERENCE_BATCH_SIZE} for a reference "
            f"(0 means {DEFAULT_REFERENCE_BATCH_SIZE}), got {batch_size}"
        )
    precision = request.precision or Precision.FP32
    if precision not in REFERENCE_PRECISIONS:
        accepted = ", ".join(p.value for p in REFERENCE_PRECISIONS)
        raise InvalidArgument(
            f"precision {precision.value} is not accepted for a reference, whose tokens are generated on the CPU; "
            f"accepted values: {accepted}"
        )
    if precision is not Precision.FP32 and not spec.generates:
        raise InvalidArgument(
            f"precision {precision.value} is the precision a generating model's reference tokens are generated in, "
            f"and {spec.name} does not generate: leave precision unset (fp32)"
        )
    return ModelConfig(spec, input_shape, model_options, batch_size, resolve_seed(request.seed), precision)
