"""Damaged files in a results store: a file a reader cannot read whole (a garbled or truncated Parquet file, broken
JSON), found by reading every byte of it; a file whose bytes are not those its run's manifest records
(integrity.py); a Parquet file that is no frame of its run; and a run of a newer store format, which this fwbench
cannot read. An entry with one such file is left out of every read, whole, so that no
report pools half a run."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..base.read_files import read_json
from ..base.write_paths import kind_of
from .integrity import CHECKED_SUFFIXES, MANIFEST_FILE, file_problems, manifest_problem
from .migrations import FORMAT_KEY, is_format, run_format
from .schema import STORE_FORMAT

_MAX_REASON_CHARS = 200
MAX_JSON_BYTES = 16 * 1024 * 1024  # a run's manifest holds a few kilobytes; store.json a line


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
    writer: str | None = None  # who holds the store's writer lock now
    catalog_rebuilt: bool = False  # its catalog made again from the runs (store check --rebuild)


def _reason(error: Exception, path: Path) -> str:
    # pyarrow names the file in its message: said once, beside the reason.
    text = f"{type(error).__name__}: {error}".splitlines()[0].replace(f" '{path}'", "")
    return text if len(text) <= _MAX_REASON_CHARS else text[: _MAX_REASON_CHARS - 1] + "…"


def unreadable(path: Path, key: str = "") -> str | None:
    """Why the file (Parquet or a JSON object) cannot be read, or None where it reads whole; with `key` (its entry), a
    Parquet file must also be a frame of that entry (frame_problem)."""
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):  # a FIFO would block the reader for ever; a link may point out of the store
            return f"{kind_of(mode)}, not a regular file"
        if path.suffix == ".parquet":
            with pq.ParquetFile(path) as parquet:  # every page decoded; a fifth of what pandas takes for it
                table = parquet.read(use_threads=False)
            return frame_problem(path.stem, table, key) if key else None
        if not isinstance(read_store_json(path), dict):
            return "not a JSON object"
    except Exception as error:  # whatever stops a reader, from the file system, pyarrow or json, is damage
        return _reason(error, path)
    return None


def read_store_json(path: Path) -> object:
    """A JSON file of the store (store.json, a run's configuration or manifest), bounded in kind, size and depth
    (base.read_files): never read through a link."""
    return read_json(path, MAX_JSON_BYTES, "a results store's JSON", follow_links=False)


# The columns without which a summary's rows say nothing of a run: whose run, which runner, and whether it is done,
# failed or ok. Without them a summary read as a phantom failed point, and a resume counted its run done.
SUMMARY_KEY_COLUMNS = ("run_key", "runner", "status")


def frame_problem(name: str, table: pa.Table, key: str) -> str | None:
    """Why a valid Parquet file is no frame of the entry `key`: a summary without its key columns, or any frame whose
    run_key column names another entry."""
    missing = [c for c in SUMMARY_KEY_COLUMNS if c not in table.column_names] if name == "summary" else []
    if missing:
        return (
            f"not a summary of this store: no {', '.join(missing)} column (its columns: "
            f"{', '.join(table.column_names[:8]) or 'none'})"
        )
    keys = set(table.column("run_key").to_pylist()) - {key} if "run_key" in table.column_names else set()
    if keys:
        return f"its run_key column holds {sorted(map(str, keys))[:3]}, not this run's key {key}"
    return None


def _format_problem(manifest: dict) -> str | None:
    """Why this fwbench cannot read a run of this manifest's store format, or None."""
    version = manifest.get(FORMAT_KEY, 1)
    if not is_format(version):
        return f"its {FORMAT_KEY} {str(version)[:40]!r} is not a store format"
    if run_format(manifest) > STORE_FORMAT:
        return (
            f"written by a newer fwbench (store format {version}); this fwbench reads store formats up to "
            f"{STORE_FORMAT}: update fwbench to read it"
        )
    return None


def entry_damage(folder: Path) -> list[Damage]:
    """Every unreadable or changed file of one entry's folder (a folder without its config.json is damaged too); or
    only its manifest, where the run is of a newer store format than this fwbench reads."""
    key = folder.name
    manifest_path = folder / MANIFEST_FILE
    manifest = {}
    if manifest_path.exists() and not unreadable(manifest_path):
        manifest = read_store_json(manifest_path)
        too_new = _format_problem(manifest)
        if too_new:
            return [Damage(manifest_path, too_new, key)]
    found = [] if (folder / "config.json").exists() else [Damage(folder / "config.json", "missing", key)]
    files = sorted(p for p in folder.iterdir() if p.suffix in CHECKED_SUFFIXES)
    found += [Damage(path, why, key) for path in files if (why := unreadable(path, key))]
    if manifest:
        unsealed = manifest_problem(manifest)
        changed = [(manifest_path, unsealed)] if unsealed else file_problems(folder, manifest)
        named = {d.path for d in found}
        found += [Damage(path, why, key) for path, why in changed if path not in named]
    return found
