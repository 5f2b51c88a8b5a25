"""A runner's devices and what it honours on each: device references, the runner's description, the settings it
fixes at start-up, and the capabilities a request is checked against (the choices they name are in choices.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .choices import Compilation, DeviceKind, Layout, Mode, Precision, Strategy, Switch, Tf32


@dataclass(frozen=True)
class DeviceRef:
    kind: DeviceKind
    index: int = 0

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.index}"


@dataclass(frozen=True)
class Device:
    ref: DeviceRef
    name: str
    memory_bytes: int = 0
    driver_version: str = ""


@dataclass(frozen=True)
class RunnerSettings:
    """Process-wide settings a runner fixes at start-up (TensorFlow cannot change them later)."""

    intra_op_threads: int
    inter_op_threads: int
    cudnn_autotune: Switch = Switch.OFF


@dataclass(frozen=True)
class CompilationLimits:
    """What a run under one compilation may use, beyond what its device honours (Capabilities)."""

    modes: frozenset[Mode] = frozenset(Mode)
    precisions: frozenset[Precision] = frozenset(Precision)
    layouts: frozenset[Layout] = frozenset(Layout)
    strategies: frozenset[Strategy] = frozenset(Strategy)


@dataclass(frozen=True)
class Capabilities:
    """What a runner can honour exactly on one device; anything else is refused, never approximated."""

    precisions: frozenset[Precision]
    layouts: frozenset[Layout]
    compilations: frozenset[Compilation]
    default_compilation: Compilation  # the framework's own, under every profile
    cudnn_autotune: frozenset[Switch]
    intra_op_threads: int
    inter_op_threads: int
    # PyTorch can change its intra-op thread count between runs; TensorFlow cannot.
    intra_op_threads_adjustable: bool = False
    # How a run may spread over several devices or runners on this kind of device, and the strategy a request
    # that names none gets on several devices of one runner, and across runners.
    strategies: frozenset[Strategy] = frozenset({Strategy.SINGLE})
    parallel_strategy: Strategy = Strategy.SINGLE
    multi_node_strategy: Strategy = Strategy.SINGLE
    # Compilations that run less than the device does (e.g. inference only); the others have no limits.
    compilation_limits: dict[Compilation, CompilationLimits] = field(default_factory=dict)
    # The framework's out-of-the-box choices on this device: the NATIVE profile's. TF32 and cuDNN autotuning
    # matter on GPUs only (a device without TF32 has no Precision.TF32 among its precisions).
    native_layout: Layout = Layout.CHANNELS_LAST
    native_tf32: Tf32 = Tf32.ON
    native_cudnn_autotune: Switch = Switch.OFF


@dataclass(frozen=True)
class RunnerInfo:
    framework: str
    framework_version: str
    python_version: str
    devices: tuple[Device, ...]
    cuda_version: str = ""
    cudnn_version: str = ""
    options: dict[str, str] = field(default_factory=dict)
