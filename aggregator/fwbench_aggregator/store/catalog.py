"""The store's catalog: one row per entry of runs/ (a run, a noise floor, a FLOP count, ...) in one SQLite database,
<root>/catalog.sqlite, so that a command finds the runs it needs without opening every run's files.

Why SQLite: it is in Python's standard library (sqlite3, no new dependency), one file that readers and writers share
with its own locking (a compare appends without the sweep's writer lock), and it answers the few questions commands ask
(which entries hold a frame, a compare's runs, a configuration key's runs, the runs whose summary holds a value) with
an index, in milliseconds over 100,000 rows. DuckDB would read the Parquet files themselves, but it is a dependency
and would still open every file. Commits are not flushed to disk (synchronous = OFF): a catalog that a crash of the
machine damaged is found and rebuilt, and the runs themselves are flushed before they appear.

The catalog is never the only copy of anything: every fact in it is read from a run's own files (its config.json, its
manifest, its summary), which stay the record. A row says what was verified of its entry: each file's sha256 and size
as they were checked (the manifest's records, and the manifest's own), and why the entry is damaged where it is.
Whatever the catalog says, a run's files are checked against those checksums again when its data is read
(results_store.ResultStore.damage). catalog_sync.py decides whether the catalog can be trusted and rebuilds it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa

from . import summary_batches
from .run_columns import SCALING_KEY_COLUMNS

CATALOG_FILE = "catalog.sqlite"
# What this fwbench writes into a catalog; a catalog of another format is rebuilt from the runs.
# 2: world_size, so that a compare reads no summary where one world size is stored; 3: each summary as an Arrow
# record batch (summary_batches.py), so that a report reads no summary file; 4: the batch compressed
CATALOG_FORMAT = 4
# A sweep's threads share a store, and so its catalog's connection: one of them at a time uses it, so that a
# transaction is never interleaved with another thread's statements.
_IN_USE = threading.RLock()
_BUSY_TIMEOUT_S = 60.0  # a writer's transaction is one row: a reader waits for it rather than failing
_KEYS_A_QUERY = 500  # SQLite binds at most 999 parameters in a statement on older builds

_SCHEMA = """
BEGIN;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    damage TEXT NOT NULL,          -- JSON [[file, why], ...]; [] where the entry reads whole
    refusal INTEGER NOT NULL,      -- an old record of a refused request: no run (migrations.is_refusal_record)
    files TEXT NOT NULL,           -- JSON {file: {sha256, size_bytes}}: every file as verified, manifest.json too
    manifest TEXT NOT NULL,        -- the manifest's content, JSON
    config TEXT NOT NULL,          -- config.json's content, JSON
    summary TEXT NOT NULL,         -- the summary's rows in the current format, JSON records; "" without a summary
    status TEXT NOT NULL,          -- "failed" where a summary row failed, "ok" where it has a summary, else ""
    config_key TEXT NOT NULL,      -- the sweep configuration it was stored for (migrations.config_key_of)
    compare TEXT NOT NULL,         -- the compare it belongs to (selection.COMPARE_KEY of its config)
    scaling_key TEXT NOT NULL,     -- its summary's SCALING_KEY_COLUMNS as text: scaling rows over world sizes
    runner TEXT NOT NULL, framework TEXT NOT NULL, framework_version TEXT NOT NULL,
    model TEXT NOT NULL, mode TEXT NOT NULL, batch_size TEXT NOT NULL, world_size TEXT NOT NULL,
    started_at_unix_s REAL,
    summary_schema TEXT NOT NULL,  -- the id of its summary batch's schema (schemas); "" where it keeps no batch
    summary_batch BLOB             -- its summary's rows as an Arrow record batch (summary_batches.py)
);
CREATE TABLE IF NOT EXISTS schemas (id TEXT PRIMARY KEY, schema BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS frames (key TEXT NOT NULL, name TEXT NOT NULL, PRIMARY KEY (name, key));
CREATE INDEX IF NOT EXISTS entries_compare ON entries (compare);
CREATE INDEX IF NOT EXISTS entries_config_key ON entries (config_key);
CREATE INDEX IF NOT EXISTS entries_scaling_key ON entries (scaling_key);
COMMIT;
"""
_COLUMNS = (
    "key",
    "damage",
    "refusal",
    "files",
    "manifest",
    "config",
    "summary",
    "status",
    "config_key",
    "compare",
    "scaling_key",
    "runner",
    "framework",
    "framework_version",
    "model",
    "mode",
    "batch_size",
    "world_size",
    "started_at_unix_s",
    "summary_schema",
    "summary_batch",
)


class CatalogError(RuntimeError):
    """A catalog this fwbench cannot trust: damaged, or of another catalog or store format."""


def text_of(value: object) -> str:
    """A value as text, as selection.key_text reads it (2, 2.0 and "2" alike; "" for a missing one)."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def scaling_key(row: Mapping[str, object]) -> str:
    """A summary row's SCALING_KEY_COLUMNS as one text: the runs whose scaling rows a compare reads share it."""
    return "\x1f".join(text_of(row.get(column)) for column in SCALING_KEY_COLUMNS)


@dataclass(frozen=True)
class Row:
    """One entry as the catalog holds it."""

    key: str
    damage: list[tuple[str, str]]
    refusal: bool
    files: dict
    manifest: dict
    config: dict
    summary: pd.DataFrame | None  # None: no summary frame
    config_key: str
    frames: tuple[str, ...] = field(default=())

    def batch(self) -> tuple[str, bytes, bytes] | None:
        return None if self.summary is None else summary_batches.encoded(self.summary)

    def values(self, batch: tuple[str, bytes, bytes] | None = None) -> tuple:
        records = (
            [] if self.summary is None else json.loads(self.summary.to_json(orient="records", double_precision=15))
        )
        first = records[0] if records else {}
        status = "" if self.summary is None else ("failed" if any(r.get("status") != "ok" for r in records) else "ok")
        started = first.get("started_at_unix_s")
        return (
            self.key,
            json.dumps([list(d) for d in self.damage]),
            int(self.refusal),
            json.dumps(self.files, sort_keys=True),
            json.dumps(self.manifest, sort_keys=True, default=str),
            json.dumps(self.config, sort_keys=True, default=str),
            json.dumps(records) if self.summary is not None else "",
            status,
            self.config_key,
            text_of(self.config.get("compare")),
            scaling_key(first) if first else "",
            *(text_of(first.get(c)) for c in ("runner", "framework", "framework_version", "model", "mode")),
            text_of(first.get("batch_size")),
            text_of(first.get("world_size")),
            started if isinstance(started, (int, float)) else None,
            batch[0] if batch else "",
            batch[2] if batch else None,
        )


def connect(path: Path) -> sqlite3.Connection:
    """The catalog at `path`, its tables made where it is new; CatalogError where it is no database."""
    try:
        connection = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        # Not flushed to disk on every commit: the catalog is rebuilt from the runs (which are flushed) wherever a
        # crash of the machine leaves it damaged or without a run's row, so a sweep's appends do not wait for it.
        connection.execute("PRAGMA synchronous = OFF")
        connection.executescript(_SCHEMA)
        return connection
    except sqlite3.DatabaseError as error:
        raise CatalogError(f"{path}: {error}") from None


def formats(connection: sqlite3.Connection) -> tuple[int, int]:
    """The catalog format and the store format the catalog was built for; (0, 0) where it records none."""
    found = dict(query(connection, "SELECT name, value FROM meta"))
    return int(found.get("catalog_format", 0)), int(found.get("store_format", 0))


def set_formats(connection: sqlite3.Connection, store_format: int) -> None:
    with _IN_USE:
        connection.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            [("catalog_format", str(CATALOG_FORMAT)), ("store_format", str(store_format))],
        )


def put(connection: sqlite3.Connection, rows: Iterable[Row]) -> None:
    """Add or replace rows, each with its frames, in one transaction."""
    placeholders = ", ".join("?" * len(_COLUMNS))
    batches = [(row, row.batch()) for row in rows]
    values = [(row.key, row.values(batch), row.frames, batch) for row, batch in batches]
    with _IN_USE:
        connection.execute("BEGIN IMMEDIATE")
        try:
            for key, value, frames, batch in values:
                if batch:
                    connection.execute("INSERT OR IGNORE INTO schemas VALUES (?, ?)", (batch[0], batch[1]))
                connection.execute(f"INSERT OR REPLACE INTO entries VALUES ({placeholders})", value)
                connection.execute("DELETE FROM frames WHERE key = ?", (key,))
                connection.executemany("INSERT INTO frames VALUES (?, ?)", [(key, name) for name in frames])
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise


def forget(connection: sqlite3.Connection, keys: Iterable[str]) -> None:
    """Remove the rows of entries no longer in runs/ (set aside, set damaged aside)."""
    rows = [(key,) for key in keys]
    with _IN_USE:
        connection.execute("BEGIN IMMEDIATE")
        connection.executemany("DELETE FROM entries WHERE key = ?", rows)
        connection.executemany("DELETE FROM frames WHERE key = ?", rows)
        connection.execute("COMMIT")


def query(connection: sqlite3.Connection, sql: str, parameters: tuple = ()) -> list[tuple]:
    """Every row `sql` answers, read while no other thread uses the connection."""
    with _IN_USE:
        try:
            return connection.execute(sql, parameters).fetchall()
        except sqlite3.DatabaseError as error:
            raise CatalogError(
                f"the store's catalog cannot be read ({error}): `fwbench store check --rebuild` makes it again"
            ) from None


def listed(connection: sqlite3.Connection) -> set[str]:
    return {key for (key,) in query(connection, "SELECT key FROM entries")}


def readable(connection: sqlite3.Connection, runs_only: bool = False) -> set[str]:
    """The entries that read whole and are no refusal record; with `runs_only`, those with a summary (runs)."""
    having = " AND summary != ''" if runs_only else ""
    sql = f"SELECT key FROM entries WHERE damage = '[]' AND refusal = 0{having}"
    return {key for (key,) in query(connection, sql)}


def with_frame(connection: sqlite3.Connection, name: str) -> set[str]:
    return {key for (key,) in query(connection, "SELECT key FROM frames WHERE name = ?", (name,))}


def column(connection: sqlite3.Connection, name: str, keys: Iterable[str] | None = None) -> dict[str, str]:
    """One column (a name of _COLUMNS) of every row, or of `keys`."""
    if name not in _COLUMNS:
        raise ValueError(f"{name!r} is no column of the catalog; its columns: {', '.join(_COLUMNS)}")
    if keys is None:
        return dict(query(connection, f"SELECT key, {name} FROM entries"))
    wanted, found = sorted(set(keys)), dict[str, str]()
    for start in range(0, len(wanted), _KEYS_A_QUERY):  # by primary key: a few rows cost a few lookups
        chunk = wanted[start : start + _KEYS_A_QUERY]
        sql = f"SELECT key, {name} FROM entries WHERE key IN ({', '.join('?' * len(chunk))})"
        found.update(query(connection, sql, tuple(chunk)))
    return found


def store_formats(connection: sqlite3.Connection, keys: Iterable[str]) -> dict[str, int]:
    """The store format each of `keys` was written in, as its manifest records it (1 where it records none). Read in
    Python, not by SQLite's json_extract, which refuses the whole query for one manifest Python reads (a non-finite
    number, `{"": Infinity}`)."""
    found = {}
    for key, text in column(connection, "manifest", keys).items():
        manifest = json.loads(text or "{}")
        found[key] = int((manifest.get("store_format") if isinstance(manifest, dict) else None) or 1)
    return found


def summary_tables(connection: sqlite3.Connection, keys: Iterable[str]) -> dict[str, pa.Table]:
    """The summary of each of `keys` as its record batch was kept (summary_batches.py), for those with one."""
    schemas = {
        key: summary_batches.schema_of(data) for key, data in query(connection, "SELECT id, schema FROM schemas")
    }
    wanted, found = sorted(set(keys)), {}
    for start in range(0, len(wanted), _KEYS_A_QUERY):
        chunk = wanted[start : start + _KEYS_A_QUERY]
        sql = (
            "SELECT key, summary_schema, summary_batch FROM entries "
            f"WHERE summary_schema != '' AND key IN ({', '.join('?' * len(chunk))})"
        )
        found.update(
            {key: summary_batches.decoded(schemas[i], b) for key, i, b in query(connection, sql, tuple(chunk))}
        )
    return found


def keys_where(connection: sqlite3.Connection, name: str, values: Iterable[str]) -> set[str]:
    """The entries whose column `name` holds one of `values`."""
    if name not in ("compare", "config_key", "scaling_key"):
        raise ValueError(f"{name!r} is no indexed column of the catalog: compare, config_key, scaling_key")
    found: set[str] = set()
    for value in set(values):
        found |= {key for (key,) in query(connection, f"SELECT key FROM entries WHERE {name} = ?", (value,))}
    return found


def summary_values(connection: sqlite3.Connection, names: Iterable[str]) -> list[tuple[str, dict[str, object]]]:
    """Each summary row of each readable run, as (run key, {column: value}) for the columns `names`; a JSON true or
    false back as a bool."""
    names = list(names)
    parts = ", ".join(f"json_extract(r.value, '$.\"{n}\"'), json_type(r.value, '$.\"{n}\"')" for n in names)
    sql = (
        f"SELECT e.key{', ' + parts if parts else ''} FROM entries e, json_each(e.summary) r "
        "WHERE e.summary != '' AND e.damage = '[]' AND e.refusal = 0"
    )
    found = []
    for key, *cells in query(connection, sql):
        values = {}
        for name, value, kind in zip(names, cells[0::2], cells[1::2], strict=True):
            values[name] = {"true": True, "false": False}.get(kind, value)
        found.append((key, values))
    return found
