"""PyTorch's distributed strategies through real torch runners over gRPC on loopback: DDP with two gloo workers
on the CPU, two runner processes as two "machines" of one job, a rank killed mid-run, a machine that never
starts, the client's cancellation, refused requests; and the gradients really synchronised."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from support.distributed import free_port, listening_addresses, workers_of

from fwbench_aggregator.run import launch

# Every test here runs a real framework runner; each on conftest's two machines of torch (`runners`), which it
# leaves with no worker process.
pytestmark = [pytest.mark.frameworks, pytest.mark.usefixtures("nothing_left_behind")]
MACHINES_FRAMEWORK = "torch"

RUN_TIMEOUT_S = 180
# A rank that fails is noticed at once (its pipe closes); the runner then stops the others (a stop request,
# SIGTERM and SIGKILL 3 s and 2 s apart) and answers: well within this.
FAULT_BOUND_S = 20
# The rendezvous and every collective give up after this; the runner calls a rank silent 5 s later.
SHORT_TIMEOUT_S = 5.0
HERE = Path(__file__).parent


def until_workers_gone(local: launch.LocalRunner) -> None:
    stopped_s = time.monotonic()
    while workers_of(local) and time.monotonic() - stopped_s < FAULT_BOUND_S:
        time.sleep(0.1)
    assert workers_of(local) == []


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback  # ::ffff:127.0.0.1 too


def assert_port_free(port: int) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))


def cpus(count: int) -> list[pb.DeviceSelector]:
    return [pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU, index=i) for i in range(count)]


def ddp_request(**overrides) -> pb.RunRequest:
    fields = dict(
        model="mobilenet_v2",
        mode=pb.MODE_TRAIN,
        batch_size=2,
        input_shape=[3, 32, 32],
        warmup_steps=1,
        measured_steps=3,
        min_measure_s=0.0,
        devices=cpus(2),
        strategy=pb.STRATEGY_DDP,
        distributed_timeout_s=60.0,
    )
    fields.update(overrides)
    return pb.RunRequest(**fields)


def of_kind(events, kind: str) -> list:
    return [getattr(e, kind) for e in events if e.WhichOneof("event") == kind]


def run_error(stub, request: pb.RunRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        list(stub.Run(request, timeout=RUN_TIMEOUT_S))
    return info.value


def test_ddp_with_two_gloo_workers_is_one_run_with_each_ranks_step_times(runners):
    (_, stub), _ = runners
    events = list(stub.Run(ddp_request(), timeout=RUN_TIMEOUT_S))
    (config,) = of_kind(events, "config")
    assert config.strategy == pb.STRATEGY_DDP
    assert (config.world_size, config.global_batch_size, config.batch_size) == (2, 4, 2)
    assert [(d.kind, d.index) for d in config.devices] == [(pb.DEVICE_KIND_CPU, 0), (pb.DEVICE_KIND_CPU, 1)]
    steps = [s for batch in of_kind(events, "steps") for s in batch.steps]
    assert [(s.index, s.warmup) for s in steps] == [(0, True), (1, False), (2, False), (3, False)]
    for step in steps:
        assert len(step.rank_step_time_s) == 2 and step.step_time_s == max(step.rank_step_time_s)
    summary = events[-1].summary
    assert summary.measured_steps == 3 and summary.HasField("straggler_spread")
    assert summary.throughput_samples_per_s == pytest.approx(4 * 3 / sum(s.step_time_s for s in steps[1:]), rel=1e-6)


def test_two_runners_form_one_ddp_job(runners):
    endpoints = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    results: dict[int, object] = {}

    def node(rank: int, stub) -> None:
        request = ddp_request(devices=cpus(1), cluster=pb.Cluster(node_rank=rank, node_count=2, endpoints=endpoints))
        try:
            results[rank] = list(stub.Run(request, timeout=RUN_TIMEOUT_S))
        except grpc.RpcError as error:
            results[rank] = error

    threads = [threading.Thread(target=node, args=(rank, stub)) for rank, (_, stub) in enumerate(runners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for rank in (0, 1):
        events = results[rank]
        assert isinstance(events, list), f"node {rank}: {events}"
        (config,) = of_kind(events, "config")
        assert (config.world_size, config.global_batch_size, config.cluster.node_rank) == (2, 4, rank)
        assert events[-1].summary.measured_steps == 3


def test_a_killed_rank_fails_the_run_naming_it_and_leaves_nothing_behind(runners):
    (local, stub), _ = runners
    port = free_port()
    # A job of one runner whose rendezvous port the test knows, to check that it is freed.
    cluster = pb.Cluster(node_rank=0, node_count=1, endpoints=[f"127.0.0.1:{port}"])
    call = stub.Run(ddp_request(measured_steps=100_000, cluster=cluster), timeout=RUN_TIMEOUT_S)
    for event in call:
        if event.WhichOneof("event") == "steps":
            break
    victim = workers_of(local)[-1]
    os.kill(victim, signal.SIGKILL)
    killed_s = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
        for _ in call:
            pass
    assert time.monotonic() - killed_s < FAULT_BOUND_S
    assert info.value.code() == grpc.StatusCode.ABORTED, info.value.details()
    assert f"(pid {victim}) exited with code -9" in info.value.details()
    assert workers_of(local) == []
    assert_port_free(port)


def test_a_rank_killed_on_one_machine_fails_the_job_on_both(runners):
    endpoints = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    calls = [
        stub.Run(
            ddp_request(
                devices=cpus(1),
                measured_steps=100_000,
                cluster=pb.Cluster(node_rank=rank, node_count=2, endpoints=endpoints),
            ),
            timeout=RUN_TIMEOUT_S,
        )
        for rank, (_, stub) in enumerate(runners)
    ]
    for call in calls:
        for event in call:
            if event.WhichOneof("event") == "steps":
                break
    (victim,) = workers_of(runners[1][0])
    os.kill(victim, signal.SIGKILL)
    killed_s = time.monotonic()
    errors = []
    for call in calls:
        with pytest.raises(grpc.RpcError) as info:
            for _ in call:
                pass
        errors.append(info.value)
    assert time.monotonic() - killed_s < FAULT_BOUND_S
    assert [error.code() for error in errors] == [grpc.StatusCode.ABORTED] * 2, [e.details() for e in errors]
    assert errors[0].details().startswith("rank 0: a collective failed: another rank of the job failed")
    assert errors[1].details().startswith(f"rank 1 (pid {victim}) exited with code -9")


def test_a_machine_that_never_starts_fails_the_run_within_the_timeout(runners):
    (local, stub), _ = runners
    port = free_port()
    endpoints = [f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}"]
    request = ddp_request(
        devices=cpus(1),
        cluster=pb.Cluster(node_rank=0, node_count=2, endpoints=endpoints),
        distributed_timeout_s=SHORT_TIMEOUT_S,
    )
    started_s = time.monotonic()
    error = run_error(stub, request)
    # Spawning the worker and importing torch come before the rendezvous starts to count.
    assert time.monotonic() - started_s < SHORT_TIMEOUT_S + FAULT_BOUND_S + 15
    assert error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED), error.details()
    assert error.details().startswith("rank 0: ")
    assert "is every runner of the job started and reachable?" in error.details()
    assert workers_of(local) == []
    assert_port_free(port)


def test_cancelling_a_ddp_run_stops_every_rank(runners):
    (local, stub), _ = runners
    call = stub.Run(ddp_request(measured_steps=100_000), timeout=RUN_TIMEOUT_S)
    for event in call:
        if event.WhichOneof("event") == "steps":
            assert len(workers_of(local)) == 2
            call.cancel()
            break
    until_workers_gone(local)
    # The CPU is free again: the next run is not left waiting.
    assert list(stub.Run(ddp_request(), timeout=RUN_TIMEOUT_S))[-1].summary.measured_steps == 3


def test_a_ddp_job_on_one_host_listens_on_loopback_only(runners):
    """c10d's store would listen on every interface, unauthenticated; a job on one host reaches it on loopback."""
    (local, stub), _ = runners
    call = stub.Run(ddp_request(measured_steps=100_000), timeout=RUN_TIMEOUT_S)
    for event in call:
        if event.WhichOneof("event") == "steps":
            break
    listening = [(pid, address) for pid in workers_of(local) for address in listening_addresses(pid)]
    call.cancel()
    until_workers_gone(local)
    assert listening, "rank 0 hosts the job's store while the run lasts: some worker must listen"
    exposed = [(pid, address) for pid, address in listening if not is_loopback(address[0])]
    assert exposed == [], f"worker sockets listening beyond loopback: {exposed}; all: {listening}"


def test_requests_the_devices_cannot_run_are_refused(runners):
    (_, stub), _ = runners
    error = run_error(stub, ddp_request(strategy=pb.STRATEGY_DP))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details().startswith("strategy dp is not supported on CPU devices")
    assert "supports ddp for 2 CPU devices" in error.details()
    error = run_error(stub, ddp_request(devices=[cpus(1)[0], cpus(1)[0]]))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cpu:0 twice" in error.details()


@pytest.mark.parametrize("strategy, synchronised", [("ddp", True), ("single", False)])
def test_after_one_step_every_ddp_rank_holds_the_same_weights(strategy, synchronised):
    python = launch.default_venvs() / "torch" / "bin" / "python"
    done = subprocess.run(
        [str(python), str(HERE / "torch_one_ddp_step.py"), strategy, str(free_port())],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    distance = json.loads(done.stdout.splitlines()[-1])
    assert distance["before"] == 0.0 and distance["inputs_differ"] and distance["moved"] > 0
    # Without DDP the ranks' different inputs move their weights apart: the check can fail.
    assert (distance["after"] == 0.0) is synchronised
