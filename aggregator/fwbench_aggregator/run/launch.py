"""Starting runners as local processes (the embedded default) and waiting until they serve."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from .connection import Transport
from .frameworks import frameworks

REPO_ROOT = Path(__file__).resolve().parents[2]

VENVS_ENV = "FWBENCH_VENVS"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
# The runner stops once its standard input closes: we hold the only write end, so it ends with us, kill -9 included.
EXIT_WITH_PARENT_FLAG = "--exit-with-parent"


class RunnerStartError(RuntimeError):
    pass


def default_venvs() -> Path:
    return Path(os.environ.get(VENVS_ENV, REPO_ROOT / ".venvs"))


@dataclass(frozen=True)
class StartupSettings:
    """What a runner fixes when it starts; the aggregator starts every embedded runner with the same."""

    intra_op_threads: int = os.cpu_count() or 1
    inter_op_threads: int = os.cpu_count() or 1
    cudnn_autotune: str = "off"
    reference_dir: str = ""  # the parity reference folder they share; empty: each its own private one

    def flags(self) -> list[str]:
        return [
            "--intra-op-threads", str(self.intra_op_threads),
            "--inter-op-threads", str(self.inter_op_threads),
            "--cudnn-autotune", self.cudnn_autotune,
            *(["--reference-dir", self.reference_dir] if self.reference_dir else []),
        ]


def embedded_command(
    framework: str, venvs: Path, settings: StartupSettings = StartupSettings(), address: str = "127.0.0.1:0"
) -> list[str]:
    """The command that starts a framework's runner from its own environment under `venvs`, listening on
    `address` (port 0: a free one it picks)."""
    declared = frameworks()
    if framework not in declared:
        raise RunnerStartError(f"no embedded runner for {framework!r}; known: {', '.join(declared)}")
    python = venvs / declared[framework].environment / "bin" / "python"
    if not python.exists():
        raise RunnerStartError(
            f"the {framework} runner environment is missing ({python}); run scripts/setup_envs.sh first"
        )
    return [str(python), "-m", declared[framework].module, "--address", address, *settings.flags()]


def wait_until_serving(address: str, timeout_s: float, transport: Transport = Transport()) -> None:
    deadline = time.monotonic() + timeout_s
    with transport.channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise RunnerStartError(f"runner at {address} did not report SERVING within {timeout_s:.0f} s")
            time.sleep(0.2)


@dataclass
class LocalRunner:
    """A runner process on this machine, listening on a free loopback port it picked itself."""

    name: str
    command: list[str]
    log_path: Path | None = None
    env: dict[str, str] | None = None
    transport: Transport = Transport()  # how to reach it once it listens
    process: subprocess.Popen | None = None
    address: str = ""

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [*self.command, EXIT_WITH_PARENT_FLAG],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env={**os.environ, **(self.env or {})},
            start_new_session=True,
        )
        if self.log_path:
            log.close()
        self.address = self._read_address(timeout_s)
        try:
            wait_until_serving(self.address, timeout_s, self.transport)
        except RunnerStartError:
            self.stop()
            raise
        return self.address

    def _read_address(self, timeout_s: float) -> str:
        # The runner prints one JSON line once it listens; read it off a thread
        # so that a runner that hangs before printing cannot hang us.
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        if not line or not line[0]:
            code = self.process.poll()
            self.stop()
            where = f"; its log: {self.log_path}" if self.log_path else ""
            state = f"exited with code {code}" if code is not None else f"did not start within {timeout_s:.0f} s"
            raise RunnerStartError(f"{self.name} runner {state}{where}")
        return json.loads(line[0])["address"]

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> "LocalRunner":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def fake_runner_command() -> list[str]:
    """The framework-free runner, from this (the aggregator's) environment."""
    return [sys.executable, "-m", "fwbench_core.fake", "--address", "127.0.0.1:0"]
