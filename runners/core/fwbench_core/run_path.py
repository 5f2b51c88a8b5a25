"""The path of one run through a runner, wherever it executes (the runner's framework thread, a worker process of its
own, a rank of a distributed job): the idle baseline, the build or the kept workload's reuse, the timed steps with
their telemetry, and what a failure means (a plug-in's, wherever its code ran); and the functions a worker process
runs it with."""

from __future__ import annotations

import functools
import gc
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Union

from .backend import Backend, Workload
from .choices import DeviceKind, Phase
from .device_state import DeviceStateReader
from .errors import Cancelled, FailedPrecondition, OutOfMemory, RunnerError
from .measurement_settings import first_window
from .models import ModelSpec
from .power import NvmlSession, PowerSampler, source_for
from .runs import RunConfig
from .serving import QueryBatch
from .telemetry import PowerBatch, RunTelemetry
from .timing import Progress, StepBatch, Summary, time_steps

log = logging.getLogger("fwbench.runner")


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


class RunPath:
    """Runs on one backend, one after another on the calling thread, and the workload kept between them (a reuse
    key's). `device_states` makes each run's device-state reader."""

    def __init__(
        self,
        backend: Backend,
        device_states: Callable[..., DeviceStateReader] = DeviceStateReader,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.backend = backend
        self._device_states = device_states
        self._clock = clock
        # Only the thread that runs (the runner's framework thread, a worker's only one) reads or sets it.
        self._kept: Kept | None = None

    def free(self, workload: Workload | None) -> None:
        """Close a workload and return its memory to the device."""
        if workload is not None:
            workload.close()
        gc.collect()
        self.backend.release_memory()

    def drop_kept(self) -> None:
        if self._kept is not None:
            workload, self._kept = self._kept.workload, None
            self.free(workload)

    def _take_kept(self, config: RunConfig) -> tuple[Workload | None, bool]:
        """The kept workload where `config` may reuse it, and whether it continues it as it is; any other is freed,
        before the run reads the device."""
        if self._kept is not None and config.reuses(self._kept.config):
            continues = config.continues(self._kept.config)
            workload, self._kept = self._kept.workload, None
            return workload, continues
        self.drop_kept()
        return None, False

    def run(
        self, config: RunConfig, total: int, cancelled: Callable[[], bool], keep: bool = False
    ) -> Iterator[RunEvent]:
        """One run on the calling thread. With `keep` (an in-process single-device run) a run that completes under a
        reuse key keeps its workload for the next run, and a run under the same key reuses the kept one."""
        started_at_unix_s = time.time()
        doing = "the idle baseline"
        workload, continued = self._take_kept(config)
        # A window that found nothing to continue warms its fresh build up first.
        steps_config = first_window(config) if config.continue_reuse and not continued else config
        reused = continued
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
                if workload is not None and not continued:
                    reused = workload.reuse(config)
                    if not reused:
                        self.free(workload)
                        workload = None
                if workload is None:
                    workload = self.backend.build(config)
                yield Resolved(config, workload.parameter_count)
                doing = "a step"
                steps = time_steps(
                    workload,
                    steps_config,
                    build_started_s=build_started_s,
                    started_at_unix_s=started_at_unix_s,
                    cancelled=cancelled,
                    clock=self._clock,
                )
                for event in steps:
                    if isinstance(event, Summary):
                        event = replace(
                            event,
                            build_reused=reused,
                            build_continued=continued,
                            first_step_traced=workload.first_step_traces and not continued,
                            process_id=os.getpid(),
                            flags=(*event.flags, *workload.notes),
                        )
                    yield from telemetry.around(event, config)
                completed = True
            except Exception as exc:
                # Keep only the text or a fresh error: the exception's traceback holds
                # the tensors that filled the device, and they must go before the next run.
                user_error, out_of_memory = self._failure_of(config, doing, exc)
                if user_error is None and not out_of_memory:
                    raise
            finally:
                if keep and completed and workload is not None and config.reuse_key and not config.end_reuse:
                    # Kept whole: no collection or cache release, which the next run would only have to undo.
                    self._kept = Kept(workload, config)
                else:
                    self.free(workload)
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

    def _telemetry(self, config: RunConfig) -> RunTelemetry:
        """The run's power sampler and device-state reader, reading a GPU through one NVML session."""
        ref = config.device.ref
        nvml = NvmlSession(ref.index) if ref.kind is DeviceKind.GPU else None
        sampler = None
        if config.power_sample_rate_hz:
            sampler = PowerSampler(source_for(ref, nvml), config.power_sample_rate_hz, clock=self._clock)
        return RunTelemetry(sampler, self._device_states(ref, nvml=nvml), ref, self._clock)

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


def plugin_failure(spec: ModelSpec, doing: str, exc: Exception) -> FailedPrecondition:
    """A plug-in's exception as the user's to fix, naming the plug-in and what it was doing; its traceback goes to
    the log."""
    log.warning("plug-in %s raised during %s", spec.name, doing, exc_info=exc)
    text = " ".join(str(exc).split())[:500]
    return FailedPrecondition(
        f"plug-in {spec.name} ({spec.source.folder}): {doing} raised {type(exc).__name__}"
        f"{f': {text}' if text else ''}; the runner's log has the traceback"
    )


def run_phase_after(event: object) -> str | None:
    """The phase of a plug-in's run that `event` starts: its build(), which must return within the limit; then
    steps, which the run's own deadline bounds."""
    if isinstance(event, Progress) and event.phase is Phase.BUILD:
        return "build()"
    return "" if isinstance(event, Resolved) else None


def runner_device_states() -> Callable[..., DeviceStateReader]:
    """How a worker process reads device state: the runner that spawned it is this run's own process too, so
    its CPU time (streaming the run's events) is no other process's, and its GPU context is not another user."""
    return functools.partial(DeviceStateReader, pid=os.getppid())


def run_rank(
    make_backend: Callable[[], Backend], config: RunConfig, total: int, cancelled: Callable[[], bool]
) -> Iterator[RunEvent]:
    """One rank of a distributed run, in its worker process: the backend's process-wide preparation first, then
    the very run path of an in-process run."""
    backend = make_backend()
    # Heard from once the framework is imported: the parent's silence limit then counts the rendezvous alone, not
    # an import that takes seconds on a loaded host.
    yield Progress(Phase.BUILD, 0, total)
    backend.prepare_worker(config)
    yield from RunPath(backend, runner_device_states()).run(config, total, cancelled)


# A worker process's own run path, made at its first call: a kept worker's later calls find its backend and its kept
# build there.
_path_in_worker: RunPath | None = None


def _worker_path(make_backend: Callable[[], Backend]) -> RunPath:
    global _path_in_worker
    if _path_in_worker is None:
        _path_in_worker = RunPath(make_backend(), runner_device_states())
    return _path_in_worker


def run_in_worker(
    make_backend: Callable[[], Backend], config: RunConfig, total: int, cancelled: Callable[[], bool]
) -> Iterator[RunEvent]:
    """A worker process's run: the very run path of an in-process run, on the worker's service, whose build a next
    run under the same reuse key may reuse. The worker's only thread does all its framework work."""
    if cancelled():
        raise Cancelled(f"run of {config.model.name} cancelled by the client before it started")
    yield from _worker_path(make_backend).run(config, total, cancelled, keep=True)


def prepare_in_worker(make_backend: Callable[[], Backend], cancelled: Callable[[], bool]) -> Iterator[RunEvent]:
    """A block's worker made ready before its first run: the backend made, and with it the framework imported."""
    _worker_path(make_backend)
    yield from ()


def backend_in_worker(make_backend: Callable[[], Backend]) -> Backend:
    """The worker's backend for a plug-in's inspection or parity work, its kept build freed first (that work may reset
    framework state, as on the runner's framework thread)."""
    path = _worker_path(make_backend)
    path.drop_kept()
    return path.backend
