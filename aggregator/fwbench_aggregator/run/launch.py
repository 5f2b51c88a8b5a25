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

from ..base.frameworks import LABEL_SEPARATOR, framework_of, frameworks
from ..base.progress import Progress
from ..base.write_paths import open_own_file
from ..plan.spec import StartupSettings
from .connection import Transport

REPO_ROOT = Path(__file__).resolve().parents[3]
SETUP_SCRIPT = REPO_ROOT / "scripts" / "setup_envs.sh"

VENVS_ENV = "FWBENCH_VENVS"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
# The runner stops once its standard input closes: we hold the only write end, so it ends with us, kill -9 included.
EXIT_WITH_PARENT_FLAG = "--exit-with-parent"


class RunnerStartError(RuntimeError):
    pass


def default_venvs() -> Path:
    return Path(os.environ.get(VENVS_ENV, REPO_ROOT / ".venvs"))


def embedded_command(
    framework: str, venvs: Path, settings: StartupSettings = StartupSettings(), address: str = "127.0.0.1:0"
) -> list[str]:
    """The command that starts a framework's runner from its own environment under `venvs`, listening on
    `address` (port 0: a free one it picks)."""
    declared = frameworks()
    if framework_of(framework) not in declared:
        raise RunnerStartError(
            f"no embedded runner for {framework!r}; known: {', '.join(declared)}, or a label FRAMEWORK@VERSION of one"
        )
    python = environment_python(framework, venvs)
    if not python.exists():
        name, _, version = framework.partition(LABEL_SEPARATOR)
        setup = f"scripts/setup_version_env.sh {name} {version}" if version else f"scripts/setup_envs.sh {framework}"
        raise RunnerStartError(f"the {framework} runner environment is missing ({python}); run {setup} first")
    return [str(python), "-m", declared[framework_of(framework)].module, "--address", address, *settings.flags()]


def environment_python(framework: str, venvs: Path) -> Path:
    """Its environment's Python: a framework's own environment, or for a label FRAMEWORK@VERSION the folder of that
    name (scripts/setup_version_env.sh makes it)."""
    folder = framework if LABEL_SEPARATOR in framework else frameworks()[framework].environment
    return venvs / folder / "bin" / "python"


def ensure_environment(framework: str, venvs: Path, progress: Progress = Progress()) -> None:
    """Create a framework's embedded environment the first time it is named: set-up makes only those the default
    comparison needs, so that the first verdict comes sooner. Only from a checkout (scripts/setup_envs.sh); a
    failure is left to embedded_command to report."""
    if framework not in frameworks() or environment_python(framework, venvs).exists() or not SETUP_SCRIPT.exists():
        return
    progress.note(f"creating the {framework} environment under {venvs} (its first use; a few minutes)")
    done = subprocess.run(
        ["bash", str(SETUP_SCRIPT), framework],
        env={**os.environ, VENVS_ENV: str(venvs)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RunnerStartError(
            f"creating the {framework} environment failed (scripts/setup_envs.sh {framework}):\n"
            f"{(done.stdout + done.stderr)[-2000:]}"
        )


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
        # Never through a link, nor into another name of a file (base.write_paths): the log is appended to.
        log = (
            os.fdopen(open_own_file(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab")
            if self.log_path
            else subprocess.DEVNULL
        )
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
            state = f"exited with code {code}" if code is not None else f"did not start within {timeout_s:.0f} s"
            raise RunnerStartError(f"{self.name} runner {state}{self._log_tail()}")
        return json.loads(line[0])["address"]

    def _log_tail(self, lines: int = 12) -> str:
        """The end of its log, for a failure message: the log itself may be in a temporary folder."""
        if not self.log_path or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"; its log ({self.log_path}) ends:\n" + "\n".join(f"    {line}" for line in tail) if tail else ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> LocalRunner:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def fake_runner_command(address: str = "127.0.0.1:0") -> list[str]:
    """The framework-free runner, from this (the aggregator's) environment, listening on `address`."""
    return [sys.executable, "-m", "fwbench_core.fake", "--address", address]
