"""What a model is, the same for every framework (its spec, heads, options and source), a model at one input shape
to build, and what building or comparing it reports: an inspection's and a parity reference's."""

from __future__ import annotations

from dataclasses import dataclass, field

from .choices import InputKind, Objective, Precision, Task


@dataclass(frozen=True)
class Head:
    """What a model's output means: how the loss is computed and over how many outputs."""

    objective: Objective
    outputs: int  # classes, vocabulary, or CTC alphabet with the blank


@dataclass(frozen=True)
class ModelOption:
    name: str
    choices: tuple[str, ...]

    @property
    def default(self) -> str:
        return self.choices[0]


HEAD_OPTION = "head"
BUILT_IN = "built-in"


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from: fwbench itself, or a plug-in folder (its declaration and builders)."""

    origin: str = BUILT_IN  # or how the runner was pointed at the folder: "--models-dir", "entry point NAME"...
    folder: str = ""  # the plug-in's folder; "" for a built-in, whose builders are the runner's own
    content_hash: str = ""  # "sha256:..." over the plug-in's files: which version of the user's model ran

    @property
    def built_in(self) -> bool:
        return not self.folder

    def __str__(self) -> str:
        return BUILT_IN if self.built_in else f"{self.folder} ({self.origin})"


@dataclass(frozen=True)
class ModelSpec:
    """What a model accepts, the same for every framework.

    Shapes are per sample, in `input_convention` (vision: channels first,
    CxHxW; text: seq; audio: samples); each runner converts to its own layout.
    A dimension whose minimum equals its maximum is fixed. `heads` lists the
    model's output heads, default first; more than one makes a "head" option.
    """

    name: str
    task: Task
    input_kind: InputKind
    input_convention: str
    default_input_shape: tuple[int, ...]
    min_input_shape: tuple[int, ...]
    max_input_shape: tuple[int, ...]
    heads: tuple[tuple[str, Head], ...]
    vocab_size: int = 0  # token ids are drawn below this (TOKENS inputs)
    description: str = ""
    source: ModelSource = ModelSource()
    generates: bool = False  # a decoder with a key-value cache: it runs Mode.GENERATE
    declared_options: tuple[ModelOption, ...] = ()  # the declaration's [[options]] (a size, a variant), beside "head"

    @property
    def variable_dims(self) -> tuple[int, ...]:
        return tuple(i for i, (low, high) in enumerate(zip(self.min_input_shape, self.max_input_shape)) if low != high)

    @property
    def options(self) -> tuple[ModelOption, ...]:
        heads = (ModelOption(HEAD_OPTION, tuple(name for name, _ in self.heads)),) if len(self.heads) > 1 else ()
        return heads + self.declared_options

    def head(self, options: dict[str, str]) -> Head:
        return dict(self.heads)[options.get(HEAD_OPTION, self.heads[0][0])]

    def describe_accepted_shapes(self) -> str:
        parts = []
        for name, default, low, high in zip(
            self.input_convention.split("x"), self.default_input_shape, self.min_input_shape, self.max_input_shape
        ):
            parts.append(f"{name}={default}" if low == high else f"{low}<={name}<={high}")
        default_shape = "x".join(map(str, self.default_input_shape))
        return f"{self.input_convention} with {', '.join(parts)} (default {default_shape})"


@dataclass(frozen=True)
class ModelConfig:
    """A model at one input shape with its options: what inspection and parity checks build."""

    model: ModelSpec
    input_shape: tuple[int, ...]
    model_options: dict[str, str]
    batch_size: int = 1
    seed: int = 0
    # A parity reference of a generating model: the precision its greedy tokens are generated in (its outputs are
    # compared in fp32 whatever it is).
    token_precision: Precision = Precision.FP32

    @property
    def head(self) -> Head:
        return self.model.head(self.model_options)


@dataclass(frozen=True)
class ModelReport:
    parameter_count: int
    forward_flops: int  # per sample
    flops_method: str
    output_shape: tuple[int, ...]  # per sample
    build_time_s: float


@dataclass(frozen=True)
class ReferenceRequest:
    """A parity reference as asked for: the model, and the reference's name in the runner's folder."""

    model: str
    name: str
    input_shape: tuple[int, ...] = ()
    model_options: dict[str, str] = field(default_factory=dict)
    batch_size: int = 0  # 0: the default, 2
    seed: int = 0
    precision: Precision | None = None  # a generating model's tokens; None: fp32


@dataclass(frozen=True)
class ReferenceReport:
    """What a backend found exporting or comparing a reference (the service adds the reference's name)."""

    output_shape: tuple[int, ...]
    compared_values: int = 0
    max_abs_diff: float = 0.0
    max_rel_diff: float = 0.0
    tolerance: float = 0.0
    matched: bool = False
    tokens_compared: int = 0  # a generating model's greedy tokens compared exactly (references.compared_tokens)
    first_token_divergence: int = -1  # the first position where they differ; -1: nowhere
