"""The contract's vocabulary as text: every enum's choices, derived from the generated descriptors, and
the rules for shapes and devices. The command line, sweep files and result tables all read it here, so
a value added to the .proto is a new choice everywhere with no table to edit. This is the one module besides the
wire's edge (run.wire, run.client) that reads the generated code: the enums' words are facts of the contract, and
the floor every other module stands on; everything above names an enum by its choice enum here (Mode, Phase, ...),
which carries the contract's descriptor, never by the generated one.

A proto enum's values share a prefix named by its zero value (MODE_UNSPECIFIED -> MODE_); the text
of a value is the rest, lower-cased (MODE_TRAIN -> "train"). The zero value means "the runner's
default" and is never a choice.
"""

from __future__ import annotations

import enum
import re

from fwbench.runner.v1 import runner_pb2 as pb
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper


class UnknownValue(ValueError):
    """Text that names no value of an enum; the message lists the accepted ones."""


def _prefix(enum_type: EnumTypeWrapper) -> str:
    return enum_type.DESCRIPTOR.values_by_number[0].name.removesuffix("UNSPECIFIED")


def what(enum_type: EnumTypeWrapper) -> str:
    """The enum's name as a reader says it: DeviceKind -> "device kind"."""
    return _prefix(enum_type).rstrip("_").replace("_", " ").lower()


def choices(enum_type: EnumTypeWrapper) -> tuple[str, ...]:
    """The text of every value but the zero one, in the .proto's order."""
    prefix = _prefix(enum_type)
    return tuple(v.name.removeprefix(prefix).lower() for v in enum_type.DESCRIPTOR.values if v.number != 0)


def to_text(enum_type: EnumTypeWrapper, number: int) -> str:
    """pb.Mode, 1 -> "train"; the zero value reads "unspecified"."""
    value = enum_type.DESCRIPTOR.values_by_number.get(number)
    if value is None:
        raise UnknownValue(
            f"{number} is not a {what(enum_type)} of this contract; accepted values: {', '.join(choices(enum_type))}"
        )
    return value.name.removeprefix(_prefix(enum_type)).lower()


def from_text(enum_type: EnumTypeWrapper, text: str) -> int:
    """pb.Mode, "train" -> 1; any other text raises UnknownValue naming the accepted values."""
    if not isinstance(text, str) or text not in choices(enum_type):
        raise UnknownValue(f"unknown {what(enum_type)} {text!r}; accepted values: {', '.join(choices(enum_type))}")
    return enum_type.DESCRIPTOR.values_by_name[_prefix(enum_type) + text.upper()].number


def numbers(enum_type: EnumTypeWrapper) -> tuple[int, ...]:
    """The wire's number of every value but the zero one, in the .proto's order."""
    return tuple(v.number for v in enum_type.DESCRIPTOR.values if v.number != 0)


def choice_enum(enum_type: EnumTypeWrapper) -> type[enum.Enum]:
    """A str enum of the choices (members named by their text), for typer options and sweep fields. It carries the
    contract's descriptor, so that what, choices, to_text and from_text take it as they take the generated enum."""
    choice = enum.Enum(enum_type.DESCRIPTOR.name, [(text, text) for text in choices(enum_type)], type=str)
    choice.DESCRIPTOR = enum_type.DESCRIPTOR
    return choice


Mode = choice_enum(pb.Mode)
Precision = choice_enum(pb.Precision)
Layout = choice_enum(pb.Layout)
Compilation = choice_enum(pb.Compilation)
Profile = choice_enum(pb.Profile)
Switch = choice_enum(pb.Switch)
Strategy = choice_enum(pb.Strategy)
Scenario = choice_enum(pb.Scenario)
DeviceKind = choice_enum(pb.DeviceKind)
Task = choice_enum(pb.Task)
Phase = choice_enum(pb.Phase)


# The wire carries shape dimensions and device indices as uint32.
MAX_UINT32 = 2**32 - 1
_SHAPE = re.compile(r"[1-9]\d*(x[1-9]\d*)*|[a-z]+=[1-9]\d*")
SHAPE_FORMS = (
    "positive integers joined by 'x', per sample, channels first (3x224x224, 161x400), or NAME=N (seq=128, "
    f"audio=16000); each at most {MAX_UINT32}"
)
_DEVICE = re.compile(r"cpu(:0)?|gpu(:\d+)?")
DEVICE_FORMS = f"cpu, gpu, or gpu:N (e.g. gpu:1), N at most {MAX_UINT32}"


# One entry of a --devices list: a kind and an explicit index (cpu:1 is a second CPU worker).
_LISTED_DEVICE = re.compile(r"(cpu|gpu):(\d+)")
DEVICES_FORMS = (
    "a comma-separated list of KIND:N of one kind, each once, e.g. gpu:0,gpu:1 or cpu:0,cpu:1 (several CPU devices "
    f"are CPU workers for PyTorch, logical CPU devices for TensorFlow); N at most {MAX_UINT32}"
)


def devices_problem(text: str) -> str | None:
    """Why `text` is not a devices list (DEVICES_FORMS); None where it is one."""
    entries = text.split(",")
    for entry in entries:
        match = _LISTED_DEVICE.fullmatch(entry)
        if not match or int(match[2]) > MAX_UINT32:
            return f"{entry!r} is not KIND:N"
    if len({e.split(":")[0] for e in entries}) > 1:
        return "it mixes CPU and GPU devices"
    repeated = next((e for i, e in enumerate(entries) if e in entries[:i]), None)
    if repeated:
        return f"it names {repeated} twice"
    return None


def is_shape(text: str) -> bool:
    return bool(_SHAPE.fullmatch(text)) and max(shape_dims(text)) <= MAX_UINT32


def is_device(text: str) -> bool:
    return bool(_DEVICE.fullmatch(text)) and int(indexed_device(text).partition(":")[2]) <= MAX_UINT32


def shape_dims(shape: str | None) -> list[int]:
    """seq=128 -> [128]; 3x224x224 -> [3, 224, 224]; the runner checks the convention against the model."""
    if not shape:
        return []
    return [int(shape.partition("=")[2])] if "=" in shape else [int(d) for d in shape.split("x")]


def shape_text(dims) -> str:
    """[3, 224, 224] -> "3x224x224", as results and tables write a shape."""
    return "x".join(map(str, dims))


def indexed_device(device: str) -> str:
    """'gpu' and 'cpu' name device 0: 'gpu' -> 'gpu:0'."""
    return device if ":" in device else f"{device}:0"


def device_kind_index(device: str) -> tuple[int, int]:
    """ "gpu:1" -> (DEVICE_KIND_GPU, 1)."""
    kind, _, index = indexed_device(device).partition(":")
    return from_text(DeviceKind, kind), int(index)


def serving_text(serving) -> str:
    """A run's load (a resolved Serving) as results name it: "" for back-to-back batches, "single_stream",
    "offline", "server 200 qps" or "server 200 qps, batch timeout 5 ms"."""
    if not serving.scenario:
        return ""
    text = to_text(Scenario, serving.scenario)
    if text == Scenario.server:
        text += f" {serving.target_qps:g} qps"
        if serving.batch_timeout_ms:
            text += f", batch timeout {serving.batch_timeout_ms:g} ms"
    return text


def device_text(ref) -> str:
    """A message with a device kind and index (Device, DeviceSelector) as "gpu:1"."""
    return f"{to_text(DeviceKind, ref.kind)}:{ref.index}"
