"""Plain data the core works with: choices, device references, model specs and run settings.

The wire enums live in the .proto; `wire.py` converts these by member name, so a
value added on one side and not the other fails its test instead of drifting.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Mode(enum.Enum):
    TRAIN = "train"
    INFER = "infer"


class Precision(enum.Enum):
    FP32 = "fp32"
    TF32 = "tf32"
    AMP_FP16 = "amp_fp16"
    AMP_BF16 = "amp_bf16"


class DeviceKind(enum.Enum):
    CPU = "cpu"
    GPU = "gpu"


class Task(enum.Enum):
    VISION = "vision"
    NLP = "nlp"
    SPEECH = "speech"


class Phase(enum.Enum):
    BUILD = "build"
    WARMUP = "warmup"
    MEASURE = "measure"
    DONE = "done"
    QUEUED = "queued"


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
class RunnerInfo:
    framework: str
    framework_version: str
    python_version: str
    devices: tuple[Device, ...]
    cuda_version: str = ""
    cudnn_version: str = ""
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelSpec:
    """What a model accepts, the same for every framework.

    Shapes are per sample, in `input_convention` (vision: channels first,
    CxHxW); each runner converts to its own layout. Dimensions listed in
    `fixed_dims` must equal the default; the others range from the minimum to
    `max_dim`.
    """

    name: str
    task: Task
    input_convention: str
    default_input_shape: tuple[int, ...]
    min_input_shape: tuple[int, ...]
    fixed_dims: tuple[int, ...] = ()
    max_dim: int = 4096
    num_classes: int = 1000

    def describe_accepted_shapes(self) -> str:
        dims = self.input_convention.split("x")
        parts = []
        for i, name in enumerate(dims):
            if i in self.fixed_dims:
                parts.append(f"{name}={self.default_input_shape[i]}")
            else:
                parts.append(f"{self.min_input_shape[i]}<={name}<={self.max_dim}")
        default = "x".join(map(str, self.default_input_shape))
        return f"{self.input_convention} with {', '.join(parts)} (default {default})"


@dataclass(frozen=True)
class RunRequest:
    """A run as asked for; None means 'the runner's default'."""

    model: str
    mode: Mode | None
    batch_size: int
    input_shape: tuple[int, ...] = ()
    precision: Precision | None = None
    device: DeviceRef | None = None
    warmup_steps: int | None = None
    measured_steps: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class RunConfig:
    """A run with every default resolved and every value validated."""

    model: ModelSpec
    mode: Mode
    batch_size: int
    input_shape: tuple[int, ...]
    precision: Precision
    device: Device
    warmup_steps: int
    measured_steps: int
    seed: int
