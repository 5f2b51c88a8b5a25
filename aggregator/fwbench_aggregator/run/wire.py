"""The aggregator's edge with the contract (protos/fwbench/runner/v1/runner.proto): every request is built and varied
here, and every message that crosses the wire is named here, so that no module above imports the generated code
(tests/test_aggregator_layers.py holds them to it; the gRPC client, run.client, and base.vocabulary, which reads the
enums' words from the descriptors, are the others that do).

A request is the contract's RunRequest, written from a RunSpec (to_request) and varied only by the functions here; the
modules above hold it and hand it on. A reply (a ResolvedConfig, a Summary, a runner's description, ...) is read here
into run.replies' frozen values (resolved, summary, ...), its enums as their text, so that the modules above read
plain fields."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields

from fwbench.runner.v1 import runner_pb2 as pb
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from ..base.vocabulary import (
    Compilation,
    DeviceKind,
    Layout,
    Mode,
    Phase,
    Precision,
    Profile,
    Scenario,
    Strategy,
    Switch,
    Task,
    device_kind_index,
    from_text,
    shape_dims,
    to_text,
)
from ..plan.design import MIN_WINDOW_STEPS, REFILL_STEPS, BlockDesign
from ..plan.settings import SETTINGS
from ..plan.spec import RunSpec
from . import replies

# The requests that cross the wire, by the aggregator's names for them; the replies are read into run.replies.
Request = pb.RunRequest
ModelInfo = pb.ModelInfo
ModelReport = pb.ModelReport
Cluster = pb.Cluster

_CHOICES = {
    choice.DESCRIPTOR.full_name: choice
    for choice in (Mode, Precision, Layout, Compilation, Profile, Switch, Strategy, Scenario, DeviceKind, Task, Phase)
}


def to_request(spec: RunSpec) -> Request:
    """The request for a runner; every node of a job across runners gets it with its own cluster (for_node)."""
    request = pb.RunRequest(
        model=spec.model,
        mode=from_text(Mode, spec.mode.value),
        batch_size=spec.batch_size,
        input_shape=shape_dims(spec.shape),
        model_options=dict(spec.model_options),
        precision=from_text(Precision, spec.precision.value),
        intra_op_threads=spec.startup.intra_op_threads,
        inter_op_threads=spec.startup.inter_op_threads,
        reuse_key=spec.reuse_key,
        end_reuse=spec.end_reuse,
        continue_reuse=spec.continue_reuse,
        process_block=spec.process_block,
    )
    if spec.layout:
        request.layout = from_text(Layout, spec.layout.value)
    if spec.profile:
        request.profile = from_text(Profile, spec.profile.value)
    if spec.cudnn_autotune:
        request.cudnn_autotune = from_text(Switch, spec.cudnn_autotune)
    elif not spec.profile or spec.profile.value == "equal":
        # The native and best profiles leave autotuning to the runner: its framework's default where it can.
        request.cudnn_autotune = from_text(Switch, spec.startup.cudnn_autotune)
    if spec.compilation:
        request.compilation = from_text(Compilation, spec.compilation.value)
    if spec.device:
        request.device.kind, request.device.index = device_kind_index(spec.device)
    # Fewer warm-up steps than the stability window are a fixed count: there is nothing to judge stability on.
    if spec.warmup_until_cv and spec.warmup >= spec.stable_window:
        request.warmup_until_stable.cv_threshold = spec.warmup_until_cv
        request.warmup_until_stable.window = spec.stable_window
    for setting in SETTINGS:
        applies = not setting.modes or spec.mode.value in setting.modes
        if setting.request and applies and getattr(spec, setting.name) is not None:
            setattr(request, setting.request, getattr(spec, setting.name))
    if spec.power_rate_hz is not None:
        request.power_sample_rate_hz = spec.power_rate_hz
    if spec.idle_baseline_s is not None:
        request.idle_baseline_s = spec.idle_baseline_s
    if spec.strategy:
        request.strategy = from_text(Strategy, spec.strategy.value)
    for device in spec.devices.split(",") if spec.devices else ():
        kind, index = device_kind_index(device)
        request.devices.add(kind=kind, index=index)
    if spec.distributed_timeout_s is not None:
        request.distributed_timeout_s = spec.distributed_timeout_s
    if spec.scenario:
        request.serving.scenario = from_text(Scenario, spec.scenario.value)
        request.serving.target_qps = spec.target_qps or 0.0
        request.serving.query_count = spec.query_count
        request.serving.batch_timeout_ms = spec.batch_timeout_ms or 0.0
        request.serving.arrival_seed = spec.arrival_seed
    return request


def _copy(request: Request) -> Request:
    variant = pb.RunRequest()
    variant.CopyFrom(request)
    return variant


def with_setting(request: Request, field: str, value: int) -> Request:
    """A copy of `request` with one field set: a variant to ask a runner about."""
    variant = _copy(request)
    setattr(variant, field, value)
    return variant


def window(
    request: Request, design: BlockDesign, block: str, last: bool, fresh_warmup_steps: int | None = None
) -> Request:
    """One window of `design`'s process block `block` for a runner whose comparison asks `request`: its build kept
    and continued under the block's name, in the block's worker process, freed with the process after the runner's
    `last` window. A window that continues nothing (the block's first) warms its fresh build up until stable (the
    runner's rule), or, given `fresh_warmup_steps` (analyse.warmup), exactly that many steps."""
    variant = _copy(request)
    variant.ClearField("warmup_until_stable")
    variant.warmup_steps = REFILL_STEPS
    variant.measured_steps = MIN_WINDOW_STEPS
    variant.min_measure_s = design.window_s
    variant.reuse_key = block
    variant.continue_reuse = True
    if fresh_warmup_steps is not None:
        variant.fresh_warmup_steps = fresh_warmup_steps
    variant.process_block = block
    variant.end_reuse = last
    return variant


def clusters(endpoints: Sequence[str]) -> list[Cluster]:
    """Each node's place in a job across runners whose rendezvous endpoints are `endpoints` (one per node)."""
    return [pb.Cluster(node_rank=i, node_count=len(endpoints), endpoints=endpoints) for i in range(len(endpoints))]


def for_node(request: Request, cluster: Cluster | None) -> Request:
    """`request` for one node of a job (None: a runner on its own, the request itself)."""
    if cluster is None:
        return request
    node = _copy(request)
    node.cluster.CopyFrom(cluster)
    return node


def reference_request(model: str, options: Mapping[str, str], name: str, precision: str = "") -> pb.ReferenceRequest:
    """The request that exports (or compares with) the reference `name` of `model` under `options`, a generating
    model's tokens in `precision` ("": fp32)."""
    request = pb.ReferenceRequest(model=model, model_options=options, name=name)
    if precision:
        request.precision = from_text(Precision, precision)
    return request


def _value(message: Message, name: str):
    """One field of `message` as run.replies holds it: None where the message may leave it unset and does, an
    enum its text ("" for the zero value: the runner's default), a repeated field a tuple, a map a dict."""
    described = message.DESCRIPTOR.fields_by_name[name]
    value = getattr(message, name)
    if described.message_type is not None and described.message_type.GetOptions().map_entry:
        return dict(value)
    choice = _CHOICES.get(described.enum_type.full_name) if described.enum_type else None
    if described.is_repeated:
        return tuple(to_text(choice, v) for v in value) if choice else tuple(value)
    if described.has_presence and not message.HasField(name):
        return None
    if choice:
        return to_text(choice, value) if value else ""
    return value


def _read(kind: type, message: Message, **given):
    """A `kind` of run.replies from `message`'s fields of the same names; `given`, the fields read otherwise."""
    names = message.DESCRIPTOR.fields_by_name
    return kind(
        **given, **{f.name: _value(message, f.name) for f in fields(kind) if f.name not in given and f.name in names}
    )


def _record(message: Message) -> dict:
    return MessageToDict(message, preserving_proto_field_name=True)


def device(message: pb.Device) -> replies.Device:
    return _read(replies.Device, message)


def description(message: pb.DescribeResponse) -> replies.RunnerDescription:
    return _read(
        replies.RunnerDescription,
        message,
        devices=tuple(device(d) for d in message.devices),
        plugins=tuple(_read(replies.Plugin, p) for p in message.plugins),
        record=_record(message),
    )


def resolved(message: pb.ResolvedConfig) -> replies.Resolved:
    return _read(
        replies.Resolved,
        message,
        device=device(message.device),
        devices=tuple(device(d) for d in message.devices),
        node_count=message.cluster.node_count if message.HasField("cluster") else None,
        serving=_read(replies.Load, message.serving),
        settings={setting.name: _value(message, setting.request) for setting in SETTINGS if setting.request},
        record=_record(message),
    )


def summary(message: pb.Summary) -> replies.Summary:
    return _read(
        replies.Summary,
        message,
        energy=_read(replies.Energy, message.energy) if message.HasField("energy") else None,
        device_before=_read(replies.DeviceState, message.device_before),
        device_after=_read(replies.DeviceState, message.device_after),
        serving=_read(replies.Serving, message.serving) if message.HasField("serving") else None,
        generation=_read(replies.Generation, message.generation) if message.HasField("generation") else None,
    )


def step(message: pb.StepTiming) -> replies.StepTiming:
    return _read(replies.StepTiming, message)


def power_sample(message: pb.PowerSample) -> replies.PowerSample:
    return _read(replies.PowerSample, message)


def query_latencies(message: pb.QueryLatencies) -> replies.QueryLatencies:
    return _read(replies.QueryLatencies, message)


def progress(message: pb.Progress) -> replies.Progress:
    return _read(replies.Progress, message)
