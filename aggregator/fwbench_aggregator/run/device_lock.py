"""One fwbench measures a device at a time on a host: a lock per device, an flock on a file in a per-user folder
($XDG_RUNTIME_DIR/fwbench, else /tmp/fwbench-UID), held for each run. Per run, not per command: two long sweeps
then take turns instead of one waiting hours for the other to end.

The lock is the flock, not the file: it is released when its holder ends however it ends, so it is never stale.
The file says who holds it (pid, command, since when, whether it measures or waits for a quiet host), for a waiter
to say whom it waits for; that text is another process's, so it is checked and cleaned before it is shown.

A run that finds another command already waiting for its device lets that one go first (HANDOVER_S): otherwise a
command that releases the lock and takes it again for its next run would always win the race.

The folder is created 0700 and the files 0600; a folder or file that is a symlink, not ours, or open to others is
refused (UnsafeLockDir), and the caller runs without locks, saying so. FWBENCH_DEVICE_LOCKS=off turns them off.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shlex
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

from ..base.env_flags import env_flag

ENV = "FWBENCH_DEVICE_LOCKS"
POLL_S = 0.1
HANDOVER_S = 1.0
MEASURING = "measuring"
WAITING = "waiting for a quiet host"
_STATES = (MEASURING, WAITING)
MAX_SHOWN_CHARS = 120


class UnsafeLockDir(OSError):
    """The lock folder or a lock file is not safe to use: the message says which and why."""


class Stopped(Exception):
    """The caller stopped the wait (its command is ending)."""


class Lock(NamedTuple):
    file: str  # the lock file's stem: "cpu", "gpu0", a GPU's UUID (already a safe file name)
    label: str  # what a message calls the device: "gpu:0"
    here: bool = True  # a device of this host (else of a machine its runner runs on)


def locks_enabled() -> bool:
    """Whether device locks are on ($FWBENCH_DEVICE_LOCKS; on by default); EnvFlagError for a value that is no switch."""
    return env_flag(ENV, True)


def default_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / "fwbench"
    return Path(tempfile.gettempdir()) / f"fwbench-{os.getuid()}"


def safe_dir(path: Path) -> Path:
    """`path`, created 0700 if need be; UnsafeLockDir where it is a symlink, not a folder, not ours or open to others
    (whoever can write into it could swap a lock file for a link to a file of ours)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise UnsafeLockDir(f"{path}: cannot be created ({error.strerror})") from None
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UnsafeLockDir(f"{path} is not a folder (a symlink, or a file)")
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise UnsafeLockDir(f"{path} belongs to another user or is open to others (mode {info.st_mode & 0o777:o})")
    return path


def _open(path: Path, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """A lock file, created 0600, never through a symlink, and refused unless it is a file of ours."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise UnsafeLockDir(f"{path}: cannot be opened ({error.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        raise UnsafeLockDir(f"{path} is not a file of this user")
    return fd


def _try(fd: int, how: int) -> bool:
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _shown(text: object) -> str:
    """Another process's text as one printable line, cut to MAX_SHOWN_CHARS."""
    line = "".join(c if c.isprintable() else "?" for c in str(text))
    return line if len(line) <= MAX_SHOWN_CHARS else line[: MAX_SHOWN_CHARS - 1] + "…"


class Holder(NamedTuple):
    pid: int
    command: str
    since: float
    state: str
    here: bool

    def __str__(self) -> str:
        since = time.strftime("%H:%M", time.localtime(self.since)) if self.since else "?"
        doing = "" if self.state == MEASURING else f", {self.state}"
        return f"pid {self.pid} `{self.command}` since {since}{doing}"


def read_holder(fd: int) -> Holder | None:
    """Who holds the lock, from its file; None where it says nothing readable (a holder that has not written yet)."""
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"null")
        pid, since = int(record["pid"]), float(record["since"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    state = record.get("state")
    return Holder(
        pid,
        _shown(record.get("command", "?")),
        since if math.isfinite(since) else 0.0,
        state if state in _STATES else "?",
        record.get("here") is not False,
    )


def _write_holder(fd: int, lock: Lock, state: str, since: float) -> None:
    command = _shown(shlex.join(["fwbench", *sys.argv[1:]]))
    record = json.dumps({"pid": os.getpid(), "command": command, "since": since, "state": state, "here": lock.here})
    os.ftruncate(fd, 0)
    os.pwrite(fd, (record + "\n").encode(), 0)


class Held:
    """The locks a run holds, how long it waited for them, and what its holder record says."""

    def __init__(self, held: Sequence[tuple[int, Lock]], waited_s: float) -> None:
        self.held, self.waited_s, self.since = list(held), waited_s, time.time()

    def mark(self, state: str) -> None:
        for fd, lock in self.held:
            _write_holder(fd, lock, state, self.since)


@contextmanager
def _queued(path: Path) -> Iterator[None]:
    """Counted among the waiters for a lock while in the block: a shared flock on its .queue file."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def _others_queued(path: Path) -> bool:
    fd = _open(path)
    try:
        return not _try(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


def _take(
    directory: Path,
    lock: Lock,
    say: Callable[[str], None],
    stopped: Callable[[], bool],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> tuple[int, float]:
    """One lock, taken: its file's descriptor and the seconds it took."""
    path, queue = directory / f"{lock.file}.lock", directory / f"{lock.file}.queue"
    fd = _open(path)
    started = clock()
    try:
        if _try(fd, fcntl.LOCK_EX):
            if not _others_queued(queue):
                return fd, 0.0
            fcntl.flock(fd, fcntl.LOCK_UN)
            handover = True
        else:
            handover = False
        shown = None
        with _queued(queue):
            if handover:
                sleep(HANDOVER_S)
            while not _try(fd, fcntl.LOCK_EX):
                if stopped():
                    raise Stopped()
                holder = read_holder(fd)
                if holder is not None and holder != shown:
                    say(f"waiting for another fwbench measuring {lock.label}: {holder}")
                    shown = holder
                sleep(POLL_S)
        waited = clock() - started
        if shown is not None:
            say(f"{lock.label} is free after {waited:.1f} s")
        return fd, waited
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def holding(
    locks: Sequence[Lock],
    state: str = MEASURING,
    say: Callable[[str], None] = lambda text: None,
    directory: Path | None = None,
    stopped: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Held]:
    """Hold every one of `locks` for the block (in file order, so that two runs on overlapping devices never hold
    one each and wait for the other), waiting as long as it takes and saying for whom; the holder record says
    `state` until Held.mark changes it. Stopped where `stopped()` turns true while waiting; UnsafeLockDir where the
    folder or a file is not safe."""
    directory = safe_dir(directory or default_dir())
    with ExitStack() as stack:
        taken, waited = [], 0.0
        for lock in sorted({lock.file: lock for lock in locks}.values()):
            fd, seconds = _take(directory, lock, say, stopped, clock, sleep)
            stack.callback(os.close, fd)  # releases the flock
            taken.append((fd, lock))
            waited += seconds
        held = Held(taken, waited)
        held.mark(state)
        yield held


def others_measuring(directory: Path | None = None, mine: Sequence[Lock] = ()) -> list[str]:
    """Each lock of a device of this host that another fwbench process holds while it measures (not while it waits
    for a quiet host), as "another fwbench measures cpu: pid ..."; locks this process holds (its other devices) are
    not others'."""
    directory = safe_dir(directory or default_dir())
    found = []
    for path in sorted(directory.glob("*.lock")):
        if path.stem in {lock.file for lock in mine}:
            continue
        try:
            fd = _open(path, os.O_RDONLY)
        except UnsafeLockDir:
            continue  # not ours: no fwbench of this user holds it
        try:
            if _try(fd, fcntl.LOCK_SH):
                continue
            holder = read_holder(fd)
        finally:
            os.close(fd)
        if holder is None or (holder.pid != os.getpid() and holder.state == MEASURING and holder.here):
            found.append(f"another fwbench measures {_shown(path.stem)}: {holder or 'a holder not yet named'}")
    return found
