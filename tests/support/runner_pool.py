"""The session's runner processes: each started the first time a test asks for it, and restarted on its own port
where a test has grown it past a memory ceiling."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fwbench_aggregator.run import launch

from .processes import descendants
from .runners import EXAMPLE_MODELS, FAKE_STEP_TIME_S

LOG_TAIL_CHARS = 3000
# A session's runner grown past this much memory (with its workers) is restarted, on its own port,
# after the test that grew it: a TensorFlow runner keeps what its allocator took, and one at 8.1 GB was killed for
# memory in CI (2026-12-02, parity's gpt2_small) while the container tests ran beside it on a 24 GiB host.
RUNNER_MEMORY_CEILING_BYTES = 4 << 30


@dataclass(frozen=True)
class Runner:
    name: str
    address: str  # kept across a restart (RunnerPool.restart_grown)
    pool: RunnerPool

    @property
    def pid(self) -> int:
        """The runner's own process now: its workers are its descendants."""
        return self.pool.pid(self.name)


def _proportional_bytes(pid: int) -> int:
    """One process's proportional share of memory (Pss: a page n processes share counts 1/n in each); 0 if gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def memory_bytes(pid: int) -> int:
    """The memory a process and its descendants hold (a runner and its workers), each shared page
    counted once; 0 for one that has gone."""
    return sum(_proportional_bytes(member) for member in {pid, *descendants(pid)})


def _log_tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return text[-LOG_TAIL_CHARS:] or "(empty log)"


class RunnerPool:
    """Starts each runner the first time a test asks for it and keeps it for the session; all of them share
    one reference folder, as parity needs, and serve the example model plug-ins."""

    def __init__(self, log_dir: Path, reference_dir: Path) -> None:
        self.log_dir = log_dir
        self.reference_dir = reference_dir
        self._runners: dict[str, launch.LocalRunner] = {}
        self._failures: dict[str, str] = {}
        self.restarts: list[str] = []  # "NAME at N GiB", each time one grew past the ceiling

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def get(self, name: str) -> Runner:
        if name in self._failures:
            pytest.fail(self._failures[name], pytrace=False)
        if name not in self._runners:
            self._start(name)
        return Runner(name, self._runners[name].address, self)

    def pid(self, name: str) -> int:
        return self._runners[name].process.pid

    def restart_grown(self, ceiling_bytes: int = RUNNER_MEMORY_CEILING_BYTES) -> None:
        """Restart every runner grown past `ceiling_bytes` on the port it had, so that the channels the tests hold
        reach the new one."""
        for name, local in list(self._runners.items()):
            if (size := memory_bytes(local.process.pid)) > ceiling_bytes:
                local.stop()
                del self._runners[name]
                self.restarts.append(f"{name} at {size / (1 << 30):.1f} GiB")
                self._start(name, port=int(local.address.rsplit(":", 1)[1]))

    def _start(self, name: str, port: int = 0) -> None:
        log_path = self.log_path(name)
        failure = None
        try:
            settings = launch.StartupSettings(reference_dir=str(self.reference_dir), models_dirs=(str(EXAMPLE_MODELS),))
            address = f"127.0.0.1:{port}"
            if name == "fake":
                command = [
                    *launch.fake_runner_command(address),
                    "--reference-dir",
                    settings.reference_dir,
                    "--models-dir",
                    str(EXAMPLE_MODELS),
                ]
                env = {"FWBENCH_FAKE_STEP_TIME_S": FAKE_STEP_TIME_S}
            else:
                command = launch.embedded_command(name, launch.default_venvs(), settings, address)
                env = None
            local = launch.LocalRunner(name, command, log_path=log_path, env=env)
            local.start()
        except launch.RunnerStartError as exc:
            failure = f"cannot start the {name} runner: {exc}"
            if log_path.exists():
                failure += f"\n--- end of its log ({log_path}) ---\n{_log_tail(log_path)}"
        if failure is not None:
            self._failures[name] = failure
            pytest.fail(failure, pytrace=False)
        self._runners[name] = local

    def stop_all(self) -> None:
        for local in self._runners.values():
            local.stop()
        self._runners.clear()
