"""Where a results store may be: the one check of a store's path, made before anything is written to it.

A store is written into: store.json, writer.lock, runs/ and the rest go into its folder. So a path that names a
folder of something else (a system folder, the user's home, a folder that already holds other files) or no folder
at all is refused, naming the path and why (base.write_paths, the rule for every path fwbench writes). So is a store
whose insides are not its own: a link among its entries or in runs/, a writer lock or store.json that is no regular
file of one link. A path whose folders do not exist yet is accepted: a writer creates them, as `mkdir -p` would, so
that the default results/store works in a fresh checkout.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from contextlib import nullcontext
from pathlib import Path

from ..base.write_paths import WritePathError, entry_problem, write_path_problem
from ..run.slurm import FOLDER as SLURM_SUBMISSIONS

STORE_FILE = "store.json"
LOCK_FILE = "writer.lock"
# What a folder holds once a writer has used it: store.json, or from before it was recorded runs/, or a writer's
# lock alone (a sweep stopped before its first run completed), or a Slurm submission whose job has not yet stored a
# run. A non-empty folder with none of them is no store.
RUNS_FOLDER = "runs"
STORE_MARKS = (STORE_FILE, RUNS_FOLDER, LOCK_FILE, SLURM_SUBMISSIONS)


class StorePathError(WritePathError):
    """A path that cannot hold a results store: the message names it and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "--store")


def store_path_problem(
    path: Path,
    home: Path | None = None,
    folders: Collection[str] | None = None,
    trees: Collection[str] | None = None,
) -> str | None:
    """Why `path` cannot hold a results store, or None where it can (an existing store, an empty folder, or a path
    yet to be made). `home` and the system's folders and trees (base.folders) may be given, for tests."""
    try:
        return _problem(path, home, folders, trees)
    except (OSError, RuntimeError) as error:  # a link loop, a folder this user may not read
        return f"{path} cannot be used: {getattr(error, 'strerror', None) or error}"


def _problem(
    path: Path, home: Path | None, folders: Collection[str] | None, trees: Collection[str] | None
) -> str | None:
    given = Path(os.path.abspath(path))
    if given.is_symlink():  # a store may be a link within its own folder (results/store -> store-2026), no further
        target, parent = given.resolve(), given.parent.resolve()
        if parent not in target.parents:
            return f"{path} is a symbolic link to {target}, out of its folder {parent}; give the store's own path"
        if not target.exists():
            return f"{path} is a symbolic link to {target}, which does not exist"
    problem = write_path_problem(
        given,
        "folder",
        home,
        folders,
        trees,
        follow_link=True,
        why_not_there=(
            "a store writes store.json, writer.lock and runs/ into its folder; give a folder of its own, e.g. results/store"
        ),
    )
    if problem:
        return problem
    resolved = given.resolve()
    if not resolved.exists():
        return None
    problem = internals_problem(resolved)
    if problem:
        return problem
    with os.scandir(resolved) as entries:
        first = next(entries, None)
    if first is not None and not any(os.path.lexists(resolved / mark) for mark in STORE_MARKS):
        return (
            f"{path} holds files ({first.name}, ...) but no {STORE_FILE}: it is not a results store; give an "
            "empty or new folder, or a store fwbench wrote"
        )
    return None


def internals_problem(root: Path) -> str | None:
    """Why what is inside the store at `root` cannot be written as it is: a link among its entries or its runs/
    (a write or a move would land outside the store), a writer lock or store.json that is no regular file of one
    link, an internal folder that is no folder. None where the store's insides are its own."""
    for name in (LOCK_FILE, STORE_FILE):
        problem = entry_problem(root / name, "file")
        if problem:
            return f"{problem}: it is the store's {name}; remove it"
    problem = entry_problem(root / RUNS_FOLDER, "folder")
    if problem:
        return f"{problem}: it is the store's runs; remove it"
    for folder in (root, root / RUNS_FOLDER):
        with os.scandir(folder) if folder.is_dir() else nullcontext(()) as entries:
            link = next((entry.path for entry in entries if entry.is_symlink()), None)
        if link:
            return (
                f"{link} is a symbolic link inside the store {root}: a store holds no links (a run written or moved "
                "through it would leave the store); remove it"
            )
    return None


def store_subfolder(root: Path, name: str) -> Path:
    """The store's internal folder `name` (runs, damaged, aside, duplicates...), made where it is missing; a link or
    anything else there is refused (StorePathError) before anything is written into it."""
    folder = Path(root) / name
    problem = entry_problem(folder, "folder")
    if problem:
        raise StorePathError(f"{problem}: it is inside the store {root}; remove it")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def check_store_path(path: Path) -> Path:
    """`path`, or StorePathError saying why no store can be there."""
    problem = store_path_problem(path)
    if problem:
        raise StorePathError(problem)
    return path
