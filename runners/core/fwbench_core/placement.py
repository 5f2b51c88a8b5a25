"""Where a run goes: its devices on this runner, the cluster of runners it spans and the strategy that spreads it
over them, each checked against what the runner has and can do."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from .choices import DeviceKind, Strategy
from .devices import Capabilities, Device, DeviceRef
from .errors import FailedPrecondition, InvalidArgument, echoed
from .limits import MAX_NODES, in_range
from .runs import Cluster, RunRequest

# cpu:0 .. cpu:N-1 name N CPU workers (PyTorch) or logical CPU devices (TensorFlow): as many as the host
# has cores, and two on any host, so that a distributed run can be tried anywhere.
MIN_CPU_WORKERS = 2
_ENDPOINT = re.compile(r"[A-Za-z0-9_.:\[\]-]+:(\d{1,5})")


def resolve_device(requested: DeviceRef | None, devices: Sequence[Device]) -> Device:
    by_ref = {device.ref: device for device in devices}
    if requested is None:
        gpus = [d for d in devices if d.ref.kind is DeviceKind.GPU]
        return gpus[0] if gpus else by_ref[DeviceRef(DeviceKind.CPU, 0)]
    if requested not in by_ref:
        available = ", ".join(str(device.ref) for device in devices)
        raise FailedPrecondition(f"device {requested} is not available on this runner; available devices: {available}")
    return by_ref[requested]


def cpu_worker_limit() -> int:
    return max(MIN_CPU_WORKERS, os.cpu_count() or 1)


def resolve_devices(request: RunRequest, devices: Sequence[Device]) -> tuple[Device, ...]:
    """The devices of this runner a run uses: `device` (or the default), or the `devices` list."""
    if not request.devices:
        return (resolve_device(request.device, devices),)
    if request.device is not None:
        raise InvalidArgument("device and devices are both set: name one device with device, or several with devices")
    kinds = {ref.kind for ref in request.devices}
    if len(kinds) > 1:
        raise InvalidArgument(
            "devices mixes CPU and GPU devices; name devices of one kind, e.g. gpu:0,gpu:1 or cpu:0,cpu:1"
        )
    seen: set[DeviceRef] = set()
    for ref in request.devices:
        if ref in seen:
            raise InvalidArgument(f"devices names {ref} twice; name each device once")
        seen.add(ref)
    by_ref = {device.ref: device for device in devices}
    cpu = by_ref[DeviceRef(DeviceKind.CPU, 0)]
    limit = cpu_worker_limit()
    resolved = []
    for ref in request.devices:
        if ref.kind is DeviceKind.CPU:
            if ref.index >= limit:
                raise InvalidArgument(
                    f"devices: {ref} is out of range; cpu:0 to cpu:{limit - 1} name this host's CPU workers (one per core)"
                )
            resolved.append(Device(ref, cpu.name, cpu.memory_bytes, cpu.driver_version))
        elif ref not in by_ref:
            gpus = ", ".join(str(d.ref) for d in devices if d.ref.kind is DeviceKind.GPU) or "none"
            raise InvalidArgument(f"devices: {ref} is out of range; this runner's GPUs: {gpus}")
        else:
            resolved.append(by_ref[ref])
    return tuple(resolved)


def resolve_cluster(cluster: Cluster | None) -> Cluster | None:
    if cluster is None:
        return None
    in_range("cluster.node_count", cluster.node_count, 1, MAX_NODES)
    in_range("cluster.node_rank", cluster.node_rank, 0, cluster.node_count - 1)
    if len(cluster.endpoints) != cluster.node_count:
        raise InvalidArgument(
            f"cluster.endpoints has {len(cluster.endpoints)} entries for cluster.node_count {cluster.node_count}; "
            "give one HOST:PORT per runner, in node_rank order"
        )
    for endpoint in cluster.endpoints:
        match = _ENDPOINT.fullmatch(endpoint)
        if not match or not 1 <= int(match[1]) <= 65535:
            raise InvalidArgument(
                f"cluster.endpoints has {echoed(endpoint)}, which is not HOST:PORT with PORT 1 to 65535"
            )
    return cluster


def resolve_strategy(
    requested: Strategy | None, devices: Sequence[Device], cluster: Cluster | None, can: Capabilities, framework: str
) -> Strategy:
    """The strategy a run uses on `devices` (of one kind) and `cluster`, or FailedPrecondition naming those
    the devices can run."""
    nodes = cluster.node_count if cluster else 1
    where = f"{len(devices)} {devices[0].ref.kind.value.upper()} device{'s' if len(devices) > 1 else ''}"
    where += f" on each of {nodes} runners" if nodes > 1 else " on one runner"
    if requested is None:
        if nodes > 1:
            requested = can.multi_node_strategy
        elif len(devices) > 1:
            requested = can.parallel_strategy
        else:
            return Strategy.SINGLE
    supported = [s for s in Strategy if s in can.strategies]
    usable = [s.value for s in supported if _fits(s, devices, nodes) is None]
    hint = f"; the {framework} runner supports {', '.join(usable) or 'none of its strategies'} for {where}"
    if requested not in can.strategies:
        raise FailedPrecondition(
            f"strategy {requested.value} is not supported on {devices[0].ref.kind.value.upper()} devices by the "
            f"{framework} runner{hint}"
        )
    problem = _fits(requested, devices, nodes)
    if problem:
        raise FailedPrecondition(f"strategy {requested.value} {problem}{hint}")
    return requested


def _fits(strategy: Strategy, devices: Sequence[Device], nodes: int) -> str | None:
    """Why `strategy` cannot run `devices` on each of `nodes` runners; None where it can."""
    gpus = devices[0].ref.kind is DeviceKind.GPU
    if strategy is Strategy.SINGLE and (len(devices) > 1 or nodes > 1):
        return "runs one device on one runner"
    if strategy is Strategy.DP and (not gpus or len(devices) < 2 or nodes > 1):
        return "(torch.nn.DataParallel) needs two or more GPUs of one runner"
    if strategy is Strategy.MIRRORED and nodes > 1:
        return "(MirroredStrategy) runs on one runner; across runners use multi_worker_mirrored"
    if strategy is Strategy.MULTI_WORKER_MIRRORED and not gpus and len(devices) > 1:
        return "(MultiWorkerMirroredStrategy) runs one CPU device per runner; name cpu:0 alone"
    return None
