"""Running one run in a fresh worker process, so that every byte of device memory it took goes back
to the device when the worker exits (TensorFlow's allocator never gives memory back while its process lives)."""

from __future__ import annotations

import enum
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any, TypeVar

from .errors import RunnerError, error_from_status, reason_for, status_for
from .spec import DeviceKind, DeviceRef

log = logging.getLogger("fwbench.runner.worker")

# How often the parent looks at the client's cancellation while it waits for the worker's next event.
CANCEL_POLL_S = 0.1
WORKER_LOG_FORMAT = "%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s"
T = TypeVar("T")

# What the worker sends through its pipe: (kind, payload).
_ITEM, _ERROR, _END = "item", "error", "end"


class RunIsolation(enum.Enum):
    THREAD = "thread"                  # every run in the runner's own process, on its framework thread
    PROCESS = "process"                # every run in a fresh worker process
    PROCESS_ON_GPU = "process-on-gpu"  # GPU runs in a fresh worker process, CPU runs in the runner's process

    def in_worker(self, device: DeviceRef) -> bool:
        """Whether a run on `device` gets a fresh worker process."""
        return self is RunIsolation.PROCESS or (self is RunIsolation.PROCESS_ON_GPU and device.kind is DeviceKind.GPU)


def stream_from_worker(
    work: Callable[..., Iterator[T]], args: tuple[Any, ...], cancelled: Callable[[], bool]
) -> Iterator[T]:
    """Iterate `work(*args, stop)` in a fresh spawned process and pass its items on here.

    `work`, `args` and the items must pickle. The client's cancellation, or a caller that stops
    listening, sets `stop` in the worker, which stops the run between steps. An error in the worker
    arrives as a RunnerError with the same gRPC status, message and reason. Returns only once the worker
    has exited, so that the device is free when the caller releases its lock.
    """
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    stop = context.Event()
    worker = context.Process(
        target=_worker_main,
        args=(work, args, sender, stop, logging.getLogger().getEffectiveLevel()),
        name="fwbench-run-worker",
        daemon=True,  # a runner that exits takes its worker with it
    )
    worker.start()
    sender.close()  # the worker holds the only writer now: its exit ends our reads
    try:
        while True:
            if cancelled():
                stop.set()
            if not receiver.poll(CANCEL_POLL_S):
                continue
            try:
                kind, payload = receiver.recv()
            except EOFError:
                worker.join()
                raise RunnerError(
                    f"the run's worker process (pid {worker.pid}) exited with code {worker.exitcode} before the "
                    "run ended; the runner's log has the worker's last words"
                ) from None
            if kind == _END:
                return
            if kind == _ERROR:
                raise error_from_status(*payload)
            yield payload
    finally:
        stop.set()
        # Read on until the worker has gone: one blocked on a full pipe would never exit.
        with suppress(EOFError, OSError):
            while True:
                receiver.recv()
        worker.join()
        receiver.close()


def _worker_main(work, args, sender, stop, log_level: int) -> None:
    """The worker process: one run, every event sent to the parent, then exit."""
    # Ctrl-C reaches the whole process group; the parent decides when the run stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=log_level, format=WORKER_LOG_FORMAT)
    threading.Thread(target=_exit_when_runner_ends, name="fwbench-runner-watch", daemon=True).start()
    try:
        for item in work(*args, stop.is_set):
            sender.send((_ITEM, item))
    except Exception as error:
        if not isinstance(error, RunnerError):
            log.exception("run failed in the worker process")
        # The status, message and reason cross the process boundary; a framework's exception may not pickle.
        sender.send((_ERROR, (*status_for(error), reason_for(error))))
    else:
        sender.send((_END, None))
    finally:
        sender.close()


def _exit_when_runner_ends() -> None:
    """A runner that ends in any way, kill -9 included, takes its worker with it: nobody would read the run.
    (A daemonic worker is ended only by a runner that exits normally.)"""
    multiprocessing.parent_process().join()
    log.warning("the runner that started this worker has ended: the run ends with it")
    os._exit(1)
