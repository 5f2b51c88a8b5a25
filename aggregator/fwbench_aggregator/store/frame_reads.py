"""One frame of many runs read as one: what ResultStore.load returns, as pandas would concatenate each run's frame, at
a fraction of the time and memory.

Read run by run with pandas, a report over a large store spent most of its time turning each small Parquet file into
a DataFrame of its own (a hundred columns' dtypes resolved per run) and held every run's frame until it concatenated
them: 230 s and 3.6 GB over 10,000 runs. Here each run of the current store format is read as an Arrow table, tables
of one schema are gathered and made compact as they come (a batch of small tables costs far more than their rows), and
each schema's runs become one DataFrame. A run of an older format is still read and migrated on its own
(migrations.migrated fills its missing columns per run, which gathering could change).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..base.progress import Progress
from . import catalog
from .migrations import FORMAT_KEY, migrated, run_format
from .schema import STORE_FORMAT

# Files read at once, each on a thread of its own: Arrow parses them without the interpreter's lock
_READERS = min(8, os.cpu_count() or 1)
_COMPACT_TABLES = 100  # small tables gathered before they are made one: 500 held 100 MB more over 1,000 runs


@dataclass
class _Gathered:
    """The runs of one schema read so far: compacted tables, the small ones since, and each row's place in the
    result."""

    tables: list[pa.Table] = field(default_factory=list)
    pending: list[pa.Table] = field(default_factory=list)
    places: list[np.ndarray] = field(default_factory=list)

    def add(self, table: pa.Table, first_row: int) -> None:
        self.pending.append(table)
        self.places.append(np.arange(first_row, first_row + table.num_rows))
        if len(self.pending) >= _COMPACT_TABLES:
            self.compact()

    def compact(self) -> None:
        if self.pending:
            self.tables.append(pa.concat_tables(self.pending).combine_chunks())
            self.pending = []

    def frame(self) -> pd.DataFrame:
        self.compact()
        return pa.concat_tables(self.tables).to_pandas()


def _schema_key(schema: pa.Schema) -> tuple:
    """What makes two runs' tables one DataFrame alike: their Arrow fields and pandas' record of each column's dtype
    (not the row count it records of the index)."""
    pandas = schema.pandas_metadata or {}
    return (schema.remove_metadata(), repr(pandas.get("columns")))


def runs(
    connection: sqlite3.Connection,
    runs_dir: Path,
    name: str,
    formats: Mapping[str, int],
    manifest: Callable[[str], dict],
) -> Iterator[tuple[Path, Mapping, pa.Table | None]]:
    """What concatenated reads of the runs `formats` names (key: store format), in key order: each run's file, its
    manifest (only its format where that is the current one: a migration reads the rest), and its summary as the
    catalog keeps it or else its file read, a hundred runs at a time so that they are never all held at once."""
    keys = sorted(formats)
    with ThreadPoolExecutor(_READERS) as pool:
        for start in range(0, len(keys), _COMPACT_TABLES):
            chunk = keys[start : start + _COMPACT_TABLES]
            kept = catalog.summary_tables(connection, chunk) if name == "summary" else {}
            reads = {
                key: pool.submit(read_table, runs_dir / key / f"{name}.parquet")
                for key in chunk
                if key not in kept and formats[key] == STORE_FORMAT
            }
            for key in chunk:
                current = formats[key] == STORE_FORMAT
                table = kept[key] if key in kept else reads[key].result() if key in reads else None
                yield (
                    runs_dir / key / f"{name}.parquet",
                    {FORMAT_KEY: formats[key]} if current else manifest(key),
                    table,
                )


def read_table(path: Path) -> pa.Table:
    """One run's frame as Arrow reads it: whole, on one thread (for files of a few kB a third of what buffering and
    threads cost)."""
    with pq.ParquetFile(path, pre_buffer=False) as parquet:
        return parquet.read(use_threads=False)


def concatenated(
    name: str,
    runs: Iterable[tuple[Path, Mapping, pa.Table | None]],
    progress: Progress = Progress(),
    task: int = 0,
) -> pd.DataFrame:
    """Frame `name` of each run (its file, its manifest, and the frame as a table in the current format where the
    catalog keeps one), one after another as pd.concat([migrated(pd.read_parquet(file)) ...], ignore_index=True)
    makes them (runs without rows left out); empty where none has a row. `task` of `progress` advances by one a
    run."""
    gathered: dict[tuple, _Gathered] = {}
    last: tuple[pa.Schema, _Gathered] | None = None  # most runs are of the schema of the run before them
    frames: list[tuple[pd.DataFrame, np.ndarray]] = []  # runs of older formats, migrated one by one
    rows = 0
    for path, manifest, table in runs:
        if table is not None or run_format(manifest) == STORE_FORMAT:
            table = read_table(path) if table is None else table
            if table.num_rows:
                # Equal schemas, metadata and all, are checked in microseconds; hashing one took 0.15 ms
                if last is None or not table.schema.equals(last[0], check_metadata=True):
                    last = table.schema, gathered.setdefault(_schema_key(table.schema), _Gathered())
                last[1].add(table, rows)
                rows += table.num_rows
        else:
            frame = pd.read_parquet(path)
            if not frame.empty:
                frames.append((migrated(name, frame, manifest), np.arange(rows, rows + len(frame))))
                rows += len(frame)
        progress.advance(task)
    pieces = [(group.frame(), np.concatenate(group.places)) for group in gathered.values()] + frames
    if not pieces:
        return pd.DataFrame()
    pieces.sort(key=lambda piece: piece[1][0])  # columns in the order the runs bring them, as pd.concat orders them
    whole = pd.concat([frame for frame, _ in pieces], ignore_index=True) if len(pieces) > 1 else pieces[0][0]
    places = np.concatenate([place for _, place in pieces])
    if (np.diff(places) > 0).all():
        return whole
    return whole.iloc[np.argsort(places, kind="stable")].reset_index(drop=True)
