"""Folders fwbench never writes into or loads from: the system's own and the user's home. A results store (written
into) and a folder of model plug-ins (every model in it loaded by the runners) are both refused there, so that a
mistyped path such as `../../../etc` or `~` is said, not used."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

# The runner core keeps the same two lists for its --reference-dir (fwbench_core/system_folders.py: the aggregator
# and the runners share no code); tests/test_references.py holds them equal.
# Refused themselves: the system's folders, which a store would litter (or, as root, damage) and whose subfolders are
# no plug-ins, and the roots under which users keep their folders. A folder inside one is accepted
# (/home/me/results/store, /var/tmp/store, /opt/models).
SYSTEM_FOLDERS = (
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/media",
    "/mnt",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
    "/var/tmp",
)
# Refused with everything inside them: the system's configuration, programs, devices and kernel files.
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/sbin",
    "/sys",
    "/usr",
)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def system_folder(
    resolved: Path,
    home: Path | None = None,
    folders: Collection[str] | None = None,
    trees: Collection[str] | None = None,
) -> str | None:
    """ "a system folder" or "your home folder" where `resolved` (a path with its links resolved) is one, else None.
    `home`, `folders` and `trees` default to the user's home, SYSTEM_FOLDERS and SYSTEM_TREES."""
    folders = SYSTEM_FOLDERS if folders is None else folders
    trees = SYSTEM_TREES if trees is None else trees
    try:
        home = (Path.home() if home is None else home).resolve()
    except (RuntimeError, KeyError):  # no $HOME and no password entry: there is no home to refuse
        home = None
    if resolved == home:
        return "your home folder"
    if str(resolved) in folders or any(_inside(resolved, Path(tree)) for tree in trees):
        return "a system folder"
    return None


def models_dir_problem(path: Path) -> str | None:
    """Why `path` is no folder of model plug-ins (--models-dir, a sweep file's models_dir), or None."""
    try:
        resolved = Path(path).resolve()
        is_dir = resolved.is_dir()
    except (OSError, RuntimeError) as error:  # a name too long, a link loop
        return f"{path} cannot be used: {getattr(error, 'strerror', None) or error}; give a folder of model plug-ins"
    if not is_dir:
        return f"{path} is not a folder ({resolved}); give a folder of model plug-ins (docs/your-model.md)"
    what = system_folder(resolved)
    if what:
        return f"{path} ({resolved}) is {what}, not a folder of model plug-ins (docs/your-model.md)"
    return None
