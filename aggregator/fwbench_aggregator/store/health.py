"""Damaged files in a results store: a file a reader cannot read whole (a garbled or truncated Parquet file, broken
JSON), found by reading every byte of it. An entry with one such file is left out of every read, whole, so that no
report pools half a run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pyarrow.parquet as pq

_MAX_REASON_CHARS = 200


@dataclass(frozen=True)
class Damage:
    path: Path  # the unreadable file
    reason: str
    key: str = ""  # the entry it belongs to; "" for the store's own store.json


@dataclass(frozen=True)
class StoreHealth:
    """What `fwbench store check` says of a store."""

    store: Path
    format: int
    runs: int  # readable runs
    entries: int  # readable entries: runs, and the noise floors, max-batch searches and FLOP counts kept beside them
    damaged: list[Damage] = field(default_factory=list)
    partials: int = 0  # hidden folders of writers at work or killed mid-write: never read
    writer: Optional[str] = None  # who holds the store's writer lock now


def _reason(error: Exception, path: Path) -> str:
    # pyarrow names the file in its message: said once, beside the reason.
    text = f"{type(error).__name__}: {error}".splitlines()[0].replace(f" '{path}'", "")
    return text if len(text) <= _MAX_REASON_CHARS else text[:_MAX_REASON_CHARS - 1] + "…"


def unreadable(path: Path) -> Optional[str]:
    """Why the file (Parquet or a JSON object) cannot be read, or None where it reads whole."""
    try:
        if path.suffix == ".parquet":
            with pq.ParquetFile(path) as parquet:  # every page decoded; a fifth of what pandas takes for it
                parquet.read(use_threads=False)
        elif not isinstance(json.loads(path.read_text()), dict):
            return "not a JSON object"
    except Exception as error:  # whatever stops a reader, from the file system, pyarrow or json, is damage
        return _reason(error, path)
    return None


def entry_damage(folder: Path) -> list[Damage]:
    """Every unreadable file of one entry's folder; a folder without its config.json is damaged too."""
    key = folder.name
    found = [] if (folder / "config.json").exists() else [Damage(folder / "config.json", "missing", key)]
    files = sorted(p for p in folder.iterdir() if p.suffix in (".json", ".parquet"))
    return found + [Damage(path, why, key) for path in files if (why := unreadable(path))]
