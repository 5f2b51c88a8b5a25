"""A job across several runners (aggregator/jobs.py): the clusters the nodes are given, the merge of their
streams into one result, and a node's failure ending the whole job (over real gRPC servers on loopback)."""

from __future__ import annotations

import statistics
import threading
import time
from concurrent import futures

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.results import run_result

from fwbench_aggregator.run import jobs
from fwbench_aggregator.run.client import RunnerFailure, RunResult
from fwbench_aggregator.run.connection import Transport


def _result(
    node_rank: int, rank_times: list[list[float]], warmup: int = 1, peak: int | None = None, flags=()
) -> RunResult:
    """One node's result: per step, its local ranks' times (the step time is their slowest)."""
    steps = [
        pb.StepTiming(
            index=i,
            warmup=i < warmup,
            start_s=10.0 * node_rank + i,
            step_time_s=max(times),
            rank_step_time_s=times if len(times) > 1 else [],
        )
        for i, times in enumerate(rank_times)
    ]
    world_size = 2 * len(rank_times[0])
    config = pb.ResolvedConfig(
        model="mlp",
        batch_size=4,
        world_size=world_size,
        global_batch_size=4 * world_size,
        strategy=pb.STRATEGY_DDP,
        cluster=pb.Cluster(node_rank=node_rank, node_count=2, endpoints=["a:1", "b:2"]),
    )
    summary = pb.Summary(
        measured_steps=len(steps) - warmup,
        throughput_samples_per_s=1.0,
        time_to_first_step_s=1.0 + node_rank,
        started_at_unix_s=100.0 + node_rank,
        finished_at_unix_s=200.0 - node_rank,
        flags=list(flags),
    )
    if peak is not None:
        summary.peak_memory_bytes = peak
    return run_result(pb.DescribeResponse(framework="torch"), config, summary, steps, address=f"host{node_rank}:50051")


def test_merge_takes_the_slowest_rank_per_step_and_recomputes_the_summary():
    node0 = _result(0, [[9.0, 9.0], [1.0, 0.5], [2.0, 1.0], [1.0, 1.0]], peak=100, flags=("busy host",))
    node1 = _result(1, [[9.0, 9.0], [0.8, 0.8], [4.0, 2.0], [1.0, 3.0]], peak=300, flags=("busy host", "throttled"))
    merged = jobs.merge("torch", "host0:50051,host1:50051", [node0, node1])

    assert merged.address == "host0:50051,host1:50051" and merged.config == node0.config
    assert [s.step_time_s for s in merged.steps] == [9.0, 1.0, 4.0, 3.0]
    assert list(merged.steps[2].rank_step_time_s) == [2.0, 1.0, 4.0, 2.0]  # node 0's ranks, then node 1's
    assert [s.warmup for s in merged.steps] == [True, False, False, False]
    s = merged.summary
    measured = [1.0, 4.0, 3.0]
    assert s.measured_steps == 3
    assert s.median_step_time_s == 3.0 and s.mean_step_time_s == pytest.approx(statistics.fmean(measured))
    assert s.throughput_samples_per_s == pytest.approx(16 * 3 / sum(measured))  # global batch 4 x 4 ranks
    # (slowest - fastest) / slowest per measured step: 0.5, 0.75, 2/3 -> median 2/3.
    assert s.straggler_spread == pytest.approx(2 / 3)
    assert s.peak_memory_bytes == 300 and s.time_to_first_step_s == 2.0
    assert s.started_at_unix_s == 100.0 and s.finished_at_unix_s == 200.0
    assert list(s.flags) == ["busy host", "throttled"]


def test_merge_keeps_only_steps_every_node_reported_and_counts_one_rank_nodes():
    node0 = _result(0, [[1.0], [1.0], [2.0]])
    node1 = _result(1, [[1.0], [3.0]])
    merged = jobs.merge("tensorflow", "a:1,b:2", [node0, node1])
    assert [s.index for s in merged.steps] == [0, 1]
    assert list(merged.steps[1].rank_step_time_s) == [1.0, 3.0]  # one worker per node: its step time is its rank's
    assert merged.summary.straggler_spread == pytest.approx(2 / 3)


def test_clusters_give_each_node_its_rank_and_the_same_endpoints():
    assert jobs.clusters(["h:1"]) == [None]
    remote = jobs.clusters(["hostA:50051", "hostB:50051"], None)
    assert [c.node_rank for c in remote] == [0, 1] and all(c.node_count == 2 for c in remote)
    assert list(remote[0].endpoints) == list(remote[1].endpoints) == ["hostA:29500", "hostB:29501"]
    given = jobs.clusters(["127.0.0.1:1", "localhost:2"], 40000)
    assert list(given[0].endpoints) == ["127.0.0.1:40000", "localhost:40001"]
    local = jobs.clusters(["127.0.0.1:1", "127.0.0.1:2"])
    ports = [int(e.rsplit(":", 1)[1]) for e in local[0].endpoints]
    assert len(set(ports)) == 2 and all(p > 0 for p in ports)


class _Node(pb_grpc.RunnerServicer):
    """A runner of a job: streams steps until cancelled, or fails at once."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.requests: list[pb.RunRequest] = []
        self.cancelled = threading.Event()

    def Describe(self, request, context):
        return pb.DescribeResponse(framework="fake")

    def Run(self, request, context):
        # A call that has already ended takes no callback: it is over, as cancelled as it gets.
        if not context.add_callback(self.cancelled.set):
            self.cancelled.set()
        self.requests.append(request)
        if self.fail:
            time.sleep(0.3)  # after the other node has started
            context.abort(grpc.StatusCode.ABORTED, "rank 1 died (exit code -9)")
        yield pb.RunEvent(config=pb.ResolvedConfig(model="mlp"))
        yield pb.RunEvent(progress=pb.Progress(phase=pb.PHASE_MEASURE, steps_done=1, steps_total=3))
        deadline = time.monotonic() + 30
        while context.is_active() and time.monotonic() < deadline:
            time.sleep(0.02)


def _serve(nodes: list[_Node]):
    servers, addresses = [], []
    for node in nodes:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RunnerServicer_to_server(node, server)
        addresses.append(f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}")
        server.start()
        servers.append(server)
    return servers, addresses


@pytest.fixture
def two_nodes():
    nodes = [_Node(False), _Node(True)]
    servers, addresses = _serve(nodes)
    yield nodes, addresses
    for server in servers:
        server.stop(grace=None)


@pytest.fixture
def two_healthy_nodes():
    nodes = [_Node(False), _Node(False)]
    servers, addresses = _serve(nodes)
    yield nodes, addresses
    for server in servers:
        server.stop(grace=None)


def test_a_failing_node_fails_the_job_naming_it_and_cancels_the_others(two_nodes):
    nodes, addresses = two_nodes
    started = time.monotonic()
    with pytest.raises(RunnerFailure) as raised:
        jobs.run_job("torch", ",".join(addresses), Transport(), pb.RunRequest(model="mlp", batch_size=2))
    failure = raised.value
    assert failure.code == "ABORTED" and failure.runner == "torch"
    assert failure.message.startswith(f"node 1 ({addresses[1]}): rank 1 died")
    assert nodes[0].cancelled.wait(5), "node 0's run was left running"
    assert time.monotonic() - started < 10
    # Each node got the same request with its own place in one cluster.
    first, second = nodes[0].requests[0], nodes[1].requests[0]
    assert (first.cluster.node_rank, second.cluster.node_rank) == (0, 1)
    assert first.cluster.node_count == 2 and list(first.cluster.endpoints) == list(second.cluster.endpoints)
    assert first.model == second.model == "mlp"


def test_an_interrupt_cancels_every_node(two_healthy_nodes):
    nodes, addresses = two_healthy_nodes

    def interrupt(progress: pb.Progress) -> None:
        raise KeyboardInterrupt  # as Ctrl-C arrives while node 0 reports progress

    with pytest.raises(KeyboardInterrupt):
        jobs.run_job("torch", ",".join(addresses), Transport(), pb.RunRequest(model="mlp"), interrupt)
    # A node whose call had not reached it when Ctrl-C came never starts: its channel is closed first.
    assert nodes[0].requests, "node 0 reported the progress that was interrupted"
    assert all(node.cancelled.wait(5) for node in nodes if node.requests), "a node's run was left running"
