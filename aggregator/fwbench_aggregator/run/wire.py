"""The aggregator's edge with the contract (protos/fwbench/runner/v1/runner.proto): every request is built and varied
here, and every message that crosses the wire is named here, so that no module above imports the generated code
(tests/test_aggregator_layers.py holds them to it; the gRPC client, run.client, and base.vocabulary, which reads the
enums' words from the descriptors, are the others that do).

A request is the contract's RunRequest, written from a RunSpec (to_request) and varied only by the functions here; the
modules above hold it and hand it on. A reply (a ResolvedConfig, a Summary, a runner's description, ...) is read by
its fields' names, and its enums through base.vocabulary's choice enums (to_text(Mode, config.mode))."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fwbench.runner.v1 import runner_pb2 as pb

from ..base.vocabulary import (
    Compilation,
    Layout,
    Mode,
    Precision,
    Profile,
    Scenario,
    Strategy,
    Switch,
    device_kind_index,
    from_text,
    shape_dims,
)
from ..plan.design import MIN_WINDOW_STEPS, REFILL_STEPS, BlockDesign
from ..plan.spec import RunSpec

# What crosses the wire, by the aggregator's names for it.
Request = pb.RunRequest
Resolved = pb.ResolvedConfig
Summary = pb.Summary
StepTiming = pb.StepTiming
Progress = pb.Progress
RunnerDescription = pb.DescribeResponse
ModelInfo = pb.ModelInfo
ModelReport = pb.ModelReport
Cluster = pb.Cluster


def to_request(spec: RunSpec) -> Request:
    """The request for a runner; every node of a job across runners gets it with its own cluster (for_node)."""
    request = pb.RunRequest(
        model=spec.model,
        mode=from_text(Mode, spec.mode.value),
        batch_size=spec.batch_size,
        input_shape=shape_dims(spec.shape),
        model_options=dict(spec.model_options),
        precision=from_text(Precision, spec.precision.value),
        warmup_steps=spec.warmup,
        measured_steps=spec.steps,
        seed=spec.seed,
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
    if spec.input_seed is not None:
        request.input_seed = spec.input_seed
    if spec.min_measure_s is not None:
        request.min_measure_s = spec.min_measure_s
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


def window(request: Request, design: BlockDesign, block: str, last: bool) -> Request:
    """One window of `design`'s process block `block` for a runner whose comparison asks `request`: its build kept
    and continued under the block's name, in the block's worker process, freed with the process after the runner's
    `last` window."""
    variant = _copy(request)
    variant.ClearField("warmup_until_stable")
    variant.warmup_steps = REFILL_STEPS
    variant.measured_steps = MIN_WINDOW_STEPS
    variant.min_measure_s = design.window_s
    variant.reuse_key = block
    variant.continue_reuse = True
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


def reference_request(model: str, options: Mapping[str, str], name: str) -> pb.ReferenceRequest:
    """The request that exports (or compares with) the reference `name` of `model` under `options`."""
    return pb.ReferenceRequest(model=model, model_options=options, name=name)
