"""The worker process a runner keeps for the plug-in whose code it last ran (its runs, inspection and parity work):
the plug-in's next call finds the framework imported and its build warm, as a built-in's next run does in the runner's
own process, while the plug-in's code still never runs in the runner's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .models import ModelSource
from .worker_process import WorkerProcess


class PluginWorkers:
    """At most one kept worker, for one version of one plug-in. Work on anything else closes it, so that no idle
    process holds memory beside another model's run; a call that finds it busy (two devices' runs at once) gets a
    fresh worker of its own; a call that does not end cleanly has ended it (WorkerProcess)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held by the call that uses the kept worker
        self._kept: tuple[tuple[str, str], WorkerProcess] | None = None

    @contextmanager
    def worker_for(self, plugin: ModelSource, keep: bool) -> Iterator[WorkerProcess]:
        """A worker for a call on `plugin`'s code: the kept one where `keep` (started if none is kept for this version
        of it), else a fresh one, closed after the call."""
        if keep and self._lock.acquire(blocking=False):
            try:
                yield self._take((plugin.folder, plugin.content_hash))
            finally:
                self._lock.release()
            return
        worker = WorkerProcess()
        try:
            yield worker
        finally:
            worker.close()

    def close_idle(self) -> None:
        """Close the kept worker, unless a call is using it."""
        if self._lock.acquire(blocking=False):
            try:
                self._drop()
            finally:
                self._lock.release()

    def _take(self, key: tuple[str, str]) -> WorkerProcess:
        if self._kept is not None and (self._kept[0] != key or not self._kept[1].reusable):
            self._drop()
        if self._kept is None:
            self._kept = (key, WorkerProcess())
        return self._kept[1]

    def _drop(self) -> None:
        if self._kept is not None:
            worker, self._kept = self._kept[1], None
            worker.close()
