"""Shared fixtures: runner processes started once per session, and gRPC stubs to them.

The tests run in the aggregator's environment (no framework). The real runners
are started as subprocesses from their own environments (.venvs/torch,
.venvs/tensorflow, or $FWBENCH_VENVS) through fwbench_aggregator.run.launch, exactly
as the aggregator starts them; the fake runner runs from this environment.

A missing runner environment is a failure, not a skip: CI always builds them.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.distributed import two_runners, workers_of
from support.fakes import Fake, fake_starter
from support.runner_pool import RUNNER_MEMORY_CEILING_BYTES, Runner, RunnerPool
from support.runners import RUNNER_PARAMS
from support.timings import TestTimes


@pytest.fixture(scope="session")
def runner_logs(tmp_path_factory) -> Path:
    """Where the runners' stderr goes."""
    return tmp_path_factory.mktemp("runner-logs")


@pytest.fixture(scope="session")
def runner_pool(runner_logs, tmp_path_factory):
    pool = RunnerPool(runner_logs, tmp_path_factory.mktemp("references"))
    yield pool
    pool.stop_all()
    if pool.restarts:
        print(
            f"\nrunners restarted past {RUNNER_MEMORY_CEILING_BYTES >> 30} GiB: {', '.join(pool.restarts)}",
            file=sys.__stderr__,
        )


@pytest.fixture(autouse=True)
def _runners_within_memory(request):
    """After a test that used the session's runners, restart those it grew past the ceiling."""
    yield
    if "runner_pool" in request.fixturenames:
        request.getfixturevalue("runner_pool").restart_grown()


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


@pytest.fixture
def fakes(tmp_path_factory):
    """Starts fake runners for this test: fakes(Fake(...), ...) -> support.fakes.Fakes; all stop after it."""
    with fake_starter(tmp_path_factory) as start:
        yield start


@pytest.fixture(scope="module")
def module_fakes(tmp_path_factory):
    """Starts fake runners for this module: module_fakes(Fake(...), ...) -> support.fakes.Fakes; all stop after its
    last test."""
    with fake_starter(tmp_path_factory) as start:
        yield start


@pytest.fixture(scope="module")
def fake_runner(module_fakes) -> str:
    """The address of a fake runner of this module's own, at the fake's default step time."""
    return module_fakes(Fake()).addresses["fake"]


@pytest.fixture(scope="module")
def fake_address(module_fakes) -> str:
    """The address of a fake runner of this module's own whose steps take 1 ms."""
    return module_fakes(Fake(step_s=0.001)).addresses["fake"]


@pytest.fixture(scope="module")
def runners(request, tmp_path_factory):
    """Two embedded runners of the framework the module names in MACHINES_FRAMEWORK, each a "machine" of a
    distributed job: (LocalRunner, stub) pairs."""
    framework = request.module.MACHINES_FRAMEWORK
    with two_runners(framework, tmp_path_factory.mktemp(f"distributed-{framework}-logs")) as pairs:
        yield pairs


@pytest.fixture
def nothing_left_behind(runners):
    """After the test, neither of the module's two machines has a worker process left."""
    yield
    for local, _ in runners:
        assert workers_of(local) == [], f"{local.name} left worker processes"


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
