"""Running one run in a fresh worker process, so that every byte of device memory it took goes back
to the device when the worker exits (TensorFlow's allocator never gives memory back while its process lives)."""

from __future__ import annotations

import enum
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import DeadlineExceeded, FailedPrecondition, RunnerError, error_from_status, reason_for, status_for
from .choices import DeviceKind
from .spec import DeviceRef

log = logging.getLogger("fwbench.runner.worker")

# How often the parent looks at the client's cancellation while it waits for the worker's next event.
CANCEL_POLL_S = 0.1
# How long a worker asked to stop (cancelled, or its caller gone) has to end before it is killed: a run stops
# between steps, so only code that never returns (a user's) outlives it.
STOP_GRACE_S = 30.0
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


@dataclass(frozen=True)
class Watch:
    """A worker that runs a user's code (a plug-in's builder): what it runs, for messages ("plug-in tiny (…/build_torch.py)"),
    how long each phase of that code may keep the worker silent, and the phase each item the worker sends starts
    ("" where no limit applies, as while a run measures). A worker silent past its phase's limit is killed, and a
    worker that ends in a phase is named with it."""

    subject: str
    limit_s: float
    phase_after: Callable[[Any], str | None]  # None: the phase goes on


def stream_from_worker(
    work: Callable[..., Iterator[T]], args: tuple[Any, ...], cancelled: Callable[[], bool], watch: Watch | None = None
) -> Iterator[T]:
    """Iterate `work(*args, stop)` in a fresh spawned process and pass its items on here.

    `work`, `args` and the items must pickle. The client's cancellation, or a caller that stops
    listening, sets `stop` in the worker, which stops the run between steps; a worker that does not stop within
    STOP_GRACE_S (a user's code that never returns) is killed. An error in the worker arrives as a RunnerError
    with the same gRPC status, message and reason; with a `watch`, a phase that outlives its limit is a
    DeadlineExceeded and a worker that ends mid-phase a FailedPrecondition, both naming the code and the phase.
    Returns only once the worker has exited, so that the device is free when the caller releases its lock.
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
    phase, deadline = "", None
    try:
        while True:
            if cancelled():
                stop.set()
            if deadline is not None and time.monotonic() > deadline:
                worker.kill()
                raise DeadlineExceeded(f"{watch.subject}: {phase} did not return within {watch.limit_s:g} s; the "
                                       "runner stopped it and serves on")
            if not receiver.poll(CANCEL_POLL_S):
                continue
            try:
                kind, payload = receiver.recv()
            except EOFError:
                worker.join()
                if watch is not None:
                    raise FailedPrecondition(f"{watch.subject}: the process running it ended (exit code "
                                             f"{worker.exitcode}) {f'during {phase}' if phase else 'before it finished'}; "
                                             "the runner serves on") from None
                raise RunnerError(
                    f"the run's worker process (pid {worker.pid}) exited with code {worker.exitcode} before the "
                    "run ended; the runner's log has the worker's last words"
                ) from None
            if kind == _END:
                return
            if kind == _ERROR:
                raise error_from_status(*payload)
            yield payload
            if watch is not None and (after := watch.phase_after(payload)) is not None:
                phase, deadline = after, (time.monotonic() + watch.limit_s if after else None)
    finally:
        stop.set()
        _drain_and_end(worker, receiver)


def _drain_and_end(worker, receiver) -> None:
    """Read on until the worker has gone (one blocked on a full pipe would never exit), for STOP_GRACE_S at most:
    then kill it."""
    give_up_at = time.monotonic() + STOP_GRACE_S
    with suppress(EOFError, OSError):
        while (left_s := give_up_at - time.monotonic()) > 0 and receiver.poll(left_s):
            receiver.recv()
    if worker.is_alive():
        worker.join(max(0.0, give_up_at - time.monotonic()))
    if worker.is_alive():
        log.warning("the worker process (pid %d) did not stop within %.0f s of being asked: killed", worker.pid,
                    STOP_GRACE_S)
        worker.kill()
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
