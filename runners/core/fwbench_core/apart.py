"""A plug-in's inspection and parity work in a worker process (worker_process.WorkerProcess), so that its code never
runs in the runner's."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .backend import Backend
from .errors import OutOfMemory, RunnerError
from .run_path import plugin_failure
from .worker_process import Watch, WorkerProcess

# What a worker running a plug-in's code apart (_apart) does, by backend method: the phase its limit applies to.
_APART_PHASES = {
    "inspect": "building and inspecting it",
    "export_reference": "building it and exporting a reference",
    "compare_reference": "building it and comparing it with a reference",
}
_STARTED = "started"  # _apart's first item: the framework is imported, the plug-in's code starts


def _apart(make_backend: Callable[[], Backend], method: str, args: tuple, cancelled: Callable[[], bool]) -> Iterator:
    """A worker process's inspection or parity work on a plug-in: the worker's backend, then `method(*args)`."""
    backend = make_backend()
    yield _STARTED
    try:
        yield getattr(backend, method)(*args)
    except RunnerError:
        raise
    except Exception as exc:
        if backend.is_out_of_memory(exc):
            raise OutOfMemory(f"out of memory {_APART_PHASES[method]} ({args[0].model.name}): {exc}") from None
        raise backend.user_error(exc) or plugin_failure(args[0].model, _APART_PHASES[method], exc) from None


def apart_phase_after(method: str) -> Callable[[object], str | None]:
    """The Watch's phases of `method`'s work apart: limited from the worker's STARTED on."""
    return lambda item: _APART_PHASES[method] if item == _STARTED else None


def called_apart(
    worker: WorkerProcess,
    make_backend: Callable[[], Backend],
    method: str,
    args: tuple,
    cancelled: Callable[[], bool],
    watch: Watch,
):
    """The backend's `method(*args)` in `worker` (make_backend gives it there), its result brought back."""
    results = [
        item for item in worker.stream(_apart, (make_backend, method, args), cancelled, watch) if item != _STARTED
    ]
    return results[0]
