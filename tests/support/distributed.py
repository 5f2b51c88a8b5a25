"""What the distributed tests share: two runners of one framework as two "machines", the worker processes a
process spawned, and free loopback ports."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from fwbench_aggregator.run import launch


@contextmanager
def two_runners(framework: str, logs: Path) -> Iterator[list[tuple[launch.LocalRunner, pb_grpc.RunnerStub]]]:
    """Two embedded runners of `framework`, each a "machine": (LocalRunner, stub) pairs."""
    started = []
    try:
        for name in (f"{framework}-a", f"{framework}-b"):
            local = launch.LocalRunner(name, launch.embedded_command(framework, launch.default_venvs()), logs / f"{name}.log")
            local.start()
            started.append(local)
        channels = [grpc.insecure_channel(local.address) for local in started]
        yield [(local, pb_grpc.RunnerStub(channel)) for local, channel in zip(started, channels)]
        for channel in channels:
            channel.close()
    finally:
        for local in started:
            local.stop()


def spawned_children(parent_pid: int) -> list[int]:
    """The processes `parent_pid` started through multiprocessing's spawn (its workers), by pid."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read()
        except OSError:
            continue
        if parent == parent_pid and b"spawn_main" in command:
            pids.append(int(entry))
    return sorted(pids)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
