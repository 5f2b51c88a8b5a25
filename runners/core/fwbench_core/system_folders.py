"""Folders a runner never writes into: the system's own and the user's home. The aggregator, which shares no code
with the runners (only the contract), keeps the same lists in its base/folders.py; tests/test_references.py holds
the two equal. A runner writes only its parity references, so only --reference-dir asks."""

from __future__ import annotations

from pathlib import Path

# Refused themselves: the system's folders and the roots under which users keep theirs.
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


def system_folder(path: str) -> str | None:
    """ "a system folder" or "your home folder" where `path` (its links resolved) is one or, for SYSTEM_TREES, lies
    in one; else None."""
    resolved = Path(path).resolve()
    try:
        home: Path | None = Path.home().resolve()
    except (RuntimeError, KeyError):  # no $HOME and no password entry: there is no home to refuse
        home = None
    if resolved == home:
        return "your home folder"
    if str(resolved) in SYSTEM_FOLDERS or any(
        resolved == Path(tree) or Path(tree) in resolved.parents for tree in SYSTEM_TREES
    ):
        return "a system folder"
    return None
