"""What a run passes before it starts: the lock of every device it uses (device_lock: one fwbench measures a device
at a time on a host), then, where asked (--wait-for-quiet S), a quiet host (quiet). Both run loops (execute.run_all,
study._Sweep.run) take every run through one Gate per command; what each run waited is its Passage, for the run's
record.

A run's devices are those of its request, or its runner's default device (Describe). A device of another machine
(the runner's boot id is not this host's, or no boot id and an address that is not loopback) gets a lock named by
that machine, which never holds off this host's runs, and its host is not watched: it cannot be from here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import NamedTuple

from ..base.paths import safe_component
from ..base.progress import Progress
from ..base.vocabulary import device_text, indexed_device
from . import jobs, wire
from .connection import Transport
from .device_lock import (
    MEASURING,
    WAITING,
    Lock,
    UnsafeLockDir,
    default_dir,
    holding,
    locks_enabled,
    others_measuring,
    safe_dir,
)
from .quiet import HostProbe, Probe, QuietWait, wait_for_quiet
from .runners import runner_facts

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


@cache
def this_host() -> str:
    """This kernel's boot id, as a runner reports its own (option host_id); "" where it cannot be read."""
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


class Place(NamedTuple):
    device: str  # "cpu:0", "gpu:1"
    machine: str = ""  # "" on this host; else which machine: its boot id, or its address's host
    uuid: str = ""  # a GPU's, where its runner reports it

    def lock(self) -> Lock:
        kind, _, index = self.device.partition(":")
        # A host's CPU devices share its cores; a GPU is its UUID where known (containers may number GPUs otherwise).
        own = "cpu" if kind == "cpu" else self.uuid or f"{kind}{index}"
        label = ("cpu" if kind == "cpu" else self.device) + (f" of {self.machine}" if self.machine else "")
        return Lock(safe_component(f"{self.machine}-{own}" if self.machine else own), label, not self.machine)


def places_of(address: str, devices: Sequence[str], options: Mapping[str, str]) -> list[Place]:
    """Where a runner at `address` (its Describe options) runs on `devices`."""
    host_id = options.get("host_id", "")
    host = address.rsplit(":", 1)[0]
    if host_id:
        machine = "" if host_id == this_host() else host_id
    else:
        machine = "" if host in LOOPBACK else host
    return [Place(indexed_device(d), machine, options.get(f"{indexed_device(d)}.uuid", "")) for d in devices]


def request_devices(request: wire.Request, default_device: str) -> list[str]:
    if request.devices:
        return [device_text(d) for d in request.devices]
    return [device_text(request.device) if request.HasField("device") else default_device]


class Passage(NamedTuple):
    """What a run waited for before it started."""

    lock_wait_s: float = 0.0
    quiet: QuietWait | None = None  # None where no wait was asked, or its devices are not on this host

    def context(self) -> dict:
        """For the run's record: quiet_wait_s (and what was not quiet where the wait gave up) where a wait was
        asked, device_lock_wait_s where another fwbench held the device."""
        record = {}
        if self.lock_wait_s:
            record["device_lock_wait_s"] = round(self.lock_wait_s, 3)
        if self.quiet is not None:
            record["quiet_wait_s"] = round(self.quiet.waited_s, 3)
            if self.quiet.why:
                record["not_quiet"] = self.quiet.why
        return record


def host_probe(places: Sequence[Place], others: Callable[[], list[str]]) -> Probe:
    return HostProbe([(p.device.partition(":")[2], p.uuid) for p in places if p.device.startswith("gpu")], others)


class Gate:
    """One command's passage for its runs: device locks (on unless FWBENCH_DEVICE_LOCKS=off or `locks` False) and a
    wait of at most `wait_for_quiet_s` for a quiet host (none at 0). `passages` holds each run's, by (runner,
    repetition), for the caller that stores the run (run_all's callers; a sweep puts it in the run's record)."""

    def __init__(
        self,
        wait_for_quiet_s: float = 0.0,
        locks: bool | None = None,
        lock_dir: Path | None = None,
        probe_for: Callable[[Sequence[Place], Callable[[], list[str]]], Probe] = host_probe,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.wait_for_quiet_s, self.clock, self.sleep = wait_for_quiet_s, clock, sleep
        self.locks = locks_enabled() if locks is None else locks
        self.lock_dir = lock_dir
        self.probe_for = probe_for
        self.passages: dict[tuple[str, int], Passage] = {}
        self._runners: dict[str, tuple[str, dict]] = {}  # address -> (default device, Describe options)
        self._said: set[str] = set()

    def places(self, name: str, address: str, transport: Transport, request: wire.Request) -> list[Place]:
        """Where a request runs: on every node of a job (a comma list of addresses). Asks each runner once (a
        RunnerFailure where it does not answer); none where the gate neither locks nor waits."""
        if not self.locks and self.wait_for_quiet_s <= 0:
            return []
        places = []
        for one in jobs.addresses_of(address):
            if one not in self._runners:
                facts = runner_facts(name, one, transport)
                self._runners[one] = (facts.default_device, facts.options)
            default_device, options = self._runners[one]
            places += places_of(one, request_devices(request, default_device), options)
        return places

    def context_of(self, runner: str, repetition: int) -> dict:
        passage = self.passages.get((runner, repetition))
        return passage.context() if passage else {}

    @contextmanager
    def passage(
        self,
        places: Sequence[Place],
        label: str,
        progress: Progress = Progress(),
        stopped: Callable[[], bool] = lambda: False,
    ) -> Iterator[Passage]:
        """Hold the places' locks for the block, after waiting for a quiet host where asked; says what it waits for
        (`label`: which run). device_lock.Stopped where `stopped()` turns true while it waits."""

        def say(text: str) -> None:
            progress.note(f"{label}: {text}", "warning")

        local = [p for p in places if not p.machine]
        waits = self.wait_for_quiet_s > 0 and bool(local)
        if self.wait_for_quiet_s > 0 and places and not local:
            self._say_once(
                say,
                "its devices are on another machine, whose host cannot be watched from here: not "
                "waiting for quiet there",
            )
        locks = [p.lock() for p in places] if self._locking(say) else []
        if not locks:
            yield Passage(0.0, self._wait(local, [], say, stopped) if waits else None)
            return
        with holding(locks, WAITING if waits else MEASURING, say, self.lock_dir, stopped) as held:
            quiet = self._wait(local, locks, say, stopped) if waits else None
            if waits:
                held.mark(MEASURING)
            yield Passage(held.waited_s, quiet)

    def _locking(self, say: Callable[[str], None]) -> bool:
        if self.locks:
            try:
                safe_dir(self.lock_dir or default_dir())
            except UnsafeLockDir as unsafe:
                self._say_once(
                    say,
                    f"device locks off: {unsafe}; another fwbench on this host may measure at the "
                    "same time (the runner flags what it sees)",
                )
                self.locks = False
        return self.locks

    def _wait(
        self, places: Sequence[Place], mine: Sequence[Lock], say: Callable[[str], None], stopped: Callable[[], bool]
    ) -> QuietWait:
        others = (lambda: others_measuring(self.lock_dir, mine)) if self.locks else (lambda: [])
        probe = self.probe_for(places, others)
        waited = wait_for_quiet(self.wait_for_quiet_s, probe, self.clock, self.sleep, say, stopped)
        for text in getattr(probe, "blind", ()):
            self._say_once(say, text)
        return waited

    def _say_once(self, say: Callable[[str], None], text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            say(text)
