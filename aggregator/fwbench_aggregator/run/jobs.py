"""A job across several runners (machines): one runner name given several addresses (--runner
torch=hostA:50051,hostB:50051). Every node gets the same request with its own place in the cluster, all start
together, and their streams are merged into one RunResult, as a runner merges its own worker processes: a step
of the job ends when its slowest rank ends.

A node that fails fails the job: the others are cancelled at once, so that none is left waiting in a collective.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import ExitStack

import numpy as np

from . import replies, wire
from .client import RunnerClient, RunnerFailure, RunResult
from .connection import Transport

# torchrun's MASTER_PORT default: the first rendezvous port where hosts other than this one take part.
DEFAULT_RENDEZVOUS_PORT = 29500


def addresses_of(address: str) -> list[str]:
    """ "hostA:50051,hostB:50051" -> one address per node, in node rank order."""
    return address.split(",")


def _host(address: str) -> str:
    return address.rsplit(":", 1)[0]


def is_loopback(host: str) -> bool:
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _free_ports(count: int) -> list[int]:
    """Distinct ports of this host that are free now (held open together, so that none repeats)."""
    with ExitStack() as stack:
        sockets = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]


def clusters(addresses: Sequence[str], rendezvous_port: int | None = None) -> list[wire.Cluster | None]:
    """Each node's place in the job: node i's rendezvous endpoint is its host at port + i (torch's store listens
    on the first, each TensorFlow worker on its own). Where every host is this one and no port is given, free
    ports are picked. [None] for a runner on its own."""
    if len(addresses) == 1:
        return [None]
    hosts = [_host(a) for a in addresses]
    if rendezvous_port is None and all(is_loopback(h) for h in hosts):
        ports = _free_ports(len(hosts))
    else:
        first = rendezvous_port or DEFAULT_RENDEZVOUS_PORT
        ports = [first + i for i in range(len(hosts))]
    endpoints = [f"{host}:{port}" for host, port in zip(hosts, ports)]
    return wire.clusters(endpoints)


def run_job(
    name: str,
    address: str,
    transport: Transport,
    request: wire.Request,
    on_progress: Callable[[replies.Progress], None] = lambda progress: None,
    repetition: int = 0,
    rendezvous_port: int | None = None,
    active: set | None = None,
    on_summary: Callable[[RunResult], None] = lambda result: None,
) -> RunResult:
    """The request on the runner at `address`, or on every node of a job (a comma list of addresses) at once,
    merged. A node's failure cancels the others and is raised naming the node; so does Ctrl-C. `active` holds
    the clients while they run, for a caller whose Ctrl-C arrives in another thread to close. `on_summary` gets
    the complete result: on one runner as its summary arrives (while the runner still cleans up), for a job
    once merged."""
    addresses = addresses_of(address)
    active = set() if active is None else active
    clients = [RunnerClient(name, a, transport) for a in addresses]
    active.update(clients)
    try:
        if len(addresses) == 1:
            return clients[0].run(request, on_progress, repetition, on_summary)
        result = _run_nodes(name, address, clients, request, on_progress, repetition, rendezvous_port)
        on_summary(result)
        return result
    finally:
        active.difference_update(clients)
        for client in clients:
            client.close()


def _run_nodes(
    name: str,
    address: str,
    clients: Sequence[RunnerClient],
    request: wire.Request,
    on_progress: Callable[[replies.Progress], None],
    repetition: int,
    rendezvous_port: int | None,
) -> RunResult:
    addresses = addresses_of(address)
    places = clusters(addresses, rendezvous_port)

    def run_node(rank: int) -> RunResult:
        report = on_progress if rank == 0 else (lambda progress: None)
        try:
            return clients[rank].run(wire.for_node(request, places[rank]), report, repetition)
        except RunnerFailure as failure:
            raise RunnerFailure(
                name, failure.code, f"node {rank} ({addresses[rank]}): {failure.message}", failure.reason
            ) from None

    pool = ThreadPoolExecutor(max_workers=len(addresses), thread_name_prefix=f"{name}-node")
    try:
        futures = [pool.submit(run_node, rank) for rank in range(len(addresses))]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in futures if f in done and f.exception() is not None), None)
        if failed is not None:
            raise failed.exception()
        return merge(name, address, [f.result() for f in futures])
    finally:
        # Closing a channel ends its call (after a node's failure, or Ctrl-C): every other node stops its ranks
        # and frees its devices instead of waiting for a peer that is gone.
        for client in clients:
            client.close()
        pool.shutdown(wait=True)


def _rank_times(step: replies.StepTiming) -> list[float]:
    return list(step.rank_step_time_s) or [step.step_time_s]


def merge_steps(node_steps: Sequence[Sequence[replies.StepTiming]]) -> list[replies.StepTiming]:
    """Per step index (those every node reported): step_time_s the slowest node's, rank_step_time_s every
    rank's in node order; warm-up and start from node 0."""
    by_index = [{s.index: s for s in steps} for steps in node_steps]
    merged = []
    for first in node_steps[0]:
        steps = [own.get(first.index) for own in by_index]
        if any(s is None for s in steps):
            continue
        device_times_s = [s.device_time_s for s in steps]
        merged.append(
            replies.StepTiming(
                index=first.index,
                warmup=first.warmup,
                start_s=first.start_s,
                step_time_s=max(s.step_time_s for s in steps),
                device_time_s=None if None in device_times_s else max(device_times_s),
                rank_step_time_s=tuple(t for s in steps for t in _rank_times(s)),
            )
        )
    return merged


def straggler_spread(steps: Sequence[replies.StepTiming]) -> float | None:
    """Median over the measured steps of (slowest - fastest rank) / slowest; None with one rank."""
    spreads = [
        (max(times) - min(times)) / max(times)
        for times in (list(s.rank_step_time_s) for s in steps if not s.warmup)
        if len(times) > 1 and max(times) > 0
    ]
    return statistics.median(spreads) if spreads else None


def merge(name: str, address: str, results: Sequence[RunResult]) -> RunResult:
    """One RunResult of the job from its nodes' (node rank order): node 0's configuration, the steps merged,
    the summary recomputed from them."""
    head = results[0]
    steps = merge_steps([r.steps for r in results])
    measured = [s.step_time_s for s in steps if not s.warmup]
    summaries = [r.summary for r in results]
    timing = {}
    if measured:
        timing = {
            "measured_steps": len(measured),
            "median_step_time_s": statistics.median(measured),
            "mean_step_time_s": statistics.fmean(measured),
            "p95_step_time_s": float(np.percentile(measured, 95)),
            "throughput_samples_per_s": head.config.global_batch_size * len(measured) / sum(measured),
        }
    peaks = [s.peak_memory_bytes for s in summaries if s.peak_memory_bytes is not None]
    summary = dataclasses.replace(
        head.summary,
        **timing,
        straggler_spread=straggler_spread(steps),
        peak_memory_bytes=max(peaks) if peaks else None,
        time_to_first_step_s=max(s.time_to_first_step_s for s in summaries),
        started_at_unix_s=min(s.started_at_unix_s for s in summaries),
        finished_at_unix_s=max(s.finished_at_unix_s for s in summaries),
        flags=tuple(dict.fromkeys(flag for s in summaries for flag in s.flags)),
        device_flags=tuple(dict.fromkeys(flag for s in summaries for flag in s.device_flags)),
    )
    return RunResult(
        name,
        address,
        head.runner_info,
        head.repetition,
        head.config,
        steps,
        [p for r in results for p in r.power],
        summary,
    )
