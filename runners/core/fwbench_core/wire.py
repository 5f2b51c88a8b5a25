"""Conversions between the core's plain data and the fwbench.runner.v1 messages.

Enums convert by member name (Mode.TRAIN <-> MODE_TRAIN), so the mapping has
no table to keep in step with the .proto.
"""

from __future__ import annotations

import enum
from dataclasses import fields
from typing import Any, TypeVar

from fwbench.runner.v1 import runner_pb2 as pb

from . import PROTOCOL, RUNNER_VERSION
from .choices import Compilation, DeviceKind, Layout, Mode, Phase, Precision, Profile, Scenario, Strategy, Switch, Task
from .devices import Device, DeviceRef, RunnerInfo
from .errors import InvalidArgument
from .models import ModelConfig, ModelReport, ModelSpec, ReferenceReport, ReferenceRequest
from .plugins import PluginReport
from .runs import Cluster, RunConfig, RunRequest, Serving, WarmupUntilStable
from .sysinfo import manifest_options

E = TypeVar("E", bound=enum.Enum)

# Core enum -> (proto enum wrapper, prefix of its value names).
_PROTO_ENUMS = {
    Mode: (pb.Mode, "MODE"),
    Precision: (pb.Precision, "PRECISION"),
    DeviceKind: (pb.DeviceKind, "DEVICE_KIND"),
    Task: (pb.Task, "TASK"),
    Phase: (pb.Phase, "PHASE"),
    Layout: (pb.Layout, "LAYOUT"),
    Compilation: (pb.Compilation, "COMPILATION"),
    Switch: (pb.Switch, "SWITCH"),
    Strategy: (pb.Strategy, "STRATEGY"),
    Profile: (pb.Profile, "PROFILE"),
    Scenario: (pb.Scenario, "SCENARIO"),
}


def enum_to_wire(member: enum.Enum) -> int:
    wrapper, prefix = _PROTO_ENUMS[type(member)]
    return wrapper.Value(f"{prefix}_{member.name}")


def enum_from_wire(enum_type: type[E], value: int, field: str) -> E | None:
    """The core member for a wire value; None for UNSPECIFIED; InvalidArgument for unknown numbers."""
    wrapper, prefix = _PROTO_ENUMS[enum_type]
    accepted = ", ".join(m.value for m in enum_type)
    try:
        name = wrapper.Name(value)
    except ValueError:
        raise InvalidArgument(f"{field} has unknown value {value}; accepted values: {accepted}") from None
    if name == f"{prefix}_UNSPECIFIED":
        return None
    return enum_type[name[len(prefix) + 1 :]]


def _stable_from_wire(request: pb.RunRequest) -> WarmupUntilStable | None:
    if not request.HasField("warmup_until_stable"):
        return None
    rule = request.warmup_until_stable
    return WarmupUntilStable(rule.cv_threshold, rule.window or WarmupUntilStable.window)


def _joined(values: frozenset) -> str:
    """Enum members in their declaration order: "fp32,amp_bf16"."""
    return ",".join(m.value for m in type(next(iter(values))) if m in values)


def _capabilities_as_options(service_info: RunnerInfo, capabilities) -> dict[str, str]:
    """Each device's settings, for the manifest: "cpu:0.precisions": "fp32,amp_bf16", ..., and what a compilation
    with limits runs there: "cpu:0.onnxruntime.modes": "infer", ..."""
    gpus = sum(device.ref.kind is DeviceKind.GPU for device in service_info.devices)
    options = {**service_info.options, **manifest_options(gpus)}
    for device in service_info.devices:
        can = capabilities(device)
        for field, values in (
            ("precisions", can.precisions),
            ("layouts", can.layouts),
            ("compilations", can.compilations),
            ("cudnn_autotune", can.cudnn_autotune),
            ("strategies", can.strategies),
        ):
            options[f"{device.ref}.{field}"] = _joined(values)
        options[f"{device.ref}.default_compilation"] = can.default_compilation.value
        for compilation, limits in can.compilation_limits.items():
            for field, values in (
                ("modes", limits.modes),
                ("precisions", limits.precisions),
                ("layouts", limits.layouts),
                ("strategies", limits.strategies),
            ):
                options[f"{device.ref}.{compilation.value}.{field}"] = _joined(values)
        options["intra_op_threads"] = str(can.intra_op_threads)
        options["inter_op_threads"] = str(can.inter_op_threads)
    return options


def device_to_wire(device: Device) -> pb.Device:
    return pb.Device(
        kind=enum_to_wire(device.ref.kind),
        index=device.ref.index,
        name=device.name,
        memory_bytes=device.memory_bytes,
        driver_version=device.driver_version,
    )


def plugin_to_wire(report: PluginReport) -> pb.ModelPlugin:
    return pb.ModelPlugin(
        folder=report.folder,
        origin=report.origin,
        models=report.models,
        content_hash=report.content_hash,
        error=report.error,
    )


def describe_to_wire(
    info: RunnerInfo, precisions: list[Precision], capabilities, plugins: tuple[PluginReport, ...] = ()
) -> pb.DescribeResponse:
    return pb.DescribeResponse(
        framework=info.framework,
        framework_version=info.framework_version,
        python_version=info.python_version,
        cuda_version=info.cuda_version,
        cudnn_version=info.cudnn_version,
        devices=[device_to_wire(d) for d in info.devices],
        precisions=[enum_to_wire(p) for p in precisions],
        options=_capabilities_as_options(info, capabilities),
        runner_version=RUNNER_VERSION,
        protocol=PROTOCOL,
        plugins=[plugin_to_wire(report) for report in plugins],
    )


def model_to_wire(spec: ModelSpec) -> pb.ModelInfo:
    return pb.ModelInfo(
        name=spec.name,
        task=enum_to_wire(spec.task),
        default_input_shape=spec.default_input_shape,
        min_input_shape=spec.min_input_shape,
        input_convention=spec.input_convention,
        max_input_shape=spec.max_input_shape,
        variable_dims=spec.variable_dims,
        options=[pb.ModelOption(name=o.name, choices=o.choices, default=o.default) for o in spec.options],
        description=spec.description,
        source_folder=spec.source.folder,
        source_origin=spec.source.origin,
        content_hash=spec.source.content_hash,
        generates=spec.generates,
    )


def model_report_to_wire(config: ModelConfig, report: ModelReport) -> pb.ModelReport:
    return pb.ModelReport(
        model=config.model.name,
        input_shape=config.input_shape,
        parameter_count=report.parameter_count,
        forward_flops=report.forward_flops,
        flops_method=report.flops_method,
        output_shape=report.output_shape,
        build_time_s=report.build_time_s,
        model_options=config.model_options,
    )


def reference_request_from_wire(request: pb.ReferenceRequest) -> ReferenceRequest:
    return ReferenceRequest(
        model=request.model,
        name=request.name,
        input_shape=tuple(request.input_shape),
        model_options=dict(request.model_options),
        batch_size=request.batch_size,
        seed=request.seed,
        precision=enum_from_wire(Precision, request.precision, "precision"),
    )


def reference_report_to_wire(name: str, report: ReferenceReport) -> pb.ReferenceReport:
    return pb.ReferenceReport(
        name=name,
        output_shape=report.output_shape,
        compared_values=report.compared_values,
        max_abs_diff=report.max_abs_diff,
        max_rel_diff=report.max_rel_diff,
        tolerance=report.tolerance,
        matched=report.matched,
        tokens_compared=report.tokens_compared,
        first_token_divergence=report.first_token_divergence,
    )


def _devices_from_wire(request: pb.RunRequest) -> tuple[DeviceRef, ...]:
    refs = []
    for number, selector in enumerate(request.devices):
        kind = enum_from_wire(DeviceKind, selector.kind, f"devices[{number}].kind")
        if kind is None:
            raise InvalidArgument(f"devices[{number}].kind must be set; accepted values: cpu, gpu")
        refs.append(DeviceRef(kind, selector.index))
    return tuple(refs)


def _cluster_from_wire(request: pb.RunRequest) -> Cluster | None:
    if not request.HasField("cluster"):
        return None
    c = request.cluster
    return Cluster(node_rank=c.node_rank, node_count=c.node_count, endpoints=tuple(c.endpoints))


def cluster_to_wire(cluster: Cluster) -> pb.Cluster:
    return pb.Cluster(node_rank=cluster.node_rank, node_count=cluster.node_count, endpoints=cluster.endpoints)


def _serving_from_wire(request: pb.RunRequest) -> Serving | None:
    if not request.HasField("serving"):
        return None
    s = request.serving
    return Serving(
        scenario=enum_from_wire(Scenario, s.scenario, "serving.scenario"),
        target_qps=s.target_qps,
        query_count=s.query_count,
        batch_timeout_ms=s.batch_timeout_ms,
        arrival_seed=s.arrival_seed,
    )


def serving_to_wire(serving: Serving) -> pb.Serving:
    return pb.Serving(
        scenario=enum_to_wire(serving.scenario) if serving.scenario else pb.SCENARIO_UNSPECIFIED,
        target_qps=serving.target_qps,
        query_count=serving.query_count,
        batch_timeout_ms=serving.batch_timeout_ms,
        arrival_seed=serving.arrival_seed,
    )


def _plain_fields(message, names) -> dict[str, Any]:
    """The message's fields among `names` that carry plain values (numbers, strings, booleans, lists of them): copied
    as they are, so a new plain field of the contract needs no line here; an optional one left unset reads None.
    Enums and messages convert by hand."""
    values: dict[str, Any] = {}
    for name in names:
        described = message.DESCRIPTOR.fields_by_name.get(name)
        if described is None or described.message_type is not None or described.enum_type is not None:
            continue
        if described.containing_oneof is not None and not message.HasField(name):
            values[name] = None
            continue
        value = getattr(message, name)
        values[name] = value if isinstance(value, (str, bytes, int, float, bool)) else tuple(value)
    return values


def _plain_values(values: Any, message_type) -> dict[str, Any]:
    """The dataclass `values`' fields that `message_type` carries as plain fields, for its constructor: copied as
    they are, so a new plain field needs no line here. None is left out (an optional field unset); an enum or a
    richer value converts by hand."""
    described = message_type.DESCRIPTOR.fields_by_name
    plain: dict[str, Any] = {}
    for item in fields(values):
        value = getattr(values, item.name)
        field = described.get(item.name)
        if field is None or field.message_type is not None or field.enum_type is not None:
            continue
        if isinstance(value, (str, bytes, int, float, bool, tuple)) and not isinstance(value, enum.Enum):
            plain[item.name] = value
    return plain


def run_request_from_wire(request: pb.RunRequest) -> RunRequest:
    device = None
    if request.HasField("device"):
        kind = enum_from_wire(DeviceKind, request.device.kind, "device.kind")
        if kind is not None:
            device = DeviceRef(kind, request.device.index)
    return RunRequest(
        **_plain_fields(request, (f.name for f in fields(RunRequest))),
        mode=enum_from_wire(Mode, request.mode, "mode"),
        precision=enum_from_wire(Precision, request.precision, "precision"),
        device=device,
        model_options=dict(request.model_options),
        layout=enum_from_wire(Layout, request.layout, "layout"),
        compilation=enum_from_wire(Compilation, request.compilation, "compilation"),
        cudnn_autotune=enum_from_wire(Switch, request.cudnn_autotune, "cudnn_autotune"),
        warmup_until_stable=_stable_from_wire(request),
        strategy=enum_from_wire(Strategy, request.strategy, "strategy"),
        devices=_devices_from_wire(request),
        cluster=_cluster_from_wire(request),
        profile=enum_from_wire(Profile, request.profile, "profile"),
        serving=_serving_from_wire(request),
    )


def config_to_wire(c: RunConfig, info: RunnerInfo, parameter_count: int = 0) -> pb.ResolvedConfig:
    """A resolved run as the contract has it: a run's first event, and CheckRun's answer (no parameter count there:
    counting needs a build)."""
    return pb.ResolvedConfig(
        **_plain_values(c, pb.ResolvedConfig),
        model=c.model.name,
        mode=enum_to_wire(c.mode),
        precision=enum_to_wire(c.precision),
        device=device_to_wire(c.device),
        framework=info.framework,
        framework_version=info.framework_version,
        model_options=c.model_options,
        layout=enum_to_wire(c.layout) if c.layout else pb.LAYOUT_UNSPECIFIED,
        compilation=enum_to_wire(c.compilation),
        cudnn_autotune=enum_to_wire(c.cudnn_autotune),
        warmup_until_stable=(
            pb.WarmupUntilStable(cv_threshold=c.warmup_until_stable.cv_threshold, window=c.warmup_until_stable.window)
            if c.warmup_until_stable
            else None
        ),
        strategy=enum_to_wire(c.strategy),
        devices=[device_to_wire(d) for d in c.run_devices],
        world_size=c.world_size,
        global_batch_size=c.global_batch_size,
        cluster=cluster_to_wire(c.cluster) if c.cluster else None,
        parameter_count=parameter_count,
        model_source=str(c.model.source),
        model_content_hash=c.model.source.content_hash,
        profile=enum_to_wire(c.profile),
        tf32=c.tf32.value if c.tf32 else "",
        serving=serving_to_wire(c.serving) if c.serving else None,
    )
