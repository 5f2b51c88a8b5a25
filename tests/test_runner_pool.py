"""The session's runner pool restarts a runner grown past its memory ceiling on the port it had, so that the channels
tests already hold reach the new process."""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.runner_pool import RunnerPool, memory_bytes


def test_a_runner_past_the_ceiling_restarts_on_its_port_and_a_held_channel_reaches_it(tmp_path):
    for folder in ("logs", "references"):
        (tmp_path / folder).mkdir()
    pool = RunnerPool(tmp_path / "logs", tmp_path / "references")
    try:
        runner = pool.get("fake")
        first_pid = runner.pid
        with grpc.insecure_channel(runner.address) as channel:
            stub = pb_grpc.RunnerStub(channel)
            assert stub.Describe(pb.DescribeRequest(), timeout=30).framework == "fake"
            pool.restart_grown(ceiling_bytes=1 << 50)  # far below none: nothing restarts
            assert runner.pid == first_pid and pool.restarts == []
            pool.restart_grown(ceiling_bytes=0)
            assert runner.pid != first_pid and pool.get("fake").address == runner.address
            assert stub.Describe(pb.DescribeRequest(), timeout=30).framework == "fake"
        assert len(pool.restarts) == 1 and pool.restarts[0].startswith("fake at ")
    finally:
        pool.stop_all()


def test_memory_bytes_counts_a_process_with_its_descendants_and_zero_for_one_that_has_gone():
    alone = memory_bytes(os.getpid())
    assert alone > 1 << 20
    holding = subprocess.Popen(
        [sys.executable, "-c", "import time; x = bytearray(200 << 20); print(1, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    try:
        holding.stdout.readline()  # its 200 MiB are written
        assert memory_bytes(os.getpid()) - alone > 150 << 20
    finally:
        holding.kill()
        holding.wait()
    assert memory_bytes(2**22 + 1) == 0  # above the kernel's default pid_max
