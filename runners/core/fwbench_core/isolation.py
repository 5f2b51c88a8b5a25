"""Where a run executes apart from the gRPC handler that streams it, as the runner's run isolation says: on the
runner's framework thread; in a fresh worker process per run (worker_process); in a worker process kept for a block
of runs, so that a process's own offset is sampled every few runs; or in the worker of a named process block."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from queue import Queue
from typing import Any, TypeVar

from .choices import DeviceKind
from .devices import DeviceRef
from .errors import FailedPrecondition
from .worker_process import _END, _ERROR, _ITEM, Watch, WorkerProcess, stream_from_worker

T = TypeVar("T")


class RunIsolation(enum.Enum):
    THREAD = "thread"  # every run in the runner's own process, on its framework thread
    PROCESS = "process"  # every run in a fresh worker process
    PROCESS_ON_GPU = "process-on-gpu"  # GPU runs in a fresh worker process, CPU runs in the runner's process
    PROCESS_PER_2_RUNS = "process-per-2-runs"  # CPU runs: a worker process serves 2 runs, then a fresh one takes over

    def in_worker(self, device: DeviceRef) -> bool:
        """Whether a run on `device` runs in a worker process."""
        return self in (RunIsolation.PROCESS, RunIsolation.PROCESS_PER_2_RUNS) or (
            self is RunIsolation.PROCESS_ON_GPU and device.kind is DeviceKind.GPU
        )

    def runs_per_worker(self, device: DeviceRef) -> int:
        """How many runs on `device` one worker process serves before a fresh one takes over. A GPU run's worker
        never waits for a next run: idle, it would keep device memory from the runner measured next."""
        return 2 if self is RunIsolation.PROCESS_PER_2_RUNS and device.kind is DeviceKind.CPU else 1


def stream_on_thread(
    executor: Executor, events: Callable[[Callable[[], bool]], Iterator[T]], cancelled: Callable[[], bool]
) -> Iterator[T]:
    """Iterate `events(stop)` on the executor's thread and pass them on here; a caller that stops listening stops the
    run between steps, and returns only once it has stopped."""
    queue: Queue = Queue()
    abandoned = threading.Event()
    stop = lambda: cancelled() or abandoned.is_set()

    def produce() -> None:
        try:
            for event in events(stop):
                queue.put((_ITEM, event))
        except BaseException as error:
            queue.put((_ERROR, error))
        else:
            queue.put((_END, None))

    done = executor.submit(produce)
    try:
        while True:
            kind, payload = queue.get()
            if kind == _ERROR:
                raise payload
            if kind == _END:
                return
            yield payload
    finally:
        abandoned.set()
        done.result()  # the device is released only once the run has really stopped


class BlockWorker:
    """A worker process kept for a block of runs, then replaced by a fresh one: every block samples a process's own
    offset (its memory layout, where its threads run), which runs within one process share, at a fraction of the
    starts a fresh process per run costs. A run that finds it busy (two devices' runs at once) gets a fresh worker of
    its own; a run that does not end cleanly has ended it (WorkerProcess), and the next run starts a fresh block."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held by the run that uses the kept worker
        self._worker: WorkerProcess | None = None
        self._served = 0

    def stream(
        self, runs: int, work: Callable[..., Iterator[T]], args: tuple[Any, ...], cancelled: Callable[[], bool]
    ) -> Iterator[T]:
        """`work(*args, stop)` in the block's worker, the block `runs` runs long (1: a fresh worker, as
        stream_from_worker)."""
        if runs <= 1 or not self._lock.acquire(blocking=False):
            yield from stream_from_worker(work, args, cancelled)
            return
        try:
            if self._worker is None or not self._worker.reusable or self._served >= runs:
                self._end_block()
                self._worker = WorkerProcess()
            self._served += 1
            try:
                yield from self._worker.stream(work, args, cancelled)
            finally:
                if self._served >= runs:  # ended now, so that no idle process outlives its block
                    self._end_block()
        finally:
            self._lock.release()

    def end(self) -> None:
        """End the block's worker, if idle: its remaining runs then start a fresh block."""
        if self._lock.acquire(blocking=False):
            try:
                self._end_block()
            finally:
                self._lock.release()

    def _end_block(self) -> None:
        if self._worker is not None:
            worker, self._worker, self._served = self._worker, None, 0
            worker.close()


class ProcessBlocks:
    """The worker process of the current process block (RunRequest.process_block): runs naming the block run in it,
    one after another; a run naming another block ends it and starts a fresh one, and the block's run with end_reuse
    ends it once done. Every block's worker is spawned, a fresh interpreter that imports the framework itself, so
    that each block samples what a process carries from its start (where its libraries and heap landed). Workers
    forked from one server process per runner share that server's start, and kept its offset in every block twice
    over: before glibc's malloc thresholds were pinned (torch resnet18 training b2, b/a 0.998, 0.941 and 0.840 forked,
    1.030, 1.024 and 0.922 spawned), and after it on a quiet host (3 of 30 A/A comparisons called different, each
    pair 1.4-4% apart in all 8 blocks: docs/verdict.md). A run that finds the block's worker busy (runs on two devices
    at once) gets a fresh worker of its own, and a run that does not end cleanly ends the block (WorkerProcess)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held by the run that uses the block's worker
        self._block = ""
        self._worker: WorkerProcess | None = None

    def stream(
        self,
        block: str,
        ends: bool,
        work: Callable[..., Iterator[T]],
        args: tuple[Any, ...],
        cancelled: Callable[[], bool],
        watch: Watch | None = None,
    ) -> Iterator[T]:
        """`work(*args, stop)` in block `block`'s worker; with `ends`, the block ends after it."""
        if not self._lock.acquire(blocking=False):
            yield from stream_from_worker(work, args, cancelled, watch)
            return
        try:
            worker = self._worker
            if block != self._block or worker is None or not worker.reusable:
                worker = self._fresh(block)
            try:
                yield from worker.stream(work, args, cancelled, watch)
            finally:
                if ends:
                    self._end()
        finally:
            self._lock.release()

    def open(
        self, block: str, work: Callable[..., Iterator[T]], args: tuple[Any, ...], cancelled: Callable[[], bool]
    ) -> None:
        """Start block `block`'s worker before its first run, ending the current block, and make `work(*args, stop)`
        there (the framework's import): the block's runs then find it ready. A worker that fails here is closed, and
        the block's first run spawns a fresh one."""
        if not self._lock.acquire(blocking=False):
            raise FailedPrecondition(
                f"process block {self._block!r} has a run in its worker: open a block before its runs, not during them"
            )
        try:
            for _ in self._fresh(block).stream(work, args, cancelled):
                pass
        finally:
            self._lock.release()

    def end(self) -> None:
        """End the block's worker, if idle: a run outside any block ends the block before it runs."""
        if self._lock.acquire(blocking=False):
            try:
                self._end()
            finally:
                self._lock.release()

    def _end(self) -> None:
        if self._worker is not None:
            worker, self._worker, self._block = self._worker, None, ""
            worker.close()

    def _fresh(self, block: str) -> WorkerProcess:
        """End the current block's worker and start block `block`'s."""
        self._end()
        self._block, self._worker = block, WorkerProcess()
        return self._worker
