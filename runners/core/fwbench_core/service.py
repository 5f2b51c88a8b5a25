"""The runner's behaviour, free of gRPC and of any framework: describe, list, run."""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from .admission import DEFAULT_MAX_QUEUED_REQUESTS, DeviceLocks, WorkLimit, lock_ref, wait_for
from .allocator import pin_malloc
from .backend import Backend
from .catalog import Catalog, load_catalog
from .choices import DeviceKind, Phase, Precision
from .device_state import DeviceStateReader
from .devices import DeviceRef, RunnerInfo
from .errors import FailedPrecondition, InvalidArgument
from .isolation import RunIsolation
from .limits import MAX_REUSE_KEY_LENGTH
from .model_resolution import resolve_model_config, resolve_reference
from .models import ModelConfig, ModelReport, ModelSpec, ReferenceReport, ReferenceRequest
from .plugins import PLUGIN_LIMIT_S, PluginLocation
from .process_tree import end_strays
from .references import ReferenceFolder, check_input_fits, check_name
from .run_path import RunEvent, RunPath
from .runs import RunConfig, RunRequest
from .timing import Progress
from .validation import resolve, resolve_key
from .venues import Venues

# Work that waits for the CPU (inspection, parity) gives up after this long: the aggregator's own deadline.
CPU_WAIT_LIMIT_S = 600.0
T = TypeVar("T")


class RunnerService:
    def __init__(
        self,
        backend: Backend,
        clock: Callable[[], float] = time.perf_counter,
        isolation: RunIsolation = RunIsolation.THREAD,
        make_backend: Callable[[], Backend] | None = None,
        device_states: Callable[..., DeviceStateReader] = DeviceStateReader,
        references: ReferenceFolder | None = None,
        max_queued_requests: int = DEFAULT_MAX_QUEUED_REQUESTS,
        plugins: Sequence[PluginLocation] = (),
        plugin_limit_s: float = PLUGIN_LIMIT_S,
    ) -> None:
        """`make_backend` builds the same backend afresh in a worker process: it must pickle (a class,
        or functools.partial of one), and is needed for every isolation but THREAD. `references`: the folder
        of parity references; without one, ExportReference and CompareReference are refused. `plugins`: where
        the runner's model plug-ins are (its own configuration, never a request's); `plugin_limit_s`: how long a
        plug-in's code may take in each phase (plugins.PLUGIN_LIMIT_S)."""
        if isolation is not RunIsolation.THREAD and make_backend is None:
            raise ValueError(f"run isolation {isolation.value!r} needs make_backend to build the worker's backend")
        self.backend = backend
        self.isolation = isolation
        self._make_backend = make_backend
        self._references = references
        # Where runs execute: the framework thread runs its runs on this run path, which keeps a build between them.
        self._venues = Venues(backend, RunPath(backend, device_states, clock), isolation, make_backend, plugin_limit_s)
        if isolation.in_worker(DeviceRef(DeviceKind.GPU)):
            # A context held here would keep memory, and idle clocks and power high, on every GPU. Before
            # runner_info, which must then list the GPUs without opening them.
            backend.stay_off_gpus()
        info = backend.runner_info()
        # Worker processes pin the same thresholds as they start (isolation), so runs allocate alike wherever they run.
        self.info: RunnerInfo = replace(
            info, options={**info.options, "run_isolation": isolation.value, "malloc": pin_malloc()}
        )
        # Each plug-in's builder is checked in a process of its own: no user's code runs in the runner's.
        self.catalog: Catalog = load_catalog(backend.models, plugins, plugin_limit_s)
        self.plugin_limit_s = plugin_limit_s
        self._locks = DeviceLocks()
        self.work_limit = WorkLimit(max_queued_requests, self._locks.held)

    def precisions(self) -> list[Precision]:
        supported = set().union(*(self.backend.capabilities(d).precisions for d in self.info.devices))
        return [p for p in Precision if p in supported]

    def list_models(self) -> list[ModelSpec]:
        """From the catalog alone: never waits for a device or builds a model."""
        return [self.catalog.specs[name] for name in self.catalog.names()]

    def model_config(
        self, model: str, shape: Sequence[int], options: Mapping[str, str], batch_size: int = 1, seed: int = 0
    ) -> ModelConfig:
        return resolve_model_config(model, shape, options, self.catalog, batch_size, seed)

    def on_cpu(self, work: Callable[[], T], cancelled: Callable[[], bool] = lambda: False) -> T:
        """Model inspection and parity work run on the CPU, never beside a CPU run's timings, on the framework's
        thread with no workload kept there."""
        with self._cpu_held(cancelled):
            try:
                return self._venues.thread.call(work)
            finally:
                gc.collect()

    @contextlib.contextmanager
    def _cpu_held(self, cancelled: Callable[[], bool]) -> Iterator[None]:
        """The CPU, with no CPU run timed meanwhile: the wait for it ends when `cancelled` says so, or after
        CPU_WAIT_LIMIT_S."""
        with self.work_limit.admit():
            lock = self._locks.lock(DeviceRef(DeviceKind.CPU))
            wait_for(lock, cancelled, "cancelled by the client while waiting for the CPU", CPU_WAIT_LIMIT_S)
            try:
                yield
            finally:
                lock.release()

    def inspect(self, config: ModelConfig, cancelled: Callable[[], bool] = lambda: False) -> ModelReport:
        """The model's parameters and FLOPs, built on the CPU (a plug-in's in a process of its own)."""
        return self.on_cpu(lambda: self._user_code(config.model, "inspect", (config,), cancelled), cancelled)

    def _user_code(self, spec: ModelSpec, method: str, args: tuple, cancelled: Callable[[], bool]):
        """The backend's `method(*args)`, which builds `spec`: here, or for a plug-in in its worker process."""
        if not self._venues.contained(spec):
            self._venues.plugin.release()
            return getattr(self.backend, method)(*args)
        return self._venues.plugin.call(spec, method, args, cancelled)

    def _reference_folder(self) -> ReferenceFolder:
        if self._references is None:
            raise FailedPrecondition("this runner has no reference folder")
        return self._references

    def export_reference(self, request: ReferenceRequest, cancelled: Callable[[], bool]) -> ReferenceReport:
        """Build the model, run a random input, and store weights, input and output as reference `name`:
        computed under the CPU lock, written after it is released."""
        check_name(request.name)
        config = resolve_reference(request, self.catalog)
        folder = self._reference_folder()
        arrays, report = self.on_cpu(
            lambda: self._user_code(config.model, "export_reference", (config,), cancelled), cancelled
        )
        folder.write(request.name, arrays)
        return report

    def compare_reference(self, request: ReferenceRequest, cancelled: Callable[[], bool]) -> ReferenceReport:
        """Load reference `name` into this runner's model and compare outputs: the file is read before the
        CPU lock is taken, so no file can hold the CPU."""
        check_name(request.name)
        config = resolve_reference(request, self.catalog)
        folder = self._reference_folder()
        arrays = folder.read(request.name)
        check_input_fits(request.name, arrays["input"], config)
        return self.on_cpu(
            lambda: self._user_code(config.model, "compare_reference", (config, arrays), cancelled), cancelled
        )

    def open_block(self, block: str, cancelled: Callable[[], bool] = lambda: False) -> float:
        """Start process block `block`'s worker, its framework imported, before the block's first run; the seconds
        that took. Work on the CPU like a run's: no CPU run is timed meanwhile."""
        if not resolve_key("process_block", block):
            raise InvalidArgument(
                "process_block is empty: name the block to open (printable ASCII, at most "
                f"{MAX_REUSE_KEY_LENGTH} characters)"
            )
        if self._make_backend is None:
            raise FailedPrecondition("this runner cannot start worker processes: it runs no process block")
        started = time.monotonic()
        # Only the CPU is held, not the framework's thread: the wait is a spawned worker's import.
        with self._cpu_held(cancelled):
            self._venues.plugin.release()
            self._venues.block.open(block, cancelled)
        return time.monotonic() - started

    def check(self, request: RunRequest) -> RunConfig:
        """The run `request` asks for, every default resolved, or the error Run would refuse it with."""
        config = resolve(request, self.info.devices, self.backend.capabilities, self.catalog, self.backend.framework)
        if (config.distributed or config.process_block) and self._make_backend is None:
            raise FailedPrecondition(
                "this runner cannot start worker processes: it runs no distributed strategy and no process block"
            )
        return config

    def run(self, request: RunRequest, cancelled: Callable[[], bool]) -> Iterator[RunEvent]:
        config = self.check(request)
        total = config.progress_total
        with self.work_limit.admit():
            # Every device of the run, in one fixed order so that two runs never wait for each other; CPU
            # workers share the one CPU, so every cpu:N takes the cpu:0 lock.
            refs = sorted(
                {lock_ref(device.ref) for device in config.run_devices}, key=lambda r: (r.kind.value, r.index)
            )
            locks = [self._locks.lock(ref) for ref in refs]
            taken: list[threading.Lock] = []
            queued = False
            try:
                for ref, lock in zip(refs, locks):
                    if not lock.acquire(blocking=False):
                        if not queued:
                            yield Progress(Phase.QUEUED, 0, total)
                            queued = True
                        wait_for(lock, cancelled, f"run of {config.model.name} cancelled while waiting for {ref}")
                    taken.append(lock)
                yield from self._execute(config, total, cancelled)
            finally:
                for lock in taken:
                    lock.release()

    def _execute(self, config: RunConfig, total: int, cancelled: Callable[[], bool]) -> Iterator[RunEvent]:
        """The run where it executes (Venues.venue_for), once what the other venues keep that it must not run beside has
        ended, and never beside a process an earlier plug-in's worker left (process_tree.end_strays)."""
        end_strays()
        venue = self._venues.venue_for(config)
        self._venues.release_beside(venue, config)
        yield from venue.stream(config, total, cancelled)
