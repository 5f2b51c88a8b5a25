"""The runner's behaviour, free of gRPC and of any framework: describe, list, run."""

from __future__ import annotations

import functools
import gc
import os
import threading
from concurrent.futures import ThreadPoolExecutor
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar, Union

from .admission import DEFAULT_MAX_QUEUED_REQUESTS, DeviceLocks, WorkLimit, lock_ref, wait_for
from .apart import apart_phase_after, called_apart, plugin_failure
from .backend import Backend, Workload
from .catalog import Catalog, load_catalog
from .device_state import DeviceStateReader
from .distributed import run_distributed
from .errors import Cancelled, FailedPrecondition, OutOfMemory, RunnerError
from .isolation import BlockWorker, RunIsolation, Watch, stream_on_thread
from .plugin_worker import PluginWorkers
from .plugin_modules import builder_file
from .plugins import PLUGIN_LIMIT_S, PluginLocation
from .power import NvmlSession, PowerSampler, source_for
from .references import ReferenceFolder, check_input_fits, check_name
from .choices import DeviceKind, Phase, Precision
from .spec import (
    DeviceRef, ModelConfig, ModelReport, ModelSpec, ReferenceReport, ReferenceRequest, RunConfig, RunnerInfo,
    RunRequest,
)
from .serving import QueryBatch
from .telemetry import PowerBatch, RunTelemetry
from .timing import Progress, StepBatch, Summary, time_steps
from .validation import resolve, resolve_model_config, resolve_reference

# Work that waits for the CPU (inspection, parity) gives up after this long: the aggregator's own deadline.
CPU_WAIT_LIMIT_S = 600.0
T = TypeVar("T")


@dataclass(frozen=True)
class Resolved:
    config: RunConfig
    parameter_count: int


@dataclass(frozen=True)
class Kept:
    """The workload of the last in-process run, kept for a next run under the same reuse key."""

    workload: Workload
    config: RunConfig


RunEvent = Union[Resolved, Progress, StepBatch, QueryBatch, PowerBatch, Summary]



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
        self._device_states = device_states
        self._references = references
        # All framework work (builds, steps, inspection) runs on this one thread. PyTorch's OpenMP gives
        # every thread that runs ops its own worker team; with more workers than cores, libgomp spins
        # less and every op slows by about 20%, for good, once a second gRPC handler thread has run torch.
        self._framework = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fwbench-framework")
        if isolation.in_worker(DeviceRef(DeviceKind.GPU)):
            # A context held here would keep memory, and idle clocks and power high, on every GPU. Before
            # runner_info, which must then list the GPUs without opening them.
            backend.stay_off_gpus()
        info = backend.runner_info()
        self.info: RunnerInfo = replace(info, options={**info.options, "run_isolation": isolation.value})
        # Each plug-in's builder is checked in a process of its own: no user's code runs in the runner's.
        self.catalog: Catalog = load_catalog(backend.models, plugins, plugin_limit_s)
        self.plugin_limit_s = plugin_limit_s
        self._plugin_workers = PluginWorkers()
        self._block_worker = BlockWorker()
        self._clock = clock
        self._locks = DeviceLocks()
        self.work_limit = WorkLimit(max_queued_requests, self._locks.held)
        # Only the framework thread reads or sets it.
        self._kept: Kept | None = None

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
        """Model inspection and parity work run on the CPU, never beside a CPU run's timings. The wait for
        the CPU ends when `cancelled` says so, or after CPU_WAIT_LIMIT_S."""
        with self.work_limit.admit():
            lock = self._locks.lock(DeviceRef(DeviceKind.CPU))
            wait_for(lock, cancelled, "cancelled by the client while waiting for the CPU", CPU_WAIT_LIMIT_S)
            try:
                return self._framework.submit(self._without_kept, work).result()
            finally:
                gc.collect()
                lock.release()

    def inspect(self, config: ModelConfig, cancelled: Callable[[], bool] = lambda: False) -> ModelReport:
        """The model's parameters and FLOPs, built on the CPU (a plug-in's in a process of its own)."""
        return self.on_cpu(lambda: self._user_code(config.model, "inspect", (config,), cancelled), cancelled)

    def contained(self, spec: ModelSpec) -> bool:
        """Whether work on `spec` runs a user's code (a plug-in's builder), and so runs in a worker process of its
        own, within plugin_limit_s a phase, where a hang, a crash or a failed allocation costs that process alone.
        A service that starts no worker processes (make_backend None: tests') runs it here."""
        return (not spec.source.built_in and self.backend.models.make_plugin_builder is not None
                and self._make_backend is not None)

    def _watch(self, spec: ModelSpec, phase_after: Callable[[object], str | None]) -> Watch:
        return Watch(f"plug-in {spec.name} ({Path(spec.source.folder) / builder_file(self.backend.framework)})",
                     self.plugin_limit_s, phase_after)

    def _user_code(self, spec: ModelSpec, method: str, args: tuple, cancelled: Callable[[], bool]):
        """The backend's `method(*args)`, which builds `spec`: here, or for a plug-in in a worker process."""
        if not self.contained(spec):
            self._plugin_workers.close_idle()
            return getattr(self.backend, method)(*args)
        keep = not self.isolation.in_worker(DeviceRef(DeviceKind.CPU))
        with self._plugin_workers.worker_for(spec.source, keep) as worker:
            return called_apart(worker, functools.partial(_backend_in_worker, self._make_backend), method, args,
                                cancelled, self._watch(spec, apart_phase_after(method)))

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
        arrays, report = self.on_cpu(lambda: self._user_code(config.model, "export_reference", (config,), cancelled),
                                     cancelled)
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
        return self.on_cpu(lambda: self._user_code(config.model, "compare_reference", (config, arrays), cancelled),
                           cancelled)

    def _telemetry(self, config: RunConfig) -> RunTelemetry:
        """The run's power sampler and device-state reader, reading a GPU through one NVML session."""
        ref = config.device.ref
        nvml = NvmlSession(ref.index) if ref.kind is DeviceKind.GPU else None
        sampler = None
        if config.power_sample_rate_hz:
            sampler = PowerSampler(source_for(ref, nvml), config.power_sample_rate_hz, clock=self._clock)
        return RunTelemetry(sampler, self._device_states(ref, nvml=nvml), ref, self._clock)

    def check(self, request: RunRequest) -> RunConfig:
        """The run `request` asks for, every default resolved, or the error Run would refuse it with."""
        config = resolve(
            request, self.info.devices, self.backend.capabilities, self.catalog, self.backend.framework
        )
        if config.distributed and self._make_backend is None:
            raise FailedPrecondition("this runner cannot start worker processes: it runs no distributed strategy")
        return config

    def run(self, request: RunRequest, cancelled: Callable[[], bool]) -> Iterator[RunEvent]:
        config = self.check(request)
        total = config.progress_total
        with self.work_limit.admit():
            # Every device of the run, in one fixed order so that two runs never wait for each other; CPU
            # workers share the one CPU, so every cpu:N takes the cpu:0 lock.
            refs = sorted({lock_ref(device.ref) for device in config.run_devices}, key=lambda r: (r.kind.value, r.index))
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
                if not self.contained(config.model):
                    self._plugin_workers.close_idle()
                if config.distributed:
                    workers = self.backend.worker_processes(config)
                    for event in run_distributed(_run_rank, self._make_backend, config, workers, total, cancelled):
                        yield replace(event, config=config) if isinstance(event, Resolved) else event
                elif self.contained(config.model):
                    # A workload kept in this process would share the device with the worker's run.
                    self._framework.submit(self._drop_kept).result()
                    keep = not self.isolation.in_worker(config.device.ref)
                    with self._plugin_workers.worker_for(config.model.source, keep) as worker:
                        yield from worker.stream(_run_in_worker, (self._make_backend, config, total), cancelled,
                                                 self._watch(config.model, _run_phase_after))
                elif self.isolation.in_worker(config.device.ref):
                    yield from self._block_worker.stream(self.isolation.runs_per_worker(config.device.ref),
                                                         _run_in_worker, (self._make_backend, config, total), cancelled)
                else:
                    run = lambda stop: self._run_locked(config, total, stop, keep=True)  # noqa: E731
                    yield from stream_on_thread(self._framework, run, cancelled)
            finally:
                for lock in taken:
                    lock.release()

    def _free(self, workload: Workload | None) -> None:
        """Close a workload and return its memory to the device."""
        if workload is not None:
            workload.close()
        gc.collect()
        self.backend.release_memory()

    def _drop_kept(self) -> None:
        if self._kept is not None:
            workload, self._kept = self._kept.workload, None
            self._free(workload)

    def _without_kept(self, work: Callable[[], T]) -> T:
        """Other work on the framework thread frees the kept workload first: it may reset framework state."""
        self._drop_kept()
        return work()

    def _take_kept(self, config: RunConfig) -> Workload | None:
        """The kept workload where `config` may reuse it; any other is freed, before the run reads the device."""
        if self._kept is not None and config.reuses(self._kept.config):
            workload, self._kept = self._kept.workload, None
            return workload
        self._drop_kept()
        return None

    def _run_locked(
        self, config: RunConfig, total: int, cancelled: Callable[[], bool], keep: bool = False
    ) -> Iterator[RunEvent]:
        """One run on this thread. With `keep` (an in-process single-device run) a run that completes under a
        reuse key keeps its workload for the next run, and a run under the same key reuses the kept one."""
        started_at_unix_s = time.time()
        doing = "the idle baseline"
        workload = self._take_kept(config)
        reused = False
        completed = False
        out_of_memory = ""
        user_error = None
        telemetry = self._telemetry(config)
        with telemetry:
            try:
                telemetry.idle_baseline(config.idle_baseline_s, cancelled)
                build_started_s = self._clock()
                doing = "build()"
                yield Progress(Phase.BUILD, 0, total)
                if workload is not None:
                    reused = workload.reuse(config)
                    if not reused:
                        self._free(workload)
                        workload = None
                if workload is None:
                    workload = self.backend.build(config)
                yield Resolved(config, workload.parameter_count)
                doing = "a step"
                steps = time_steps(workload, config, build_started_s=build_started_s,
                                   started_at_unix_s=started_at_unix_s, cancelled=cancelled, clock=self._clock)
                for event in steps:
                    if isinstance(event, Summary):
                        event = replace(event, build_reused=reused, first_step_traced=workload.first_step_traces,
                                        flags=(*event.flags, *workload.notes))
                    yield from telemetry.around(event, config)
                completed = True
            except Exception as exc:
                # Keep only the text or a fresh error: the exception's traceback holds
                # the tensors that filled the device, and they must go before the next run.
                user_error, out_of_memory = self._failure_of(config, doing, exc)
                if user_error is None and not out_of_memory:
                    raise
            finally:
                if keep and completed and config.reuse_key and not config.end_reuse:
                    # Kept whole: no collection or cache release, which the next run would only have to undo.
                    self._kept = Kept(workload, config)
                else:
                    self._free(workload)
                workload = None
        if user_error is not None:
            raise user_error
        if out_of_memory:
            shape = "x".join(map(str, config.input_shape))
            raise OutOfMemory(
                f"out of memory on {config.device.ref} running {config.model.name} {config.mode.value} "
                f"at batch_size {config.batch_size}, input_shape {shape}: {out_of_memory}; "
                "try a smaller batch_size or input_shape"
            )

    def _failure_of(self, config: RunConfig, doing: str, exc: Exception) -> tuple[Exception | None, str]:
        """What a failed run reports: the user's error (a plug-in's failure while `doing` included), or the first line
        of a device's out-of-memory error; neither for a built-in model's or the runner's own error, which is raised
        as it is."""
        user_error = self.backend.user_error(exc)
        if user_error is not None:
            return user_error, ""
        if self.backend.is_out_of_memory(exc):
            text = str(exc).strip()
            return None, text.splitlines()[0] if text else type(exc).__name__
        if config.model.source.built_in or isinstance(exc, RunnerError):
            return None, ""
        return plugin_failure(config.model, doing, exc), ""


def _run_phase_after(event: object) -> str | None:
    """The phase of a plug-in's run that `event` starts: its build(), which must return within the limit; then
    steps, which the run's own deadline bounds."""
    if isinstance(event, Progress) and event.phase is Phase.BUILD:
        return "build()"
    return "" if isinstance(event, Resolved) else None


def runner_device_states() -> Callable[..., DeviceStateReader]:
    """How a worker process reads device state: the runner that spawned it is this run's own process too, so
    its CPU time (streaming the run's events) is no other process's, and its GPU context is not another user."""
    return functools.partial(DeviceStateReader, pid=os.getppid())


def _run_rank(
    make_backend: Callable[[], Backend], config: RunConfig, total: int, cancelled: Callable[[], bool]
) -> Iterator[RunEvent]:
    """One rank of a distributed run, in its worker process: the backend's process-wide preparation first, then
    the very run path of an in-process run."""
    backend = make_backend()
    # Heard from once the framework is imported: the parent's silence limit then counts the rendezvous alone, not
    # an import that takes seconds on a loaded host.
    yield Progress(Phase.BUILD, 0, total)
    backend.prepare_worker(config)
    yield from RunnerService(backend, device_states=runner_device_states())._run_locked(config, total, cancelled)


# A worker process's own service, made at its first call: a kept worker's later calls find its backend and its kept
# build there.
_service_in_worker: RunnerService | None = None


def _worker_service(make_backend: Callable[[], Backend]) -> RunnerService:
    global _service_in_worker
    if _service_in_worker is None:
        _service_in_worker = RunnerService(make_backend(), device_states=runner_device_states())
    return _service_in_worker


def _run_in_worker(
    make_backend: Callable[[], Backend], config: RunConfig, total: int, cancelled: Callable[[], bool]
) -> Iterator[RunEvent]:
    """A worker process's run: the very run path of an in-process run, on the worker's service, whose build a next
    run under the same reuse key may reuse. The worker's only thread does all its framework work."""
    if cancelled():
        raise Cancelled(f"run of {config.model.name} cancelled by the client before it started")
    yield from _worker_service(make_backend)._run_locked(config, total, cancelled, keep=True)


def _backend_in_worker(make_backend: Callable[[], Backend]) -> Backend:
    """The worker's backend for a plug-in's inspection or parity work, its kept build freed first (that work may reset
    framework state, as on the runner's framework thread)."""
    service = _worker_service(make_backend)
    service._drop_kept()
    return service.backend
