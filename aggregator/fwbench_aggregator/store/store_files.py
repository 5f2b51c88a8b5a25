"""What the results store's writer does with files: each flushed to disk before it is renamed into place, and the
values of a configuration flattened as a summary row holds them."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path


def flat_value(value: object) -> object:
    """Mappings as "k=v;k=v" (as results.py writes model_options), sequences as JSON text."""
    if isinstance(value, Mapping):
        return ";".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return value


def flat(config: Mapping[str, object]) -> dict[str, object]:
    return {name: flat_value(value) for name, value in config.items()}


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, write) -> None:
    with open(path, "wb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())


def utc_stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def removed_partials(partials: list[Path], prefix: str) -> list[Path]:
    """Each of the hidden folders `partials` whose writer has ended, removed; those of living writers are kept."""
    removed = []
    for path in partials:
        parts = path.name.removeprefix(prefix).rsplit("-", 2)  # key (may hold '-'), pid, suffix
        writer = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
        if writer is not None and pid_alive(writer):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
