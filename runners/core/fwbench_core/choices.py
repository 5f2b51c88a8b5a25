"""The choices a run names: its mode, precision, layout, compilation, profile, strategy, scenario and the rest, each
an enum whose values are the words users type. The wire enums live in the .proto; `wire.py` converts these by member
name, so a value added on one side and not the other fails its test instead of drifting.
"""

from __future__ import annotations

import enum


class Mode(enum.Enum):
    TRAIN = "train"
    INFER = "infer"
    GENERATE = "generate"  # prefill a prompt, then decode new tokens one at a time from a key-value cache


class Precision(enum.Enum):
    FP32 = "fp32"
    TF32 = "tf32"
    AMP_FP16 = "amp_fp16"
    AMP_BF16 = "amp_bf16"


class Layout(enum.Enum):
    CHANNELS_FIRST = "channels_first"
    CHANNELS_LAST = "channels_last"


class Compilation(enum.Enum):
    EAGER = "eager"
    GRAPH = "graph"
    XLA = "xla"
    TORCH_COMPILE = "torch_compile"
    TORCHSCRIPT = "torchscript"
    ONNXRUNTIME = "onnxruntime"


class Profile(enum.Enum):
    """How the settings a request leaves unset are chosen: the same on every runner, or each framework's own (BEST:
    the client's search named the fastest settings; the rest as NATIVE)."""

    EQUAL = "equal"
    NATIVE = "native"
    BEST = "best"

    @property
    def framework_defaults(self) -> bool:
        return self is not Profile.EQUAL


class Switch(enum.Enum):
    OFF = "off"
    ON = "on"


class Tf32(enum.Enum):
    """Where float32 math may run as TF32 on a GPU's tensor cores."""

    OFF = "off"
    ON = "on"
    CONVOLUTIONS = "convolutions only"


class DeviceKind(enum.Enum):
    CPU = "cpu"
    GPU = "gpu"


class Strategy(enum.Enum):
    SINGLE = "single"  # one device, one process
    DP = "dp"  # torch.nn.DataParallel: one process, two or more GPUs
    DDP = "ddp"  # torch DistributedDataParallel: one process per device
    MIRRORED = "mirrored"  # one process, the runner's devices, weights replicated:
    # tf MirroredStrategy; JAX: the batch sharded over a mesh
    MULTI_WORKER_MIRRORED = "multi_worker_mirrored"  # tf MultiWorkerMirroredStrategy: one process per runner


class Scenario(enum.Enum):
    """How inference queries reach the model (MLPerf Inference LoadGen's scenarios)."""

    SINGLE_STREAM = "single_stream"  # one query of batch_size samples at a time, each when the previous completes
    SERVER = "server"  # one-sample queries arriving as a seeded Poisson process, dynamically batched
    OFFLINE = "offline"  # every query at once, in batches of batch_size


class Task(enum.Enum):
    VISION = "vision"
    NLP = "nlp"
    SPEECH = "speech"


class InputKind(enum.Enum):
    IMAGE = "image"  # float pixels, CxHxW
    TOKENS = "tokens"  # integer token ids, one sequence
    AUDIO = "audio"  # float raw waveform samples
    SPECTROGRAM = "spectrogram"  # float FxT spectrogram frames


class Objective(enum.Enum):
    CLASSIFY = "classify"  # logits (batch, classes), cross-entropy against one class per sample
    TOKEN_CE = "token_ce"  # logits (batch, seq, vocab), cross-entropy at every position
    CTC = "ctc"  # logits (batch, frames, alphabet incl. blank at 0), CTC against random transcripts


class Phase(enum.Enum):
    BUILD = "build"
    WARMUP = "warmup"
    MEASURE = "measure"
    DONE = "done"
    QUEUED = "queued"
