"""A spawned worker process that makes one call after another, each streamed back to the runner (WorkerProcess), a
fresh one for one run (stream_from_worker), and its side of the pipe: so that every byte of device memory a run took
goes back to the device when the worker exits (TensorFlow's allocator never gives memory back while its process
lives), and a plug-in's code never runs in the runner's process."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import DeadlineExceeded, FailedPrecondition, RunnerError, error_from_status, reason_for, status_for
from .process_tree import end_own_tree, end_strays, kill_tree
from .worker_output import CappedCopy, redirect_output
from .worker_start import start_worker

log = logging.getLogger("fwbench.runner.worker")

# How often the parent looks at the client's cancellation while it waits for the worker's next event.
CANCEL_POLL_S = 0.1
# How long a worker asked to stop (cancelled, or its caller gone) has to end before it is killed: a run stops
# between steps, so only code that never returns (a user's) outlives it.
STOP_GRACE_S = 30.0
T = TypeVar("T")

# What the worker sends through its pipe (and stream_on_thread through its queue): (kind, payload).
_ITEM, _ERROR, _END = "item", "error", "end"


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
    """Iterate `work(*args, stop)` in a fresh spawned process and pass its items on here (WorkerProcess.stream).
    Returns only once the worker has exited, so that the device is free when the caller releases its lock."""
    worker = WorkerProcess()
    try:
        yield from worker.stream(work, args, cancelled, watch)
    finally:
        worker.close()


class WorkerProcess:
    """A spawned worker process that makes one call after another, each streamed back: kept between the calls of one
    plug-in, it keeps its framework imported and its builds warm. A call that does not end cleanly (an error, a
    crash, a phase past its limit, a caller that stops listening) ends the process, and `reusable` turns false."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        calls_reader, self._calls = context.Pipe(duplex=False)
        self._receiver, sender = context.Pipe(duplex=False)
        output_reader, output_writer = context.Pipe(duplex=False)
        self._stop = context.Event()
        self._process = context.Process(
            target=_serve_calls,
            args=(calls_reader, sender, self._stop, logging.getLogger().getEffectiveLevel(), output_writer),
            name="fwbench-run-worker",
            daemon=True,  # a runner that exits takes its worker with it
        )
        self._process.start()
        # The worker holds the only writer of its events and output and the only reader of its calls now: its exit
        # ends our reads, and our close ends its wait for the next call.
        for end in (sender, calls_reader, output_writer):
            end.close()
        self._output = CappedCopy(output_reader, f"worker process {self._process.pid}")
        self._closed = False

    @property
    def reusable(self) -> bool:
        return not self._closed and self._process.is_alive()

    def stream(
        self,
        work: Callable[..., Iterator[T]],
        args: tuple[Any, ...],
        cancelled: Callable[[], bool],
        watch: Watch | None = None,
    ) -> Iterator[T]:
        """Iterate `work(*args, stop)` in this worker and pass its items on here.

        `work`, `args` and the items must pickle. The client's cancellation, or a caller that stops listening, sets
        `stop` in the worker, which stops the run between steps; a worker that does not stop within STOP_GRACE_S (a
        user's code that never returns) is killed. An error in the worker arrives as a RunnerError with the same gRPC
        status, message and reason; with a `watch`, a phase that outlives its limit is a DeadlineExceeded and a worker
        that ends mid-phase a FailedPrecondition, both naming the code and the phase. Any end but the call's own
        clean end closes the worker before this returns."""
        if not self.reusable:
            raise RuntimeError("a closed worker process was given another call")
        self._stop.clear()
        self._calls.send((work, args))
        phase, deadline, ended = "", None, False
        try:
            while True:
                if cancelled():
                    self._stop.set()
                if watch is not None and deadline is not None and time.monotonic() > deadline:
                    kill_tree(self._process)
                    raise DeadlineExceeded(
                        f"{watch.subject}: {phase} did not return within {watch.limit_s:g} s; the "
                        "runner stopped it and serves on"
                    )
                # A worker that died while a process it started holds its pipe open has ended all the same.
                if not self._receiver.poll(CANCEL_POLL_S) and self._process.is_alive():
                    continue
                try:
                    if not self._receiver.poll(0):
                        raise EOFError
                    kind, payload = self._receiver.recv()
                except EOFError:
                    self._process.join()
                    exit_code = self._process.exitcode
                    if watch is not None:
                        raise FailedPrecondition(
                            f"{watch.subject}: the process running it ended (exit code "
                            f"{exit_code}) {f'during {phase}' if phase else 'before it finished'}; "
                            "the runner serves on"
                        ) from None
                    raise RunnerError(
                        f"the run's worker process (pid {self._process.pid}) exited with code {exit_code} before "
                        "the run ended; the runner's log has the worker's last words"
                    ) from None
                if kind == _END:
                    ended = True
                    return
                if kind == _ERROR:
                    raise error_from_status(*payload)
                yield payload
                if watch is not None and (after := watch.phase_after(payload)) is not None:
                    phase, deadline = after, (time.monotonic() + watch.limit_s if after else None)
        finally:
            if not ended:
                self.close()

    def close(self) -> None:
        """Ask the worker to stop and end, and wait until it has (killed after STOP_GRACE_S)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        with suppress(OSError):
            self._calls.close()
        _drain_and_end(self._process, self._receiver)
        end_strays()  # first: a stray may hold the output's pipe open
        self._output.finish()


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
        log.warning(
            "the worker process (pid %d) did not stop within %.0f s of being asked: killed", worker.pid, STOP_GRACE_S
        )
        kill_tree(worker)
    worker.join()
    receiver.close()


def _worker_main(work, args, sender, stop, log_level: int) -> None:
    """A worker process of one call: its every event sent to the parent, then the end of the pipe."""
    start_worker(log_level)
    try:
        _one_call(work, args, sender, stop)
    finally:
        end_own_tree()
        sender.close()


def _serve_calls(calls, sender, stop, log_level: int, output) -> None:
    """A WorkerProcess: each call the parent sends, in turn, until the parent closes its end; then an exit that skips
    the interpreter's teardown (seconds for a framework that frees gigabytes one object at a time), and takes every
    process its calls started with it. Its stdout and stderr go to `output` (worker_output)."""
    redirect_output(output)
    start_worker(log_level)
    exit_code = 0
    try:
        while True:
            try:
                work, args = calls.recv()
            except EOFError:
                break
            _one_call(work, args, sender, stop)
    except BaseException:
        log.exception("the worker process failed between calls")
        exit_code = 1
    end_own_tree()
    sender.close()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


def _one_call(work, args, sender, stop) -> None:
    """`work(*args, stop)`, each item sent to the parent, then its end or its error."""
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
