"""A plug-in's processes end with its worker: what its code forks, detaches into a session of its own or double-forks
is killed and reaped when the worker closes, is killed with it when it outlives its phase, and, where the worker
itself dies, is ended by the runner (a subreaper) before its next run. Its prints reach the runner's log up to
MAX_WORKER_OUTPUT_BYTES, then one line says how much was dropped. Real processes; over gRPC with torch:
tests/test_hostile_plugins.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.processes import alive

from fwbench_core.errors import DeadlineExceeded
from fwbench_core.limits import MAX_WORKER_OUTPUT_BYTES
from fwbench_core.worker_process import Watch, WorkerProcess

NOT_CANCELLED = lambda: False
TESTS = Path(__file__).resolve().parent


def _busy_child() -> int:
    pid = os.fork()
    if pid == 0:
        while True:
            pass
    return pid


def _double_forked_sleep() -> int:
    """A sleep whose parent exits at once: an orphan, the classic daemon."""
    read, write = os.pipe()
    if os.fork() == 0:
        sleeper = subprocess.Popen(["sleep", "61"], start_new_session=True)
        os.write(write, str(sleeper.pid).encode())
        os._exit(0)
    os.close(write)
    return int(os.read(read, 32))


def leaves_processes(stop):
    """A build that leaves a busy forked child, a detached sleep and a double-forked sleep."""
    detached = subprocess.Popen(["sleep", "61"], start_new_session=True).pid
    yield [_busy_child(), detached, _double_forked_sleep()]


def leaves_processes_then_hangs(stop):
    yield "started"
    yield [_busy_child(), subprocess.Popen(["sleep", "61"], start_new_session=True).pid]
    while True:
        time.sleep(0.1)


def dies_leaving_a_sleep(pid_file, stop):
    Path(pid_file).write_text(str(subprocess.Popen(["sleep", "61"], start_new_session=True).pid))
    os._exit(3)
    yield


def prints(stop):
    chunk = "x" * (1 << 20) + "\n"
    for _ in range(3):
        sys.stdout.write(chunk)
        sys.stderr.write(chunk)
    sys.stdout.flush()
    yield "printed"


def test_what_a_plugins_code_started_ends_when_its_worker_closes():
    worker = WorkerProcess()
    [left] = worker.stream(leaves_processes, (), NOT_CANCELLED)
    time.sleep(0.2)
    assert all(alive(pid) for pid in left), "the processes started"
    worker.close()
    assert [pid for pid in left if alive(pid)] == []


def test_what_a_plugins_code_started_ends_with_a_phase_past_its_limit():
    worker = WorkerProcess()
    left = []
    watch = Watch("plug-in hangs", 1.0, lambda item: "build()" if item == "started" else None)
    with pytest.raises(DeadlineExceeded, match="plug-in hangs: build\\(\\) did not return within 1 s"):
        for item in worker.stream(leaves_processes_then_hangs, (), NOT_CANCELLED, watch):
            left += item if isinstance(item, list) else []
    assert len(left) == 2 and [pid for pid in left if alive(pid)] == []


def test_a_runner_ends_what_a_worker_that_died_left_before_its_next_run(tmp_path):
    # The worker dies at once (no tree of its own to end): its detached sleep comes back to the runner, a subreaper,
    # which kills and reaps it. In a process of its own, as a runner is.
    pid_file = tmp_path / "sleep-pid"
    script = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from fwbench_core import process_tree
from fwbench_core.worker_process import WorkerProcess
from test_plugin_processes import dies_leaving_a_sleep
assert process_tree.become_subreaper()
worker = WorkerProcess()
try:
    list(worker.stream(dies_leaving_a_sleep, ({str(pid_file)!r},), lambda: False))
except Exception as error:
    print(type(error).__name__)
worker.close()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "RunnerError"
    assert "killed 1 processes that an earlier plug-in's worker left running" in done.stderr
    assert not alive(int(pid_file.read_text()))


def test_a_workers_prints_reach_the_log_up_to_the_cap_and_one_line_says_what_was_dropped(capfd):
    worker = WorkerProcess()
    assert list(worker.stream(prints, (), NOT_CANCELLED)) == ["printed"]
    worker.close()
    out, err = capfd.readouterr()
    printed = 6 * ((1 << 20) + 1)
    note = (
        f"[fwbench] worker process {worker._process.pid}: {printed - MAX_WORKER_OUTPUT_BYTES} bytes of its "
        f"output dropped past {MAX_WORKER_OUTPUT_BYTES} bytes (MAX_WORKER_OUTPUT_BYTES)"
    )
    assert out == "" and note in err
    assert len(err) <= MAX_WORKER_OUTPUT_BYTES + len(note) + 2
