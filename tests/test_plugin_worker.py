"""The worker process kept for a plug-in's calls (worker_process.WorkerProcess, plugin_worker.PluginWorkers): call
after call in one process while each ends cleanly; ended by a call that fails or is abandoned, by close, and by work on
anything else. Over real gRPC with a real framework: tests/test_hostile_plugins.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fwbench_core.errors import InvalidArgument
from fwbench_core.models import ModelSource
from fwbench_core.plugin_worker import PluginWorkers
from fwbench_core.worker_process import WorkerProcess, stream_from_worker

NOT_CANCELLED = lambda: False


def its_pid(stop):
    yield os.getpid()


def refuses(stop):
    raise InvalidArgument("batch_size must be positive")
    yield


def pid_then_steps(stop):
    yield os.getpid()
    while not stop():
        time.sleep(0.01)
        yield "step"


def gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def test_a_worker_makes_call_after_call_in_one_process_until_closed():
    worker = WorkerProcess()
    [first] = worker.stream(its_pid, (), NOT_CANCELLED)
    [second] = worker.stream(its_pid, (), NOT_CANCELLED)
    assert first == second != os.getpid() and worker.reusable
    worker.close()
    assert not worker.reusable and gone(first)


def test_a_call_that_fails_ends_its_worker_with_the_error_it_raised():
    worker = WorkerProcess()
    [pid] = worker.stream(its_pid, (), NOT_CANCELLED)
    with pytest.raises(InvalidArgument, match="batch_size must be positive"):
        list(worker.stream(refuses, (), NOT_CANCELLED))
    assert not worker.reusable and gone(pid)
    with pytest.raises(RuntimeError, match="a closed worker process"):
        list(worker.stream(its_pid, (), NOT_CANCELLED))


def test_a_call_its_caller_stops_listening_to_ends_its_worker():
    worker = WorkerProcess()
    call = worker.stream(pid_then_steps, (), NOT_CANCELLED)
    pid = next(call)
    assert next(call) == "step"
    call.close()
    assert not worker.reusable and gone(pid)


def test_a_one_call_worker_has_ended_when_its_stream_ends():
    [pid] = stream_from_worker(its_pid, (), NOT_CANCELLED)
    assert pid != os.getpid() and gone(pid)


def plugin(name: str, content_hash: str) -> ModelSource:
    return ModelSource("--models-dir", f"/models/{name}", content_hash)


def pid_in(workers: PluginWorkers, source: ModelSource, keep: bool = True) -> int:
    with workers.worker_for(source, keep) as worker:
        [pid] = worker.stream(its_pid, (), NOT_CANCELLED)
    return pid


def test_one_worker_is_kept_for_one_version_of_one_plugin():
    workers = PluginWorkers()
    tiny = plugin("tiny", "sha256:1")
    kept = pid_in(workers, tiny)
    assert pid_in(workers, tiny) == kept
    edited = pid_in(workers, plugin("tiny", "sha256:2"))
    assert edited != kept and gone(kept)
    other = pid_in(workers, plugin("other", "sha256:1"))
    assert other != edited and gone(edited)
    workers.close_idle()
    assert gone(other)


def test_a_call_that_may_not_keep_or_finds_the_kept_worker_busy_gets_a_fresh_one_closed_after_it():
    workers = PluginWorkers()
    tiny = plugin("tiny", "sha256:1")
    kept = pid_in(workers, tiny)
    fresh = pid_in(workers, tiny, keep=False)
    assert fresh != kept and gone(fresh) and not gone(kept)
    with workers.worker_for(tiny, keep=True) as busy:
        [in_use] = busy.stream(its_pid, (), NOT_CANCELLED)
        beside = pid_in(workers, tiny)
        workers.close_idle()  # a call is using it: it stays
        assert in_use == kept and beside != kept and gone(beside) and not gone(kept)
    workers.close_idle()
    assert gone(kept)
