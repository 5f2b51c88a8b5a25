"""Where fwbench may write: the one rule for every path it writes (a results store and the folders inside it, --out,
a bundle, an MLflow folder or SQLite file, a report's folder), checked before anything is written.

Refused, with a one-line reason naming the path: a system folder or a path inside one (folders.system_folder), and
anything under the kernel's own file systems (/proc, /sys, /dev), whatever the system folders are; a symbolic link
(a write would land in its target); a regular file with more than one hard link (the other names would change with
it); and a path of the wrong kind: a folder where a file is wanted, a FIFO or a device, a file where a folder is
wanted. A file is then written whole into a temporary file beside it and renamed over the name, so that a refused
or failed write never truncates what was there, and a rename replaces a link itself, never its target.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Literal

from .folders import system_folder

Kind = Literal["file", "folder"]
# The kernel's file systems: refused even where a test gives its own system folders, as no write there is a file.
KERNEL_TREES = ("/proc", "/sys", "/dev")


class WritePathError(ValueError):
    """A path fwbench will not write: the message names it and why; `option` names the option that gave it."""

    def __init__(self, message: str, option: str = "") -> None:
        super().__init__(message)
        self.option = option


def kind_of(mode: int) -> str:
    """What a file of this st_mode is, in words."""
    for test, name in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "no regular file"


def _kernel_tree(path: Path) -> str | None:
    return next((tree for tree in KERNEL_TREES if path == Path(tree) or Path(tree) in path.parents), None)


def entry_problem(path: Path, want: Kind) -> str | None:
    """Why the existing name `path` cannot be written as a `want` (a link, a file with other hard links, the wrong
    kind), or None where it can, or where nothing is there yet. Looks at the name itself, never through a link."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # nothing there yet; a file on the way is write_path_problem's
        return None
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link (to {os.readlink(path)}): fwbench never writes through a link"
    if want == "folder":
        return None if stat.S_ISDIR(info.st_mode) else f"{path} is {kind_of(info.st_mode)}, not a folder"
    if stat.S_ISDIR(info.st_mode):
        return f"{path} is a folder, not a file"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is {kind_of(info.st_mode)}, not a regular file"
    if info.st_nlink > 1:
        return f"{path} has {info.st_nlink} hard links: writing it would change the same file under its other names"
    return None


NOT_THERE = "fwbench writes nothing there; give a path of your own, e.g. under results/"


def write_path_problem(
    path: Path,
    want: Kind,
    home: Path | None = None,
    folders: Collection[str] | None = None,
    trees: Collection[str] | None = None,
    follow_link: bool = False,
    why_not_there: str = NOT_THERE,
) -> str | None:
    """Why fwbench may not write a `want` (a file or a folder) at `path`, or None where it may (a path yet to be made
    included: its nearest existing folder must be a folder). `home`, `folders` and `trees` are folders.system_folder's,
    for tests; `follow_link` lets `path` itself be a link, for a caller that has its own rule for one (the store);
    `why_not_there` ends the refusal of a system folder."""
    given = Path(os.path.abspath(path))
    try:
        resolved = given.resolve()
        what = system_folder(resolved, home, folders, trees)
        if what:
            return f"{path} ({resolved}) {'is' if want == 'folder' else 'lies in'} {what}: {why_not_there}"
        tree = _kernel_tree(given) or _kernel_tree(resolved)
        if tree:
            return f"{path} is under {tree}, the kernel's own files: {why_not_there}"
        problem = None if follow_link else entry_problem(given, want)
        if problem:
            return problem
        if resolved.exists():
            return entry_problem(resolved, want)
        existing = next(p for p in resolved.parents if p.exists())
        if not existing.is_dir():
            return f"{path} cannot be made: {existing} is {kind_of(existing.stat().st_mode)}, not a folder"
    except (OSError, RuntimeError) as error:  # a link loop, a folder this user may not read
        return f"{path} cannot be used: {getattr(error, 'strerror', None) or error}"
    return None


def checked_write_path(path: Path, want: Kind, option: str = "") -> Path:
    """`path`, or WritePathError (naming `option`) saying why fwbench may not write there."""
    problem = write_path_problem(path, want)
    if problem:
        raise WritePathError(problem, option)
    return Path(path)


def folder_contents_problem(folder: Path, depth: int = 2) -> str | None:
    """Why a folder fwbench writes files into (a report's) cannot be written as it is: a link, a file with other hard
    links, a FIFO or a device among its entries, `depth` levels down; None where it holds none."""
    if depth < 1 or not os.path.isdir(folder) or os.path.islink(folder):
        return None
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                problem = folder_contents_problem(Path(entry.path), depth - 1)
            else:
                problem = entry_problem(Path(entry.path), "file")
            if problem:
                return problem
    return None


def output_folder(folder: Path, option: str = "") -> Path:
    """The folder fwbench writes a report's files into, made where it is missing; WritePathError, before anything is
    written, where the rule refuses it or where a file in it would be written through a link (folder_contents_problem:
    a report rewrites its own files by name)."""
    problem = write_path_problem(folder, "folder") or folder_contents_problem(folder)
    if problem:
        raise WritePathError(problem, option)
    Path(folder).mkdir(parents=True, exist_ok=True)
    return Path(folder)


def write_atomically(path: Path, data: bytes, option: str = "") -> Path:
    """`data` as the file `path`, whole or not at all: written into a temporary file in the same folder (created
    exclusively, so never through a link), flushed, then renamed over the name; WritePathError before anything is
    written where the rule refuses `path`."""
    path = checked_write_path(path, "file", option)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return path


def open_own_file(path: Path, flags: int, option: str = "") -> int:
    """A file descriptor of the regular file `path` with one link, opened never through a link (O_NOFOLLOW) and
    without waiting (a FIFO); `flags` as os.open's (O_CREAT makes it). WritePathError where it is anything else."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise WritePathError(
            entry_problem(Path(path), "file") or f"{path} cannot be opened: {error.strerror}", option
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        raise WritePathError(entry_problem(Path(path), "file") or f"{path} is {kind_of(info.st_mode)}", option)
    return fd
