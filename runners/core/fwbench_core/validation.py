"""Turning a run request into a fully resolved, valid run configuration: its model (model_resolution), placement
(placement), framework settings (framework_settings), steps and measuring window (measurement_settings), then the
bounds, keys and serving."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .catalog import Catalog
from .choices import Mode, Profile, Strategy
from .devices import Capabilities, Device
from .errors import InvalidArgument, echoed
from .framework_settings import resolve_framework_settings, resolve_tf32, resolve_threads
from .generation import refuse_unsupported, resolve_new_tokens
from .limits import (
    MAX_BATCH_SIZE,
    MAX_DISTRIBUTED_TIMEOUT_S,
    MAX_MEASURED_STEPS,
    MAX_REUSE_KEY_LENGTH,
    MAX_SEED,
    MAX_WARMUP_STEPS,
    in_range,
)
from .measurement_settings import resolve_steps, resolve_window
from .model_resolution import resolve_model, resolve_seed
from .placement import resolve_cluster, resolve_devices, resolve_strategy
from .runs import RunConfig, RunRequest
from .serving import resolve_serving

# A distributed run's ranks wait for each other (rendezvous, collectives) at most this long by default.
DEFAULT_DISTRIBUTED_TIMEOUT_S = 120.0


def _choices(enum_type) -> str:
    return ", ".join(member.value for member in enum_type)


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
    settings = resolve_framework_settings(request, mode, spec, strategy, can, device, profile, framework)
    steps = resolve_steps(request)
    window = resolve_window(request, distributed)
    new_tokens = resolve_new_tokens(request, mode, spec, input_shape, catalog)
    refuse_unsupported(mode, strategy)
    return RunConfig(
        reuse_key=resolve_key("reuse_key", request.reuse_key),
        end_reuse=request.end_reuse,
        continue_reuse=_continue_reuse(request),
        fresh_warmup_steps=_fresh_warmup_steps(request),
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
        seed=resolve_seed(request.seed),
        input_seed=(
            request.seed if request.input_seed is None else in_range("input_seed", request.input_seed, 0, MAX_SEED)
        ),
        model_options=model_options,
        layout=settings.layout,
        compilation=settings.compilation,
        cudnn_autotune=settings.cudnn_autotune,
        tf32=resolve_tf32(settings.precision, profile, can),
        intra_op_threads=resolve_threads(
            "intra_op_threads",
            request.intra_op_threads,
            can.intra_op_threads,
            can.intra_op_threads_adjustable,
            framework,
        ),
        inter_op_threads=resolve_threads(
            "inter_op_threads", request.inter_op_threads, can.inter_op_threads, False, framework
        ),
        warmup_until_stable=steps.stable,
        min_measure_s=window.min_measure_s,
        power_sample_rate_hz=window.power_sample_rate_hz,
        idle_baseline_s=window.idle_baseline_s,
        strategy=strategy,
        devices=run_devices if distributed else (),
        cluster=cluster,
        distributed_timeout_s=timeout_s if distributed else 0.0,
        serving=resolve_serving(request, mode, batch_size, strategy, window.min_measure_s),
        new_tokens=new_tokens,
    )


def _fresh_warmup_steps(request: RunRequest) -> int | None:
    if request.fresh_warmup_steps is None:
        return None
    if not request.continue_reuse:
        raise InvalidArgument(
            "fresh_warmup_steps is the warm-up of a window (continue_reuse) that finds nothing to continue: set "
            "continue_reuse too, or warmup_steps for a run of its own"
        )
    return in_range("fresh_warmup_steps", request.fresh_warmup_steps, 0, MAX_WARMUP_STEPS)


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


def resolve_key(field_name: str, key: str) -> str:
    if len(key) > MAX_REUSE_KEY_LENGTH or not all(" " <= character <= "~" for character in key):
        empty = "builds every run afresh" if field_name == "reuse_key" else "runs as the runner's run isolation says"
        raise InvalidArgument(
            f"{field_name} {echoed(key)} is not accepted: printable ASCII (space to '~'), at most "
            f"{MAX_REUSE_KEY_LENGTH} characters; empty {empty}"
        )
    return key
