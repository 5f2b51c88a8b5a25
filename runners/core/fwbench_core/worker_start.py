"""What every worker process (a run's, a plug-in's, a distributed rank's) does first: the runner's malloc thresholds,
a session of its own in which it is its descendants' subreaper, Ctrl-C left to the runner, its log format, and a
watch that ends it, and all it started, with the runner however the runner ends."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading

from .allocator import pin_malloc
from .process_tree import become_worker, end_own_tree

log = logging.getLogger("fwbench.runner.worker")

WORKER_LOG_FORMAT = "%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s"


def start_worker(log_level: int) -> None:
    pin_malloc()  # as the runner's own process: a run allocates alike in either (allocator)
    become_worker()  # what its calls start stays below it, and ends with it (process_tree)
    # The parent decides when the run stops (a session of its own hears no terminal's Ctrl-C; a kill does).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=log_level, format=WORKER_LOG_FORMAT)
    threading.Thread(target=_exit_when_runner_ends, name="fwbench-runner-watch", daemon=True).start()


def _exit_when_runner_ends() -> None:
    """A runner that ends in any way, kill -9 included, takes its worker with it: nobody would read the run.
    (A daemonic worker is ended only by a runner that exits normally.)"""
    runner = multiprocessing.parent_process()
    assert runner is not None  # a worker is always started by a runner's multiprocessing
    runner.join()
    log.warning("the runner that started this worker has ended: the run ends with it")
    end_own_tree()
    os._exit(1)
