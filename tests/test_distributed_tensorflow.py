"""TensorFlow's distributed strategies through real TensorFlow runners over gRPC on loopback: MirroredStrategy on
two logical CPU devices, two runner processes as two "machines" of one MultiWorkerMirroredStrategy job, a worker
killed mid-run, a refused request; and the gradients really synchronised across replicas."""

from __future__ import annotations

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
from support.distributed import free_port, workers_of

from fwbench_aggregator.run import launch
from fwbench_core.distributed import SILENCE_MARGIN_S

# Every test here runs a real framework runner; each on conftest's two machines of TensorFlow (`runners`), which it
# leaves with no worker process.
pytestmark = [pytest.mark.frameworks, pytest.mark.usefixtures("nothing_left_behind")]
MACHINES_FRAMEWORK = "tensorflow"

RUN_TIMEOUT_S = 240
# A worker that dies is noticed at once (its pipe closes) and its peer's next collective fails at once (the
# connection is reset); the runner then stops the others (a stop request, SIGTERM and SIGKILL 3 s and 2 s
# apart) and answers: well within this.
FAULT_BOUND_S = 30
# A run that waits for a machine that never starts is given this long.
SHORT_TIMEOUT_S = 5.0
HERE = Path(__file__).parent


def assert_port_free(port: int) -> None:
    """Nothing listens on the port any more (connections that TensorFlow's server closed may linger in
    TIME_WAIT: SO_REUSEADDR binds beside those, never beside a listener)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))


def cpus(count: int) -> list[pb.DeviceSelector]:
    return [pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU, index=i) for i in range(count)]


def tf_request(**overrides) -> pb.RunRequest:
    fields = dict(
        model="resnet18",
        mode=pb.MODE_TRAIN,
        batch_size=2,
        input_shape=[3, 32, 32],
        warmup_steps=1,
        measured_steps=3,
        min_measure_s=0.0,
        devices=cpus(2),
        strategy=pb.STRATEGY_MIRRORED,
        distributed_timeout_s=60.0,
    )
    fields.update(overrides)
    return pb.RunRequest(**fields)


def mwms_request(rank: int, endpoints: list[str], **overrides) -> pb.RunRequest:
    cluster = pb.Cluster(node_rank=rank, node_count=len(endpoints), endpoints=endpoints)
    return tf_request(devices=cpus(1), strategy=pb.STRATEGY_MULTI_WORKER_MIRRORED, cluster=cluster, **overrides)


def of_kind(events, kind: str) -> list:
    return [getattr(e, kind) for e in events if e.WhichOneof("event") == kind]


def steps_of(events) -> list:
    return [s for batch in of_kind(events, "steps") for s in batch.steps]


def run_error(stub, request: pb.RunRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        list(stub.Run(request, timeout=RUN_TIMEOUT_S))
    return info.value


def test_mirrored_on_two_logical_cpu_devices_is_one_run_of_the_global_batch(runners):
    (_, stub), _ = runners
    events = list(stub.Run(tf_request(), timeout=RUN_TIMEOUT_S))
    (config,) = of_kind(events, "config")
    assert config.strategy == pb.STRATEGY_MIRRORED
    assert (config.world_size, config.global_batch_size, config.batch_size) == (2, 4, 2)
    assert [(d.kind, d.index) for d in config.devices] == [(pb.DEVICE_KIND_CPU, 0), (pb.DEVICE_KIND_CPU, 1)]
    steps = steps_of(events)
    assert [(s.index, s.warmup) for s in steps] == [(0, True), (1, False), (2, False), (3, False)]
    # One worker process drives both replicas: no ranks to tell apart, and no straggler spread.
    assert all(not s.rank_step_time_s for s in steps)
    summary = events[-1].summary
    assert not summary.HasField("straggler_spread")
    assert summary.measured_steps == 3
    assert summary.throughput_samples_per_s == pytest.approx(4 * 3 / sum(s.step_time_s for s in steps[1:]), rel=1e-6)


def test_two_runners_form_one_multi_worker_mirrored_job(runners):
    endpoints = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    results: dict[int, object] = {}

    def node(rank: int, stub) -> None:
        try:
            results[rank] = list(stub.Run(mwms_request(rank, endpoints), timeout=RUN_TIMEOUT_S))
        except grpc.RpcError as error:
            results[rank] = error

    threads = [threading.Thread(target=node, args=(rank, stub)) for rank, (_, stub) in enumerate(runners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for rank in (0, 1):
        events = results[rank]
        assert isinstance(events, list), f"node {rank}: {events.details()}"
        (config,) = of_kind(events, "config")
        assert config.strategy == pb.STRATEGY_MULTI_WORKER_MIRRORED
        assert (config.world_size, config.global_batch_size, config.cluster.node_rank) == (2, 4, rank)
        # The ranks agreed on when each phase ended: the same steps on both machines.
        assert [(s.index, s.warmup) for s in steps_of(events)] == [(0, True), (1, False), (2, False), (3, False)]
        assert events[-1].summary.measured_steps == 3
    for port in endpoints:
        assert_port_free(int(port.rsplit(":", 1)[1]))


def endless_job_measuring(runners) -> tuple[list, list[str]]:
    """A multi_worker_mirrored job over both runners that would run for ever, once both have sent steps: its
    calls and endpoints."""
    endpoints = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    calls = [
        stub.Run(mwms_request(rank, endpoints, measured_steps=100_000), timeout=RUN_TIMEOUT_S)
        for rank, (_, stub) in enumerate(runners)
    ]
    for call in calls:
        for event in call:
            if event.WhichOneof("event") == "steps":
                break
    return calls, endpoints


def test_a_worker_killed_on_one_machine_fails_the_job_on_both_naming_it(runners):
    calls, endpoints = endless_job_measuring(runners)
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
    assert f"(TensorFlow worker {endpoints[1]}, node rank 1)" in errors[0].details()
    assert errors[1].details().startswith(f"rank 1 (pid {victim}) exited with code -9")
    for port in endpoints:
        assert_port_free(int(port.rsplit(":", 1)[1]))


def test_multi_worker_mirrored_on_two_cpu_devices_is_refused(runners):
    (_, stub), _ = runners
    error = run_error(stub, tf_request(strategy=pb.STRATEGY_MULTI_WORKER_MIRRORED))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details().startswith(
        "strategy multi_worker_mirrored (MultiWorkerMirroredStrategy) runs one CPU device"
    )
    assert "supports mirrored for 2 CPU devices" in error.details()


def test_after_one_mirrored_step_every_replica_holds_the_same_weights():
    python = launch.default_venvs() / "tensorflow" / "bin" / "python"
    done = subprocess.run(
        [str(python), str(HERE / "tensorflow_one_mirrored_step.py")],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["replicas"] == 2 and result["before"] == 0.0
    assert result["inputs_differ"] and result["moved"] > 0
    # The replicas' own gradients differ (each saw its own inputs): only the all-reduce keeps them equal.
    assert result["gradients_differ"] > 0
    assert result["after"] == 0.0


def test_a_machine_that_never_starts_fails_the_run_within_the_timeout(runners):
    (local, stub), _ = runners
    port = free_port()
    endpoints = [f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}"]
    started_s = time.monotonic()
    error = run_error(stub, mwms_request(0, endpoints, distributed_timeout_s=SHORT_TIMEOUT_S))
    # TensorFlow waits for every worker of TF_CONFIG without a bound of its own (its coordination service's
    # register timeout does not cover this wait, and the wait holds the interpreter): the runner calls the rank
    # silent after distributed_timeout_s and a margin, and stops it (SIGKILL at the latest).
    assert time.monotonic() - started_s < SHORT_TIMEOUT_S + SILENCE_MARGIN_S + FAULT_BOUND_S
    assert error.code() == grpc.StatusCode.ABORTED, error.details()
    assert error.details().startswith("rank 0 (pid ")
    assert "sent nothing for" in error.details()
    assert workers_of(local) == []
    assert_port_free(port)


def test_xla_under_a_strategy_on_cpu_devices_is_refused(runners):
    (local, stub), _ = runners
    error = run_error(stub, tf_request(compilation=pb.COMPILATION_XLA))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error.details()
    assert "compilation xla cannot run strategy mirrored on CPU devices" in error.details()
    assert workers_of(local) == []


def test_cancelling_one_machine_of_a_job_stops_every_rank(runners):
    calls, _ = endless_job_measuring(runners)
    calls[0].cancel()
    cancelled_s = time.monotonic()
    # The ranks agree between steps: node 0's rank votes to cancel, so node 1's rank stops too.
    with pytest.raises(grpc.RpcError) as info:
        for _ in calls[1]:
            pass
    assert info.value.code() == grpc.StatusCode.CANCELLED, info.value.details()
    assert time.monotonic() - cancelled_s < FAULT_BOUND_S
    while any(workers_of(local) for local, _ in runners) and time.monotonic() - cancelled_s < FAULT_BOUND_S:
        time.sleep(0.1)
