"""Resolving a distributed run: devices, strategies and clusters, each refusal naming what is accepted."""

from __future__ import annotations

import pytest
from support.core import CPU, GPU0, expect_error, request, resolve_request

from fwbench_core.choices import DeviceKind, Strategy
from fwbench_core.devices import Device, DeviceRef
from fwbench_core.errors import FailedPrecondition, InvalidArgument
from fwbench_core.placement import cpu_worker_limit
from fwbench_core.runs import Cluster
from fwbench_core.validation import DEFAULT_DISTRIBUTED_TIMEOUT_S

GPU1 = Device(DeviceRef(DeviceKind.GPU, 1), "Test GPU", 1 << 30, "1.0")
TWO_GPUS = (CPU, GPU0, GPU1)
cpu = lambda index: DeviceRef(DeviceKind.CPU, index)
gpu = lambda index: DeviceRef(DeviceKind.GPU, index)
# A torch-like runner: DataParallel on GPUs only, DDP everywhere, DDP by default on several devices.
TORCH_LIKE = dict(
    strategies=frozenset({Strategy.SINGLE, Strategy.DP, Strategy.DDP}),
    parallel_strategy=Strategy.DDP,
    multi_node_strategy=Strategy.DDP,
)
TF_LIKE = dict(
    strategies=frozenset({Strategy.SINGLE, Strategy.MIRRORED, Strategy.MULTI_WORKER_MIRRORED}),
    parallel_strategy=Strategy.MIRRORED,
    multi_node_strategy=Strategy.MULTI_WORKER_MIRRORED,
)


def cluster(rank=0, count=2, endpoints=("127.0.0.1:29500", "127.0.0.1:29501")) -> Cluster:
    return Cluster(node_rank=rank, node_count=count, endpoints=tuple(endpoints))


def test_one_device_is_a_single_run_with_nothing_distributed():
    config = resolve_request(request(), **TORCH_LIKE)
    assert config.strategy is Strategy.SINGLE and not config.distributed
    assert config.devices == () and config.run_devices == (CPU,)
    assert config.world_size == 1 and config.global_batch_size == 2
    assert config.distributed_timeout_s == 0.0


def test_several_devices_default_to_the_runners_data_parallel_strategy_with_a_per_device_batch():
    config = resolve_request(request(devices=(cpu(0), cpu(1)), batch_size=3), **TORCH_LIKE)
    assert config.strategy is Strategy.DDP
    assert [d.ref for d in config.run_devices] == [cpu(0), cpu(1)]
    assert config.device.ref == cpu(0)
    assert config.world_size == 2 and config.global_batch_size == 6
    assert config.distributed_timeout_s == DEFAULT_DISTRIBUTED_TIMEOUT_S
    assert resolve_request(request(devices=(cpu(0), cpu(1))), **TF_LIKE).strategy is Strategy.MIRRORED


def test_a_cluster_defaults_to_the_multi_node_strategy_and_counts_every_runners_devices():
    config = resolve_request(request(device=gpu(0), cluster=cluster(rank=1)), devices=TWO_GPUS, **TF_LIKE)
    assert config.strategy is Strategy.MULTI_WORKER_MIRRORED
    assert config.world_size == 2 and config.global_batch_size == 4
    config = resolve_request(request(devices=(gpu(0), gpu(1)), cluster=cluster()), devices=TWO_GPUS, **TORCH_LIKE)
    assert config.strategy is Strategy.DDP and config.world_size == 4


def test_distributed_runs_sample_no_power_yet():
    config = resolve_request(request(devices=(cpu(0), cpu(1)), power_sample_rate_hz=20.0), **TORCH_LIKE)
    assert config.power_sample_rate_hz == 0.0 and config.idle_baseline_s == 0.0


def test_ddp_on_one_device_is_a_world_of_one():
    config = resolve_request(request(device=gpu(0), strategy=Strategy.DDP), devices=TWO_GPUS, **TORCH_LIKE)
    assert config.strategy is Strategy.DDP and config.distributed and config.world_size == 1


@pytest.mark.parametrize(
    "devices, accepted",
    [
        ((cpu(0), cpu(1)), "ddp for 2 CPU devices"),  # the CPU: no DataParallel at all
        ((gpu(0),), "single, ddp for 1 GPU device"),  # one GPU
    ],
)
def test_data_parallel_needs_two_gpus_and_the_refusal_names_what_runs(devices, accepted):
    message = expect_error(
        FailedPrecondition, request(devices=devices, strategy=Strategy.DP), devices=TWO_GPUS, **TORCH_LIKE
    )
    assert "strategy dp" in message and f"supports {accepted} on one runner" in message


def test_data_parallel_on_two_gpus_is_accepted():
    config = resolve_request(request(devices=(gpu(0), gpu(1)), strategy=Strategy.DP), devices=TWO_GPUS, **TORCH_LIKE)
    assert config.strategy is Strategy.DP and config.global_batch_size == 4


def test_a_strategy_of_the_other_framework_is_refused_naming_this_ones():
    message = expect_error(
        FailedPrecondition, request(devices=(cpu(0), cpu(1)), strategy=Strategy.MIRRORED), **TORCH_LIKE
    )
    assert "mirrored is not supported" in message and "supports ddp for 2 CPU devices" in message


@pytest.mark.parametrize(
    "strategy, devices, nodes, why",
    [
        (Strategy.SINGLE, (cpu(0), cpu(1)), 1, "runs one device on one runner"),
        (Strategy.MIRRORED, (cpu(0),), 2, "across runners use multi_worker_mirrored"),
        (Strategy.MULTI_WORKER_MIRRORED, (cpu(0), cpu(1)), 1, "one CPU device per runner"),
    ],
)
def test_strategies_the_devices_cannot_run_are_refused(strategy, devices, nodes, why):
    req = request(devices=devices, strategy=strategy, cluster=cluster() if nodes > 1 else None)
    assert why in expect_error(FailedPrecondition, req, **TF_LIKE)


def test_devices_named_twice_mixed_or_out_of_range_are_invalid():
    assert "names cpu:0 twice" in expect_error(InvalidArgument, request(devices=(cpu(0), cpu(0))), **TORCH_LIKE)
    assert "mixes CPU and GPU" in expect_error(InvalidArgument, request(devices=(cpu(0), gpu(0))), devices=TWO_GPUS)
    assert "gpu:2 is out of range; this runner's GPUs: gpu:0, gpu:1" in expect_error(
        InvalidArgument, request(devices=(gpu(0), gpu(2))), devices=TWO_GPUS
    )
    assert "GPUs: none" in expect_error(InvalidArgument, request(devices=(gpu(0), gpu(1))))
    limit = cpu_worker_limit()
    assert f"cpu:0 to cpu:{limit - 1}" in expect_error(InvalidArgument, request(devices=(cpu(0), cpu(limit))))
    both = request(device=cpu(0), devices=(cpu(0), cpu(1)))
    assert "device and devices are both set" in expect_error(InvalidArgument, both)


@pytest.mark.parametrize(
    "bad, field",
    [
        (cluster(rank=2), "cluster.node_rank must be between 0 and 1"),
        (cluster(count=0, endpoints=()), "cluster.node_count must be between 1"),
        (cluster(endpoints=("127.0.0.1:29500",)), "cluster.endpoints has 1 entries for cluster.node_count 2"),
        (cluster(endpoints=("127.0.0.1:29500", "no-port")), "'no-port', which is not HOST:PORT"),
        (cluster(endpoints=("127.0.0.1:29500", "h:70000")), "'h:70000', which is not HOST:PORT"),
    ],
)
def test_malformed_clusters_are_invalid_naming_the_field(bad, field):
    assert field in expect_error(InvalidArgument, request(cluster=bad), **TORCH_LIKE)


@pytest.mark.parametrize("timeout_s", [0.0, 0.5, 3601.0])
def test_distributed_timeout_is_bounded(timeout_s):
    req = request(devices=(cpu(0), cpu(1)), distributed_timeout_s=timeout_s)
    assert "distributed_timeout_s must be between 1 and 3600" in expect_error(InvalidArgument, req, **TORCH_LIKE)


def test_a_distributed_run_names_no_process_block():
    # Each rank already runs in a worker process of its own.
    message = expect_error(InvalidArgument, request(devices=(cpu(0), cpu(1)), process_block="k0"), **TORCH_LIKE)
    assert message.startswith("process_block applies to single-device runs")
