"""One sweep at a time per store: a sweep holds the store's writer lock, an flock on STORE/writer.lock, from its
start to its end, and writes into that file who holds it (pid, host, command, since when).

A second sweep waits for the lock at most WAIT_S, saying who holds it, then is refused with the same words. A
sweep holds a store for hours: waiting that long would keep a terminal or a Slurm allocation busy for nothing (a
resume afterwards finds the runs done), while a short wait covers a sweep that is just starting or ending. The lock
is the flock, not the file: it is released when its holder ends, however it ends, so it is never stale. Readers
(report, store check) take no lock: entries appear whole, by one rename.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..base.progress import Progress
from ..base.read_files import parse_json
from ..base.write_paths import WritePathError, open_own_file
from .location import LOCK_FILE, StorePathError, check_store_path

WAIT_S = 30.0
_POLL_S = 0.2


class StoreBusy(RuntimeError):
    """Another writer held the store's lock for longer than this one would wait: the message says who."""


def _holder_text(path: Path) -> str:
    try:
        with os.fdopen(_open_lock(path, os.O_RDONLY), "rb") as file:
            holder = parse_json(file.read(64 * 1024).decode("utf-8", "replace"), str(path))
        return f"pid {holder['pid']} on {holder['host']} ({holder['command']}), since {holder['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another writer (that has not said who yet)"


def _open_lock(path: Path, flags: int) -> int:
    """The lock file opened never through a link (O_NOFOLLOW: a link's target would be truncated and written), and
    only where it is a regular file of one link (a hard link's other names would be overwritten too); StorePathError
    otherwise."""
    try:
        return open_own_file(path, flags)
    except WritePathError as error:
        raise StorePathError(f"{error} (the store's writer lock)") from None


def holder(root: Path) -> str | None:
    """Who holds the writer lock of the store at `root` now, or None where no one does."""
    path = Path(root) / LOCK_FILE
    if not os.path.lexists(path):
        return None
    fd = _open_lock(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder_text(path)
    finally:
        os.close(fd)  # and with it the probe's shared lock
    return None


def _acquire(fd: int, path: Path, progress: Progress, wait_s: float) -> bool:
    """True once the lock is held; False where the file system has no locks (said, and the sweep goes on)."""
    started = time.monotonic()
    waiting_for = None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            waited = time.monotonic() - started
            if waiting_for is None:
                waiting_for = _holder_text(path)
                progress.note(
                    f"{path.parent} is being written by {waiting_for}: waiting for it, {wait_s:g} s at most", "warning"
                )
            if waited >= wait_s:
                raise StoreBusy(
                    f"{path.parent} is being written by {_holder_text(path)}; waited {waited:.0f} s. Run again with "
                    "--resume once it ends (what it stores is kept), or give another --store"
                ) from None
            time.sleep(_POLL_S)
        except OSError as error:
            progress.note(
                f"{path.parent} cannot be locked ({error.strerror}): written without the writer lock, so "
                "another sweep into it at the same time is not held off",
                "warning",
            )
            return False
    if waiting_for is not None:
        progress.note(f"waited {time.monotonic() - started:.1f} s for {path.parent}, written by {waiting_for}")
    return True


@contextmanager
def store_lock(root: Path, progress: Progress = Progress(), wait_s: float | None = None) -> Iterator[None]:
    """Hold the writer lock of the store at `root` (created if need be) for the block; StoreBusy where another writer
    holds it for longer than `wait_s` (default WAIT_S); StorePathError, before anything is written, where `root`
    can hold no store (location.py)."""
    root = check_store_path(Path(root))
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK_FILE
    fd = _open_lock(path, os.O_RDWR | os.O_CREAT)
    try:
        if _acquire(fd, path, progress, WAIT_S if wait_s is None else wait_s):
            me = {
                "pid": os.getpid(),
                "host": platform.node(),
                "command": shlex.join(sys.argv),
                "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
            os.fsync(fd)
        yield
    finally:
        os.close(fd)  # releases the lock
