"""Whether a store's catalog (catalog.py) can be trusted, and its rows made from the runs' own files.

On a store's first read the catalog is checked against runs/ (one listing of the folder, no run opened): a damaged
database, one of another catalog format, or one built for another store format (a store written by an older fwbench,
with no catalog at all, is the same case: the migration to catalogs) is rebuilt from the runs; a folder the catalog
does not list (a writer killed between its run's rename and its catalog row, or a run added by an older fwbench) is
read and added, as is every entry the catalog records as damaged (one put right reads again); a row whose folder is
gone (set aside by hand) is removed. A rebuild is written beside the catalog and
renamed over it, so that a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from ..base.progress import Progress
from . import catalog
from .catalog import CATALOG_FILE, CATALOG_FORMAT, CatalogError, Row
from .health import Damage, entry_damage, read_store_json
from .integrity import CHECKED_SUFFIXES, FILES_KEY, MANIFEST_FILE, data_records, file_record
from .migrations import config_key_of, is_refusal_record, migrated
from .schema import STORE_FORMAT

_CHECKERS = min(8, os.cpu_count() or 1)  # entries whose files are checked at once
_BUILD_ROWS = 500  # rows a transaction of a rebuild adds: one transaction per row would be fsync-bound


def folders(runs_dir: Path) -> set[str]:
    """The entries of runs/: folders without a leading dot (a writer's .partial-* folder is none)."""
    if not runs_dir.is_dir():
        return set()
    with os.scandir(runs_dir) as found:
        return {e.name for e in found if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)}


def row_of(folder: Path, damage: list[Damage] | None = None) -> Row:
    """An entry's row read from its own files, every file read whole and checked (health.entry_damage) unless
    `damage` says what was just found."""
    key = folder.name
    found = entry_damage(folder) if damage is None else damage
    manifest_path = folder / MANIFEST_FILE
    manifest: dict = {}
    if manifest_path.exists() and not any(d.path == manifest_path for d in found):
        read = read_store_json(manifest_path)
        manifest = read if isinstance(read, dict) else {}
    if found:
        reasons = [(d.path.name, d.reason) for d in found]
        return Row(key, reasons, False, {}, {}, {}, None, config_key_of(key, manifest))
    files = dict(manifest.get(FILES_KEY) or data_records(folder))  # the sealed records, or, before sealing, its own
    if manifest_path.exists():
        files[MANIFEST_FILE] = file_record(manifest_path.read_bytes())
    config = read_store_json(folder / "config.json")
    frames = tuple(sorted(p.stem for p in folder.iterdir() if p.suffix == ".parquet"))
    summary = None
    if "summary" in frames:
        summary = migrated("summary", pd.read_parquet(folder / "summary.parquet"), manifest)
    return Row(
        key,
        [],
        is_refusal_record(manifest),
        files,
        manifest,
        config if isinstance(config, dict) else {},
        summary,
        config_key_of(key, manifest),
        frames,
    )


def appended_row(key: str, config: Mapping, manifest: Mapping, files: Mapping[str, dict], frames: Mapping) -> Row:
    """The row of an entry just written, from what its writer holds: nothing is read back."""
    return Row(
        key,
        [],
        False,
        dict(files),
        dict(manifest),
        dict(config),
        frames.get("summary"),
        config_key_of(key, manifest),
        tuple(sorted(frames)),
    )


def unchanged(folder: Path, files: Mapping[str, dict]) -> bool:
    """Whether the entry's files are those its row records as verified: the same names, each of the same sha256 and
    size. What every read of a run's data checks first."""
    try:
        with os.scandir(folder) as found:
            present = {e.name for e in found if os.path.splitext(e.name)[1] in CHECKED_SUFFIXES}
        return present == set(files) and all(file_record((folder / n).read_bytes()) == files[n] for n in present)
    except OSError:
        return False


def verified(connection: sqlite3.Connection, runs_dir: Path, keys: Iterable[str]) -> set[str]:
    """Those of `keys` whose row records no damage and whose files are those it records as verified (unchanged),
    checked several at once on threads (reading and hashing a file leave the interpreter's lock): what a read of
    many runs checks first; ResultStore.damage looks at the others one by one."""
    keys = list(keys)
    files, damage = catalog.column(connection, "files", keys), catalog.column(connection, "damage", keys)
    candidates = [key for key in sorted(files) if damage[key] == "[]"]
    with ThreadPoolExecutor(_CHECKERS) as pool:
        checks = pool.map(lambda key: unchanged(runs_dir / key, json.loads(files[key])), candidates)
        return {key for key, intact in zip(candidates, checks, strict=True) if intact}


def build(root: Path, runs_dir: Path, progress: Progress = Progress()) -> None:
    """A catalog of every entry of runs/, each read whole and checked, written beside the store's catalog and renamed
    over it."""
    target = root / CATALOG_FILE
    building = root / f".{CATALOG_FILE}-{os.getpid()}"
    building.unlink(missing_ok=True)
    keys = sorted(folders(runs_dir))
    task, done = progress.add_task("cataloguing the store's runs", total=len(keys)), 0
    try:
        connection = catalog.connect(building)
        catalog.set_formats(connection, STORE_FORMAT)
        for start in range(0, len(keys), _BUILD_ROWS):
            chunk = keys[start : start + _BUILD_ROWS]
            catalog.put(connection, [row_of(runs_dir / key) for key in chunk])
            done += len(chunk)
            progress.update(task, completed=done)
        connection.close()
        os.replace(building, target)
    finally:
        progress.remove_task(task)
        building.unlink(missing_ok=True)


def _trusted(path: Path) -> sqlite3.Connection | None:
    """The catalog at `path` where it is a database of this catalog and store format; else None (it is rebuilt). Its
    pages are not all read here (a check of every page would cost a compare seconds in a large store): a page found
    damaged later fails that read with a CatalogError that says to rebuild it."""
    if not path.exists():
        return None
    try:
        connection = catalog.connect(path)
        if catalog.formats(connection) == (CATALOG_FORMAT, STORE_FORMAT):
            return connection
        connection.close()
    except (CatalogError, sqlite3.DatabaseError):
        pass
    return None


def in_memory(runs_dir: Path) -> sqlite3.Connection:
    """A catalog held only by this process: where the store has no runs yet (a reader never creates a store), or its
    folder cannot be written."""
    connection = catalog.connect(Path(":memory:"))
    catalog.put(connection, [row_of(runs_dir / key) for key in sorted(folders(runs_dir))])
    return connection


def synced(root: Path, runs_dir: Path) -> sqlite3.Connection:
    """The store's catalog, checked against runs/ and brought up to date (see the module's docstring)."""
    if not runs_dir.is_dir():
        return in_memory(runs_dir)
    path = root / CATALOG_FILE
    connection = _trusted(path)
    try:
        if connection is None:
            build(root, runs_dir)
            connection = catalog.connect(path)
        present, known = folders(runs_dir), catalog.listed(connection)
        # The damaged entries are read again (they are few): one put right by hand reads as it was written.
        damaged = {key for (key,) in catalog.query(connection, "SELECT key FROM entries WHERE damage != '[]'")}
        again = (present - known) | (damaged & present)
        if again:
            catalog.put(connection, [row_of(runs_dir / key) for key in sorted(again)])
        if known - present:
            catalog.forget(connection, known - present)
        return connection
    except (OSError, sqlite3.OperationalError):  # a store on a read-only file system: read, never write
        return in_memory(runs_dir)
