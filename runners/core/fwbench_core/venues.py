"""The five places a run executes, each a Venue (venue.py), and the one place that chooses among them and ends, before a
run, what the others keep that must not sit beside it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from .apart import apart_phase_after, called_apart
from .backend import Backend
from .choices import DeviceKind
from .devices import DeviceRef
from .distributed import run_distributed
from .isolation import BlockWorker, ProcessBlocks, RunIsolation, stream_on_thread
from .models import ModelSpec
from .plugin_modules import builder_file
from .plugin_worker import PluginWorkers
from .run_path import (
    Resolved,
    RunEvent,
    RunPath,
    backend_in_worker,
    prepare_in_worker,
    run_in_worker,
    run_phase_after,
    run_rank,
)
from .runs import RunConfig
from .venue import Venue
from .worker_process import Watch

T = TypeVar("T")
MakeBackend = Callable[[], Backend]


@dataclass(frozen=True)
class PluginLimit:
    """How a worker that runs a plug-in's code is watched: the framework whose builder file it runs, and how long each
    phase of that code may take (plugins.PLUGIN_LIMIT_S)."""

    framework: str
    limit_s: float

    def watch(self, spec: ModelSpec, phase_after: Callable[[Any], str | None]) -> Watch:
        return Watch(
            f"plug-in {spec.name} ({Path(spec.source.folder) / builder_file(self.framework)})",
            self.limit_s,
            phase_after,
        )


class ThreadVenue(Venue):
    """The runner's framework thread: built-in runs where the run isolation keeps them in the runner's process. It keeps
    a run's build for a next run under the same reuse key (run_path.RunPath)."""

    def __init__(self, runs: RunPath) -> None:
        self._runs = runs
        # All framework work (builds, steps, inspection) runs on this one thread. PyTorch's OpenMP gives
        # every thread that runs ops its own worker team; with more workers than cores, libgomp spins
        # less and every op slows by about 20%, for good, once a second gRPC handler thread has run torch.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fwbench-framework")

    def stream(self, config: RunConfig, total: int, cancelled: Callable[[], bool]) -> Iterator[RunEvent]:
        run = lambda stop: self._runs.run(config, total, stop, keep=True)
        yield from stream_on_thread(self._thread, run, cancelled)

    def release(self) -> None:
        self._thread.submit(self._runs.drop_kept).result()

    def call(self, work: Callable[[], T]) -> T:
        """Other work on the framework thread (inspection, parity), the kept build freed first: it may reset the
        framework's state."""
        return self._thread.submit(self._without_kept, work).result()

    def _without_kept(self, work: Callable[[], T]) -> T:
        self._runs.drop_kept()
        return work()


class IsolatedWorkerVenue(Venue):
    """A worker process as the run isolation says (--run-isolation): a fresh one for each run, or one kept for a block
    of CPU runs (isolation.BlockWorker)."""

    def __init__(self, isolation: RunIsolation, make_backend: MakeBackend | None) -> None:
        self._isolation, self._make_backend = isolation, make_backend
        self._workers = BlockWorker()

    def stream(self, config: RunConfig, total: int, cancelled: Callable[[], bool]) -> Iterator[RunEvent]:
        yield from self._workers.stream(
            self._isolation.runs_per_worker(config.device.ref),
            run_in_worker,
            (self._make_backend, config, total),
            cancelled,
        )

    def release(self) -> None:
        self._workers.end()


class PluginWorkerVenue(Venue):
    """A worker process for a plug-in's runs, inspection and parity work, so that its code never runs in the runner's
    process; kept for the plug-in's next call where its runs would otherwise run in the runner's process
    (plugin_worker.PluginWorkers)."""

    def __init__(self, isolation: RunIsolation, make_backend: MakeBackend | None, limit: PluginLimit) -> None:
        self._isolation, self._make_backend, self._limit = isolation, make_backend, limit
        self._workers = PluginWorkers()

    def stream(self, config: RunConfig, total: int, cancelled: Callable[[], bool]) -> Iterator[RunEvent]:
        keep = not self._isolation.in_worker(config.device.ref)
        with self._workers.worker_for(config.model.source, keep) as worker:
            yield from worker.stream(
                run_in_worker,
                (self._make_backend, config, total),
                cancelled,
                self._limit.watch(config.model, run_phase_after),
            )

    def call(self, spec: ModelSpec, method: str, args: tuple, cancelled: Callable[[], bool]):
        """The backend's `method(*args)`, which builds plug-in `spec`, in its worker; its result brought back."""
        assert self._make_backend is not None  # a plug-in's work comes here only where the runner starts workers
        keep = not self._isolation.in_worker(DeviceRef(DeviceKind.CPU))
        with self._workers.worker_for(spec.source, keep) as worker:
            return called_apart(
                worker,
                functools.partial(backend_in_worker, self._make_backend),
                method,
                args,
                cancelled,
                self._limit.watch(spec, apart_phase_after(method)),
            )

    def release(self) -> None:
        self._workers.close_idle()


class ProcessBlockVenue(Venue):
    """The worker process of the current process block (RunRequest.process_block; isolation.ProcessBlocks), opened
    before the block's first run or by it."""

    def __init__(
        self, make_backend: MakeBackend | None, limit: PluginLimit, contained: Callable[[ModelSpec], bool]
    ) -> None:
        self._make_backend, self._limit, self._contained = make_backend, limit, contained
        self._blocks = ProcessBlocks()

    def stream(self, config: RunConfig, total: int, cancelled: Callable[[], bool]) -> Iterator[RunEvent]:
        watch = self._limit.watch(config.model, run_phase_after) if self._contained(config.model) else None
        yield from self._blocks.stream(
            config.process_block, config.end_reuse, run_in_worker, (self._make_backend, config, total), cancelled, watch
        )

    def open(self, block: str, cancelled: Callable[[], bool]) -> None:
        """Start block `block`'s worker, its framework imported, ending the current block's."""
        self._blocks.open(block, prepare_in_worker, (self._make_backend,), cancelled)

    def release(self) -> None:
        self._blocks.end()


class DistributedVenue(Venue):
    """A distributed run's worker processes, one per local rank, started for the run and stopped with it
    (distributed.py)."""

    def __init__(self, backend: Backend, make_backend: MakeBackend | None) -> None:
        self._backend, self._make_backend = backend, make_backend

    def stream(self, config: RunConfig, total: int, cancelled: Callable[[], bool]) -> Iterator[RunEvent]:
        assert self._make_backend is not None  # RunnerService.check refuses a distributed run without it
        workers = self._backend.worker_processes(config)
        for event in run_distributed(run_rank, self._make_backend, config, workers, total, cancelled):
            # A rank's configuration holds its place in the job; the client's run is the job's.
            yield replace(event, config=config) if isinstance(event, Resolved) else event

    def release(self) -> None:
        """Nothing is kept: a distributed run's ranks have all exited before its stream ends."""


class Venues:
    """The runner's five venues, and the one choice of where a run executes. `make_backend` builds the backend afresh
    in a worker process; without it (tests' services) every run executes on the framework thread."""

    def __init__(
        self,
        backend: Backend,
        runs: RunPath,
        isolation: RunIsolation,
        make_backend: MakeBackend | None,
        plugin_limit_s: float,
    ) -> None:
        self._backend, self._isolation, self._make_backend = backend, isolation, make_backend
        limit = PluginLimit(backend.framework, plugin_limit_s)
        self.thread = ThreadVenue(runs)
        self.isolated = IsolatedWorkerVenue(isolation, make_backend)
        self.plugin = PluginWorkerVenue(isolation, make_backend, limit)
        self.block = ProcessBlockVenue(make_backend, limit, self.contained)
        self.distributed = DistributedVenue(backend, make_backend)

    def contained(self, spec: ModelSpec) -> bool:
        """Whether work on `spec` runs a user's code (a plug-in's builder), and so runs in a worker process of its
        own, within plugin_limit_s a phase, where a hang, a crash or a failed allocation costs that process alone.
        Without make_backend it runs on the framework thread."""
        return (
            not spec.source.built_in
            and self._backend.models.make_plugin_builder is not None
            and self._make_backend is not None
        )

    def venue_for(self, config: RunConfig) -> Venue:
        """Where a run of `config` executes: across worker processes (distributed), in its process block's worker,
        in a plug-in's worker, in a worker process as the run isolation says, or on the framework thread."""
        if config.distributed:
            return self.distributed
        if config.process_block:
            return self.block
        if self.contained(config.model):
            return self.plugin
        if self._isolation.in_worker(config.device.ref):
            return self.isolated
        return self.thread

    def release_beside(self, venue: Venue, config: RunConfig) -> None:
        """End what the other venues keep that a run of `config` in `venue` must not run beside, in this order:
        - the plug-in's kept worker, but for a run in it (which switches plug-ins itself) and a plug-in's distributed
          run;
        - the process block's worker, but for a run in it (which switches blocks itself);
        - the framework thread's build, before a run in a process block's or a plug-in's worker, with which it would
          share the device. A thread run reuses or frees it itself; an isolated run's device is one no thread run
          builds on; a distributed run leaves it.
        An isolated worker kept for a block of runs ends itself once they have run."""
        if venue is not self.plugin and not (venue is self.distributed and self.contained(config.model)):
            self.plugin.release()
        if venue is not self.block:
            self.block.release()
        if venue in (self.block, self.plugin):
            self.thread.release()
