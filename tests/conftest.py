"""Shared fixtures: runner processes started once per session, and gRPC stubs to them.

The tests run in the aggregator's environment (no framework). The real runners
are started as subprocesses from their own environments (.venvs/torch,
.venvs/tensorflow, or $FWBENCH_VENVS) through fwbench_aggregator.run.launch, exactly
as the aggregator starts them; the fake runner runs from this environment.

A missing runner environment is a failure, not a skip: CI always builds them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

import grpc
import pytest


from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from fwbench_aggregator.run import launch
from support.runners import EXAMPLE_MODELS, FAKE_STEP_TIME_S, RUNNER_PARAMS
from support.timings import TestTimes

LOG_TAIL_CHARS = 3000


class Runner(NamedTuple):
    name: str
    address: str
    pid: int  # the runner's own process: its workers are its children


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

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def get(self, name: str) -> Runner:
        if name in self._failures:
            pytest.fail(self._failures[name], pytrace=False)
        if name not in self._runners:
            self._start(name)
        return Runner(name, self._runners[name].address, self._runners[name].process.pid)

    def _start(self, name: str) -> None:
        log_path = self.log_path(name)
        failure = None
        try:
            settings = launch.StartupSettings(reference_dir=str(self.reference_dir), models_dirs=(str(EXAMPLE_MODELS),))
            if name == "fake":
                command = [*launch.fake_runner_command(), "--reference-dir", settings.reference_dir,
                           "--models-dir", str(EXAMPLE_MODELS)]
                env = {"FWBENCH_FAKE_STEP_TIME_S": FAKE_STEP_TIME_S}
            else:
                command = launch.embedded_command(name, launch.default_venvs(), settings)
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


@pytest.fixture(scope="session")
def runner_logs(tmp_path_factory) -> Path:
    """Where the runners' stderr goes."""
    return tmp_path_factory.mktemp("runner-logs")


@pytest.fixture(scope="session")
def runner_pool(runner_logs, tmp_path_factory):
    pool = RunnerPool(runner_logs, tmp_path_factory.mktemp("references"))
    yield pool
    pool.stop_all()


@pytest.fixture(scope="session", params=RUNNER_PARAMS)
def runner(request, runner_pool) -> Runner:
    """(name, address) of a running runner; each is started once per session."""
    return runner_pool.get(request.param)


@pytest.fixture(scope="session")
def channel(runner):
    with grpc.insecure_channel(runner.address) as ch:
        yield ch


@pytest.fixture(scope="session")
def stub(channel) -> pb_grpc.RunnerStub:
    return pb_grpc.RunnerStub(channel)


@pytest.fixture(scope="module")
def fake_runner(tmp_path_factory):
    """The address of a fake runner of this module's own."""
    runner = launch.LocalRunner("fake", launch.fake_runner_command(), tmp_path_factory.mktemp("logs") / "fake.log")
    with runner:
        yield runner.address


_TEST_TIMES = TestTimes()
_SESSION_STARTED = time.monotonic()
# scripts/test.sh sets it for the pytest runs of its first part, which run side by side: it records that part's wall
# time itself, and the second part's run prints the table of all.
TABLE_LATER_ENV = "FWBENCH_TIMINGS_TABLE_LATER"


# Files with tests of these tiers run for minutes (real frameworks, a cluster, images); the others for seconds.
_LONG_TIERS = {"frameworks", "slurm", "containers"}


def pytest_collection_modifyitems(items):
    """The files that run for minutes first, each file's tests kept together and in order: pytest-xdist hands out
    whole files in this order (pytest.ini), and a long file handed out last would run alone at the end."""
    long_files = {item.path for item in items if _LONG_TIERS & {marker.name for marker in item.iter_markers()}}
    items.sort(key=lambda item: item.path not in long_files)


def pytest_runtest_logreport(report):
    # The report's keywords hold its test's markers, in this process and, under pytest-xdist, in the controller.
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        _TEST_TIMES.add(report.nodeid, set(report.keywords), report.duration)


def pytest_terminal_summary(terminalreporter):
    if os.environ.get("PYTEST_XDIST_WORKER") is not None or os.environ.get(TABLE_LATER_ENV):
        return
    for line in _TEST_TIMES.table(time.monotonic() - _SESSION_STARTED):
        terminalreporter.write_line(line)
