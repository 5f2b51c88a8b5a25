"""Where a results store may be: the one check of a store's path, made before anything is written to it.

A store is written into: store.json, writer.lock, runs/ and the rest go into its folder. So a path that names a
folder of something else (a system folder, the user's home, a folder that already holds other files) or no folder
at all is refused, naming the path and why. A path whose folders do not exist yet is accepted: a writer creates
them, as `mkdir -p` would, so that the default results/store works in a fresh checkout.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Optional

from ..base.folders import system_folder
from ..run.slurm import FOLDER as SLURM_SUBMISSIONS

STORE_FILE = "store.json"
LOCK_FILE = "writer.lock"
# What a folder holds once a writer has used it: store.json, or from before it was recorded runs/, or a writer's
# lock alone (a sweep stopped before its first run completed), or a Slurm submission whose job has not yet stored a
# run. A non-empty folder with none of them is no store.
STORE_MARKS = (STORE_FILE, "runs", LOCK_FILE, SLURM_SUBMISSIONS)


class StorePathError(ValueError):
    """A path that cannot hold a results store: the message names it and why."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a folder"


def store_path_problem(path: Path, home: Optional[Path] = None, folders: Optional[Collection[str]] = None,
                       trees: Optional[Collection[str]] = None) -> Optional[str]:
    """Why `path` cannot hold a results store, or None where it can (an existing store, an empty folder, or a path
    yet to be made). `home` and the system's folders and trees (base.folders) may be given, for tests."""
    try:
        return _problem(path, lambda resolved: system_folder(resolved, home, folders, trees))
    except (OSError, RuntimeError) as error:  # a link loop, a folder this user may not read
        return f"{path} cannot be used: {getattr(error, 'strerror', None) or error}"


def _problem(path: Path, system: Callable[[Path], Optional[str]]) -> Optional[str]:
    given = Path(os.path.abspath(path))
    if given.is_symlink():
        target, parent = given.resolve(), given.parent.resolve()
        if parent not in target.parents:
            return f"{path} is a symbolic link to {target}, out of its folder {parent}; give the store's own path"
        if not target.exists():
            return f"{path} is a symbolic link to {target}, which does not exist"
    resolved = given.resolve()
    what = system(resolved)
    if what:
        return (f"{path} ({resolved}) is {what}: a store writes store.json, writer.lock and runs/ into its folder; "
                "give a folder of its own, e.g. results/store")
    if not resolved.exists():
        existing = next(p for p in resolved.parents if p.exists())
        if not existing.is_dir():
            return f"{path} cannot be made: {existing} is {_kind(existing.stat().st_mode)}, not a folder"
        return None
    mode = resolved.stat().st_mode
    if not stat.S_ISDIR(mode):
        return f"{path} is {_kind(mode)}, not a folder; give a folder for the store, e.g. results/store"
    if (resolved / LOCK_FILE).is_symlink():
        return (f"{resolved / LOCK_FILE} is a symbolic link: the writer lock is never opened through a link (it would "
                "overwrite its target); remove it")
    with os.scandir(resolved) as entries:
        first = next(entries, None)
    if first is not None and not any(os.path.lexists(resolved / mark) for mark in STORE_MARKS):
        return (f"{path} holds files ({first.name}, ...) but no {STORE_FILE}: it is not a results store; give an "
                "empty or new folder, or a store fwbench wrote")
    return None


def check_store_path(path: Path) -> Path:
    """`path`, or StorePathError saying why no store can be there."""
    problem = store_path_problem(path)
    if problem:
        raise StorePathError(problem)
    return path
