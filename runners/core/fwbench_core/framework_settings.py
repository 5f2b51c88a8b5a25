"""What a request sets of the framework (precision, compilation, layout, cuDNN autotuning, TF32, threads), each
defaulted by the profile and checked against the device's capabilities and the compilation's limits."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .choices import Compilation, InputKind, Layout, Mode, Precision, Profile, Strategy, Switch, Tf32
from .devices import Capabilities, CompilationLimits, Device
from .errors import FailedPrecondition, InvalidArgument
from .limits import MAX_THREADS, in_range
from .models import ModelSpec
from .runs import RunRequest

DEFAULT_PRECISION = Precision.FP32
DEFAULT_LAYOUT = Layout.CHANNELS_LAST


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


def resolve_threads(field: str, requested: int, configured: int, adjustable: bool, framework: str) -> int:
    if requested in (0, configured):
        return configured
    if adjustable:
        return in_range(field, requested, 1, MAX_THREADS)
    flag = "--" + field.replace("_", "-")
    raise FailedPrecondition(
        f"{field} {requested} differs from this {framework} runner's {configured}, which it fixes at start-up; "
        f"start the runner with {flag} {requested}"
    )


def resolve_tf32(precision: Precision, profile: Profile, can: Capabilities) -> Tf32 | None:
    """TF32 asked for, or strict float32 (the equal profile), or the framework's own default (native, best);
    None on a device without TF32."""
    if Precision.TF32 not in can.precisions:
        return None
    if precision is Precision.TF32:
        return Tf32.ON
    return can.native_tf32 if profile.framework_defaults else Tf32.OFF


@dataclass(frozen=True)
class FrameworkSettings:
    """What a request sets of the framework: each checked against the device's capabilities and the compilation."""

    precision: Precision
    compilation: Compilation
    layout: Layout | None
    cudnn_autotune: Switch


def resolve_framework_settings(
    request: RunRequest,
    mode: Mode,
    spec: ModelSpec,
    strategy: Strategy,
    can: Capabilities,
    device: Device,
    profile: Profile,
    framework: str,
) -> FrameworkSettings:
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
    return FrameworkSettings(precision, compilation, layout, autotune)
