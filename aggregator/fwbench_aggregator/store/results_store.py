"""An append-only results store: one folder of Parquet files per completed run.

    <root>/runs/<key>/config.json      the configuration the key was computed from
    <root>/runs/<key>/manifest.json    versions, host, requests: what is needed to audit the run
    <root>/runs/<key>/<name>.parquet   its frames (steps, summary, power, ...), each with a run_key column

Why a folder of Parquet files per run, rather than one growing file or a database:
- Append-only by construction: a run is written once, into a folder of its own, and never
  rewritten; adding a run touches no existing file, so an old result cannot be damaged by a new one.
- Writers never share a file: an entry is written once, by one writer. A sweep still holds the store's writer lock
  (lock.py) from start to end, so that two sweeps do not run the same runs; a write whose key another writer stored
  first is kept in `<root>/duplicates/`, never dropped.
- Atomic: a run is written into a hidden sibling folder (`runs/.partial-<key>-<pid>-<n>`), its files flushed to disk,
  then renamed into place with one os.rename, which is atomic on POSIX. A writer killed at any moment leaves either
  the whole run or nothing visible; a leftover `.partial-*` folder is ignored by readers and removed by
  `ResultStore.clean_partials()`.
- Readable by anything, one frame at a time, with a glob that skips the dot-folders: `ResultStore.load("steps")`
  (pandas), DuckDB (`SELECT * FROM read_parquet('<root>/runs/[0-9a-f]*/steps.parquet', union_by_name=true)`), pyarrow
  (`pyarrow.dataset.dataset(glob.glob('<root>/runs/[0-9a-f]*/steps.parquet'), format='parquet')`).
- Resumable: a run's id is its own (random, so that stores merge without loss), and a sweep's run records the key of
  its configuration in its manifest, so a sweep finds what is done (config_keys.py) and skips it. A run that ran out
  of memory is stored too, with a summary whose status is "failed": resuming does not retry it, and reports show it as
  a missing point. A refused request is no run and is not stored.
- Versioned: every run's manifest records the store format that wrote it (schema.STORE_FORMAT), and
  `<root>/store.json` the newest format written into the store; readers migrate older runs (migrations.py) and refuse
  a store from a newer fwbench by name. A record a rerun supersedes is moved into `<root>/aside/`, never deleted.
- Checked: the manifest, written last, records every other file's sha256 and size and a checksum of its own
  content (integrity.py), so a byte changed after the write is found when the run is read.
- Catalogued: <root>/catalog.sqlite (catalog.py, catalog_sync.py) lists every entry with its summary and manifest, so
  that a command reads only the runs it needs; a run's files are checked against its checksums when its data is read.
- Damage is contained: a file that cannot be read, or whose bytes changed (health.py), leaves its entry out of every
  read, whole; `damaged()` lists each such file with the reason, and a writer moves a damaged entry in its way into
  `<root>/damaged/<time>/` before writing the key again.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from ..base.progress import Progress
from ..base.write_paths import write_atomically
from . import catalog, catalog_sync, frame_reads, store_files
from .catalog import Row
from .health import Damage, entry_damage, read_store_json, unreadable
from .integrity import MANIFEST_FILE, file_record, sealed
from .location import RUNS_FOLDER, STORE_FILE, store_subfolder
from .migrations import FORMAT_KEY, check_readable, is_format, is_refusal_record, run_format
from .schema import STORE_FORMAT

ASIDE_FOLDER = "aside"
DAMAGED_FOLDER = "damaged"
DUPLICATES_FOLDER = "duplicates"

PARTIAL_PREFIX = ".partial-"
_KEY_PATTERN = re.compile(r"[0-9A-Za-z_-]+")
_FRAME_NAME_PATTERN = re.compile(r"[a-z_][a-z0-9_]*")
_RESERVED_NAMES = {"config", "manifest"}


class AlreadyStored(ValueError):
    """A key another writer stored first: the store is append-only. `kept` is where this write went instead."""

    def __init__(self, key: str, runs_dir: Path, kept: Path) -> None:
        super().__init__(
            f"run {key} is already stored in {runs_dir}; the store is append-only: this write is kept "
            f"in {kept}, and not read"
        )
        self.key, self.kept = key, kept


class ResultStore:
    """Runs under `root`, one folder each, under its own id (plan.keys.new_run_id), or a content-addressed key for a
    fact (a FLOP count, parity evidence)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.runs_dir = self.root / RUNS_FOLDER
        self._damage: dict[str, list[Damage]] = {}  # an entry's files never change once it is visible
        self._catalog: sqlite3.Connection | None = None
        self._opening = threading.Lock()  # a sweep's threads share this store: one of them checks its catalog
        check_readable(self.format(), str(self.root))

    @property
    def catalog(self) -> sqlite3.Connection:
        """The store's catalog, checked against runs/ on this store's first read (catalog_sync.synced)."""
        with self._opening:
            if not self.runs_dir.is_dir():  # no run yet: asked again once a writer has made runs/
                return catalog_sync.in_memory(self.runs_dir)
            if self._catalog is None:
                self._catalog = catalog_sync.synced(self.root, self.runs_dir)
            return self._catalog

    def rebuild_catalog(self, progress: Progress = Progress()) -> None:
        """The catalog made again from the runs, every file read whole (fwbench store check --rebuild)."""
        if self.runs_dir.is_dir():
            catalog_sync.build(self.root, self.runs_dir, progress)
        self._catalog, self._damage = None, {}

    def format(self) -> int:
        """The newest store format written into this store (1 for a store from before formats were recorded, or
        whose store.json is damaged: each run's manifest still says its own format)."""
        path = self.root / STORE_FILE
        if not path.exists() or self._store_file_damage():
            return 1 if self.runs_dir.is_dir() and any(self.runs_dir.iterdir()) else STORE_FORMAT
        return int(read_store_json(path).get(FORMAT_KEY, 1))

    # Reading: only complete, readable entries, that is folders without a leading dot whose every file reads, less
    # old records of refusals.

    def _folders(self) -> set[str]:
        return catalog_sync.folders(self.runs_dir)

    def damage(self, key: str) -> list[Damage]:
        """The unreadable files of the entry under `key`, each with why; empty where it reads whole. Its files are
        checked against the checksums its catalog row records as verified: where they differ (or it has no row), the
        entry is read whole again and its row replaced."""
        if key not in self._damage:
            folder = self.runs_dir / key
            rows = catalog.query(self.catalog, "SELECT damage, files FROM entries WHERE key = ?", (key,))
            if rows and rows[0][0] != "[]":
                found = [Damage(folder / name, why, key) for name, why in json.loads(rows[0][0])]
            elif rows and catalog_sync.unchanged(folder, json.loads(rows[0][1])):
                found = []
            else:
                found = entry_damage(folder) if folder.is_dir() else [Damage(folder, "missing", key)]
                if folder.is_dir():
                    self._catalogued(catalog_sync.row_of(folder, found))
            self._damage[key] = found
        return self._damage[key]

    def _catalogued(self, row: Row | None, forget: str = "") -> None:
        """The catalog told of an entry written (its row) or gone (its key), where it can be."""
        try:
            catalog.put(self.catalog, [row]) if row else catalog.forget(self.catalog, [forget])
        except sqlite3.Error:  # the entry is written or gone whatever the catalog says: the next open sees it
            self._catalog = None

    def known_damage(self) -> list[Damage]:
        """The damaged files the catalog records and this store's reads found: what a report leaves out."""
        rows = catalog.query(self.catalog, "SELECT key, damage FROM entries WHERE damage != '[]' ORDER BY key")
        recorded = {key: [Damage(self.runs_dir / key / n, why, key) for n, why in json.loads(d)] for key, d in rows}
        found = {key: damage for key, damage in self._damage.items() if damage}
        return [d for key in sorted(recorded | found) for d in {**recorded, **found}[key]]

    def _store_file_damage(self) -> list[Damage]:
        path = self.root / STORE_FILE
        why = unreadable(path) if path.exists() else None
        if why is None and path.exists() and not is_format(read_store_json(path).get(FORMAT_KEY, 1)):
            why = f"its {FORMAT_KEY} is not a store format"  # a newer one is no damage: it is refused by name
        return [Damage(path, why)] if why else []

    def damaged(self) -> list[Damage]:
        """Every file of the store that cannot be read, with why: store.json and the entries' files, each read whole
        (store check); the catalog is told of each damaged entry."""
        found = {key: entry_damage(self.runs_dir / key) for key in sorted(self._folders())}
        for key, damage in found.items():
            if damage:  # an intact one is checked against its row when it is read
                self._damage[key] = damage
                self._catalogued(catalog_sync.row_of(self.runs_dir / key, damage))
        return self._store_file_damage() + [d for damage in found.values() for d in damage]

    def keys(self) -> set[str]:
        """The readable entries, as the catalog lists them, less any this store's reads found damaged."""
        return catalog.readable(self.catalog) - {key for key, damage in self._damage.items() if damage}

    def run_keys(self) -> set[str]:
        """The keys that hold a run, completed or out of memory (a summary frame): not a calibration, a max-batch
        search or a model's FLOP count, which are kept here too."""
        return catalog.readable(self.catalog, runs_only=True) - {k for k, damage in self._damage.items() if damage}

    def has(self, key: str) -> bool:
        """Whether a run (or other entry) is stored under `key`, readable; a damaged entry or an old record of a
        refused request is none."""
        return self.occupied(key) and not self.damage(key) and not is_refusal_record(self.manifest(key))

    def occupied(self, key: str) -> bool:
        """Whether a folder holds `key`, whatever it holds: a rerun must first set a superseded or damaged entry
        aside."""
        return not key.startswith(".") and (self.runs_dir / key).is_dir()

    def config(self, key: str) -> dict:
        """The entry's configuration: the catalog's copy once its files are checked (damage); a damaged entry's
        config.json as it reads."""
        if self.damage(key):
            config = read_store_json(self.runs_dir / key / "config.json")
            return config if isinstance(config, dict) else {}
        return json.loads(catalog.column(self.catalog, "config", [key]).get(key) or "{}")

    def manifest(self, key: str) -> dict:
        return self.manifests([key]).get(key, {})

    def manifests(self, keys: Iterable[str]) -> dict[str, dict]:
        """Each entry's manifest: the catalog's copy, in one query, for those whose files are checked (damage); a
        damaged entry's manifest.json as it reads ({} where it has none)."""
        keys = list(keys)
        damaged = {key for key in keys if self.damage(key)}
        found = {key: json.loads(text) for key, text in catalog.column(self.catalog, "manifest", keys).items()}
        for key in damaged:
            path = self.runs_dir / key / MANIFEST_FILE
            found[key] = read_store_json(path) if path.exists() else {}
        for key, manifest in found.items():
            check_readable(run_format(manifest), f"run {key} of {self.root}")
        return found

    def load(self, name: str, keys: Iterable[str] | None = None, progress: Progress = Progress()) -> pd.DataFrame:
        """Frame `name` of every complete run (or of those of `keys`), in the current format, concatenated (runs in
        key order); empty if none has it. Only the runs the catalog lists with that frame are opened, each checked
        against its checksums first (damage): a run found changed is left out of every read of this store.
        `progress` counts the runs read."""
        wanted = catalog.with_frame(self.catalog, name) & self.keys()
        wanted = wanted if keys is None else wanted & set(keys)
        unchecked = wanted - set(self._damage)  # checked at once; those found changed, one by one (damage)
        self._damage.update({key: [] for key in catalog_sync.verified(self.catalog, self.runs_dir, unchecked)})
        chosen = [key for key in sorted(wanted) if not self.damage(key)]
        formats = catalog.store_formats(self.catalog, chosen)
        for key, version in formats.items():
            check_readable(version, f"run {key} of {self.root}")
        task = progress.add_task(f"reading the store's {name}", total=len(chosen))
        try:
            runs = frame_reads.runs(self.catalog, self.runs_dir, name, formats, self.manifest)
            return frame_reads.concatenated(name, runs, progress, task)
        finally:
            progress.remove_task(task)

    def configs(self) -> pd.DataFrame:
        """One row per run: run_key, its configuration (mappings as "k=v;k=v"), and status: "failed"
        if any row of its summary failed, "ok" if it has a summary, "" if it has none."""
        keys = self.keys()
        configs = catalog.column(self.catalog, "config", keys)
        statuses = catalog.column(self.catalog, "status", keys)
        return pd.DataFrame(
            [
                {"run_key": key, **store_files.flat(json.loads(configs[key])), "status": statuses[key]}
                for key in sorted(keys)
            ]
        )

    # Writing.

    def append(
        self, key: str, config: Mapping[str, object], frames: Mapping[str, pd.DataFrame], manifest: Mapping
    ) -> Path:
        """Write one entry atomically and return its folder; a damaged entry under `key` is moved into damaged/
        first. A key already stored is refused (AlreadyStored, a ValueError): the store is append-only, and what
        this write holds is kept in duplicates/ instead, never dropped. Each frame gets a leading run_key column if
        it has none."""
        if not _KEY_PATTERN.fullmatch(key):
            raise ValueError(f"{key!r} is not a run key: letters, digits, '_' and '-' only")
        for name in frames:
            if not _FRAME_NAME_PATTERN.fullmatch(name) or name in _RESERVED_NAMES:
                raise ValueError(
                    f"{name!r} is not a frame name: lower-case letters, digits and '_', not config or manifest"
                )
        config_text = json.dumps(dict(config), indent=2, sort_keys=True, allow_nan=False)
        manifest = {**manifest, FORMAT_KEY: STORE_FORMAT}
        if self.occupied(key) and self.damage(key):
            self.set_damaged_aside([key])
        store_subfolder(self.root, RUNS_FOLDER)  # never through a link (location.py)
        self.record_format()
        partial, files, sealed_manifest, frames = self._written(key, config_text, manifest, frames)
        final = self.runs_dir / key
        try:
            if self.occupied(key):
                raise FileExistsError(errno.EEXIST, "already stored", str(final))
            # Onto an existing entry (another writer won the race) this fails too: a stored entry is never empty.
            os.rename(partial, final)
        except OSError:
            if not final.exists():
                shutil.rmtree(partial, ignore_errors=True)
                raise
            raise AlreadyStored(key, self.runs_dir, self._keep_duplicate(partial)) from None
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        store_files.fsync_dir(self.runs_dir)
        self._damage[key] = found = entry_damage(final)  # the run just written, read back: is it one of this store?
        row = catalog_sync.appended_row(key, json.loads(config_text), sealed_manifest, files, frames)
        self._catalogued(catalog_sync.row_of(final, found) if found else row)
        return final

    def _written(
        self, key: str, config_text: str, manifest: Mapping, frames: Mapping[str, pd.DataFrame]
    ) -> tuple[Path, dict[str, dict], dict, dict[str, pd.DataFrame]]:
        """The whole entry in a hidden folder of runs/, flushed to disk, its manifest written last with every other
        file's checksum (integrity.py); nothing is left where writing fails. Returns the folder, every file's record
        (the manifest's too), the sealed manifest and the frames as written: what the catalog's row holds."""
        partial = Path(tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{key}-{os.getpid()}-", dir=self.runs_dir))
        written = {}
        try:
            contents = {"config.json": config_text.encode()}
            for name, frame in frames.items():
                if "run_key" not in frame.columns:
                    frame = frame.copy()
                    frame.insert(0, "run_key", pd.Series([key] * len(frame), index=frame.index, dtype=object))
                buffer = io.BytesIO()
                frame.to_parquet(buffer, index=False)
                contents[f"{name}.parquet"], written[name] = buffer.getvalue(), frame
            sealed_manifest = sealed(manifest, {name: file_record(data) for name, data in contents.items()})
            contents[MANIFEST_FILE] = json.dumps(sealed_manifest, indent=2, sort_keys=True).encode()
            for name, data in contents.items():
                store_files.write_synced(partial / name, lambda f, data=data: f.write(data))
            store_files.fsync_dir(partial)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return partial, {name: file_record(data) for name, data in contents.items()}, sealed_manifest, written

    def _keep_duplicate(self, partial: Path) -> Path:
        folder = store_subfolder(self.root, DUPLICATES_FOLDER)
        target = folder / partial.name.removeprefix(PARTIAL_PREFIX)  # key-pid-suffix: unique
        os.rename(partial, target)
        return target

    def record_format(self) -> None:
        """store.json says the newest format written here; written once per format, atomically (a damaged one is
        moved into damaged/ first)."""
        path = self.root / STORE_FILE
        damaged = self._store_file_damage()
        if path.exists() and not damaged and self.format() >= STORE_FORMAT:
            return
        if damaged:
            os.rename(path, self._damaged_folder() / STORE_FILE)
        write_atomically(path, (json.dumps({FORMAT_KEY: STORE_FORMAT}) + "\n").encode())

    def _forget(self, key: str) -> None:
        self._damage.pop(key, None)
        self._catalogued(None, forget=key)

    def _damaged_folder(self) -> Path:
        folder = store_subfolder(self.root, DAMAGED_FOLDER) / store_files.utc_stamp()
        folder.mkdir(exist_ok=True)
        return folder

    def set_damaged_aside(self, keys: Iterable[str]) -> Path:
        """Move each damaged entry into damaged/<time>/, with damaged.txt naming its unreadable files and why: never
        deleted, no longer read, and the key free for a rerun. Returns the folder."""
        folder = self._damaged_folder()
        for key in keys:
            note = "".join(f"{d.path.name}: {d.reason}\n" for d in self.damage(key))
            os.rename(self.runs_dir / key, folder / key)
            (folder / key / "damaged.txt").write_text(note)
            self._forget(key)
        return folder

    def set_aside(self, key: str, why: str) -> Path:
        """Move the record under `key` out of the store's runs into aside/, with a note saying why: never deleted,
        no longer read, and the key free for a rerun."""
        aside = store_subfolder(self.root, ASIDE_FOLDER)
        target = aside / f"{key}-{store_files.utc_stamp()}-{os.getpid()}"
        os.rename(self.runs_dir / key, target)
        (target / "aside.txt").write_text(why + "\n")
        self._forget(key)
        return target

    def append_failure(
        self,
        key: str,
        config: Mapping[str, object],
        code: str,
        message: str,
        manifest: Mapping | None = None,
        columns: Mapping[str, object] | None = None,
    ) -> Path:
        """Record a run that ran out of memory as a run whose one summary row has status "failed": resuming skips
        it and reports show it as a missing point.
        The row holds the configuration (mappings as "k=v;k=v"); `columns` adds or overrides columns, e.g.
        the resolved input_shape and device, so the row lines up with the successful runs' rows."""
        row = {"run_key": key, **store_files.flat(config), **(columns or {})}
        summary = pd.DataFrame([{**row, "status": "failed", "error_code": code, "error": f"{code}: {message}"}])
        record = {
            "status": "failed",
            "code": code,
            "message": message,
            "recorded_at_unix_s": time.time(),
            **(manifest or {}),
        }
        return self.append(key, config, {"summary": summary}, record)

    def partials(self) -> list[Path]:
        if not self.runs_dir.is_dir():
            return []
        return sorted(p for p in self.runs_dir.iterdir() if p.name.startswith(PARTIAL_PREFIX))

    def clean_partials(self) -> list[Path]:
        """Remove what killed writers left behind; a folder whose writer is still alive is kept.
        Returns the folders removed."""
        return store_files.removed_partials(self.partials(), PARTIAL_PREFIX)
