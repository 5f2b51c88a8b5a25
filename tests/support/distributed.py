"""What the distributed tests share: two runners of one framework as two "machines", the worker processes a
process spawned, the ports a process listens on, and free loopback ports."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc

from fwbench_aggregator.run import launch

from .processes import children


@contextmanager
def two_runners(framework: str, logs: Path) -> Iterator[list[tuple[launch.LocalRunner, pb_grpc.RunnerStub]]]:
    """Two embedded runners of `framework`, each a "machine": (LocalRunner, stub) pairs."""
    started = []
    try:
        for name in (f"{framework}-a", f"{framework}-b"):
            local = launch.LocalRunner(
                name, launch.embedded_command(framework, launch.default_venvs()), logs / f"{name}.log"
            )
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
    return children(parent_pid, b"spawn_main")


def workers_of(runner: launch.LocalRunner) -> list[int]:
    """The runner's worker processes (children that multiprocessing spawned), by pid."""
    return spawned_children(runner.process.pid)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


_LISTEN = "0A"  # TCP_LISTEN, as /proc/net/tcp and tcp6 write a socket's state


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """The (address, port) of every TCP socket the process `pid` listens on, IPv4 and IPv6, read from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with open(f"/proc/{pid}/net/{table}") as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if fields[3] == _LISTEN and fields[9] in inodes:
                    address, port = fields[1].split(":")
                    # The kernel writes each 32-bit word of the address in host byte order.
                    words = (address[i : i + 8] for i in range(0, len(address), 8))
                    raw = b"".join(int(word, 16).to_bytes(4, sys.byteorder) for word in words)
                    found.append((socket.inet_ntop(family, raw), int(port, 16)))
    return found
