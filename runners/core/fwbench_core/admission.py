"""Which work a runner admits, and when it may use a device: one lock per device, a bound on the requests held at
once, and the wait for a lock, which a cancelled request or (for CPU work) a time limit ends."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .choices import DeviceKind
from .devices import DeviceRef
from .errors import Busy, Cancelled, Unavailable

LOCK_POLL_S = 0.1
# Work requests (runs, inspections, reference exports and comparisons) a runner holds at once, running or
# waiting for their device, unless --max-queued-requests says otherwise.
DEFAULT_MAX_QUEUED_REQUESTS = 8


class DeviceLocks:
    """One lock per device, so that two runs never share a device at once."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[DeviceRef, threading.Lock] = defaultdict(threading.Lock)

    def lock(self, ref: DeviceRef) -> threading.Lock:
        with self._guard:
            return self._locks[ref]

    def held(self) -> int:
        with self._guard:
            return sum(lock.locked() for lock in self._locks.values())


class WorkLimit:
    """At most `limit` work requests at once, running or waiting; one more is refused at once as busy. Each
    holds a gRPC server thread while it lasts: the limit keeps threads free for Describe, ListModels and health."""

    def __init__(self, limit: int, running: Callable[[], int]) -> None:
        self.limit = limit
        self._running = running
        self._guard = threading.Lock()
        self._held = 0

    @contextmanager
    def admit(self) -> Iterator[None]:
        with self._guard:
            if self._held >= self.limit:
                running = min(self._running(), self._held)
                raise Busy(
                    f"the runner is busy: {running} running and {self._held - running} waiting, its limit of "
                    f"{self.limit} requests (--max-queued-requests); retry later"
                )
            self._held += 1
        try:
            yield
        finally:
            with self._guard:
                self._held -= 1


def wait_for(
    lock: threading.Lock, cancelled: Callable[[], bool], cancelled_message: str, limit_s: float | None = None
) -> None:
    """Take `lock`, polling `cancelled` while waiting; with `limit_s` (the CPU wait of inspection and parity),
    give up after that long."""
    give_up_at = None if limit_s is None else time.monotonic() + limit_s
    while True:
        if cancelled():
            raise Cancelled(cancelled_message)
        if lock.acquire(timeout=LOCK_POLL_S):
            return
        if give_up_at is not None and time.monotonic() > give_up_at:
            raise Unavailable(f"the CPU stayed busy with another run for {limit_s:.0f} s; try again later")


def lock_ref(ref: DeviceRef) -> DeviceRef:
    return DeviceRef(DeviceKind.CPU) if ref.kind is DeviceKind.CPU else ref
