"""An append-only results store: one folder of Parquet files per completed run.

    <root>/runs/<key>/config.json      the configuration the key was computed from
    <root>/runs/<key>/manifest.json    versions, host, requests: what is needed to audit the run
    <root>/runs/<key>/<name>.parquet   its frames (steps, summary, power, ...), each with a run_key column

Why a folder of Parquet files per run, rather than one growing file or a database:
- Append-only by construction: a run is written once, into a folder of its own, and never
  rewritten; adding a run touches no existing file, so an old result cannot be damaged by a new one.
- No writer lock: writers never share a file, so two sweeps may write into one store at once.
- Atomic: a run is written into a hidden sibling folder (`runs/.partial-<key>-<pid>-<n>`), its files
  flushed to disk, then renamed into place with one os.rename, which is atomic on POSIX. A writer
  killed at any moment leaves either the whole run or nothing visible; a leftover `.partial-*`
  folder is ignored by readers and removed by `ResultStore.clean_partials()`.
- Readable by anything, one frame at a time, with a glob that skips the dot-folders:
  `ResultStore.load("steps")` (pandas), DuckDB
  (`SELECT * FROM read_parquet('<root>/runs/[0-9a-f]*/steps.parquet', union_by_name=true)`), pyarrow
  (`pyarrow.dataset.dataset(glob.glob('<root>/runs/[0-9a-f]*/steps.parquet'), format='parquet')`).
- Resumable: the key is a hash of the configuration, so a sweep asks `has(key)` and skips what is done.
  A run that ran out of memory is stored too, with a summary whose status is "failed": resuming does
  not retry it, and reports show it as a missing point. A refused request is no run and is not stored.
- Versioned: every run's manifest records the store format that wrote it (schema.STORE_FORMAT), and
  `<root>/store.json` the newest format written into the store; readers migrate older runs
  (migrations.py) and refuse a store from a newer fwbench by name. A record superseded by a rerun is
  moved aside into `<root>/aside/`, never deleted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from .migrations import FORMAT_KEY, check_readable, is_refusal_record, migrated, run_format
from .schema import STORE_FORMAT

STORE_FILE = "store.json"
ASIDE_FOLDER = "aside"

PARTIAL_PREFIX = ".partial-"
_KEY_PATTERN = re.compile(r"[0-9A-Za-z_-]+")
_FRAME_NAME_PATTERN = re.compile(r"[a-z_][a-z0-9_]*")
_RESERVED_NAMES = {"config", "manifest"}


def _flat_value(value: object) -> object:
    """Mappings as "k=v;k=v" (as results.py writes model_options), sequences as JSON text."""
    if isinstance(value, Mapping):
        return ";".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return value


def _flat(config: Mapping[str, object]) -> dict[str, object]:
    return {name: _flat_value(value) for name, value in config.items()}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, write) -> None:
    with open(path, "wb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ResultStore:
    """Runs under `root`, one folder each, keyed by `run_key(config)`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.runs_dir = self.root / "runs"
        self._manifests: dict[str, dict] = {}
        check_readable(self.format(), str(self.root))

    def format(self) -> int:
        """The newest store format written into this store (1 for a store from before formats were recorded)."""
        path = self.root / STORE_FILE
        if not path.exists():
            return 1 if self.runs_dir.is_dir() and any(self.runs_dir.iterdir()) else STORE_FORMAT
        return int(json.loads(path.read_text()).get(FORMAT_KEY, 1))

    # Reading: only complete runs, that is folders without a leading dot, less old records of refusals.

    def keys(self) -> set[str]:
        if not self.runs_dir.is_dir():
            return set()
        found = {p.name for p in self.runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")}
        return {key for key in found if not is_refusal_record(self.manifest(key))}

    def run_keys(self) -> set[str]:
        """The keys that hold a run, completed or out of memory (a summary frame): not a calibration, a max-batch
        search or a model's FLOP count, which are kept here too."""
        return {key for key in self.keys() if (self.runs_dir / key / "summary.parquet").exists()}

    def has(self, key: str) -> bool:
        """Whether a run (or other entry) is stored under `key`; an old record of a refused request is none."""
        return not key.startswith(".") and (self.runs_dir / key).is_dir() and not is_refusal_record(self.manifest(key))

    def occupied(self, key: str) -> bool:
        """Whether a folder holds `key`, whatever it holds: a rerun must first set a superseded record aside."""
        return not key.startswith(".") and (self.runs_dir / key).is_dir()

    def config(self, key: str) -> dict:
        return json.loads((self.runs_dir / key / "config.json").read_text())

    def manifest(self, key: str) -> dict:
        if key not in self._manifests:
            path = self.runs_dir / key / "manifest.json"
            manifest = json.loads(path.read_text()) if path.exists() else {}
            check_readable(run_format(manifest), f"run {key} of {self.root}")
            self._manifests[key] = manifest
        return self._manifests[key]

    def load(self, name: str) -> pd.DataFrame:
        """Frame `name` of every complete run, in the current format, concatenated (runs in key order); empty if
        none has it."""
        frames = []
        for key in sorted(self.keys()):
            path = self.runs_dir / key / f"{name}.parquet"
            if path.exists():
                frame = pd.read_parquet(path)
                if not frame.empty:
                    frames.append(migrated(name, frame, self.manifest(key)))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def configs(self) -> pd.DataFrame:
        """One row per run: run_key, its configuration (mappings as "k=v;k=v"), and status: "failed"
        if any row of its summary failed, "ok" if it has a summary, "" if it has none."""
        rows = []
        for key in sorted(self.keys()):
            summary = self.runs_dir / key / "summary.parquet"
            status = ""
            if summary.exists():
                statuses = pd.read_parquet(summary)
                statuses = statuses["status"] if "status" in statuses else pd.Series(dtype=object)
                status = "failed" if (statuses != "ok").any() else "ok"
            rows.append({"run_key": key, **_flat(self.config(key)), "status": status})
        return pd.DataFrame(rows)

    # Writing.

    def append(self, key: str, config: Mapping[str, object], frames: Mapping[str, pd.DataFrame], manifest: Mapping) -> Path:
        """Write one run atomically and return its folder. Refuses (ValueError) a key already stored:
        the store is append-only. Each frame gets a leading run_key column if it has none."""
        if not _KEY_PATTERN.fullmatch(key):
            raise ValueError(f"{key!r} is not a run key: letters, digits, '_' and '-' only")
        for name in frames:
            if not _FRAME_NAME_PATTERN.fullmatch(name) or name in _RESERVED_NAMES:
                raise ValueError(f"{name!r} is not a frame name: lower-case letters, digits and '_', not config or manifest")
        if self.occupied(key):
            raise ValueError(f"run {key} is already stored in {self.runs_dir}; the store is append-only")
        config_text = json.dumps(dict(config), indent=2, sort_keys=True, allow_nan=False)
        manifest_text = json.dumps({**manifest, FORMAT_KEY: STORE_FORMAT}, indent=2, sort_keys=True, default=str)
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self._record_format()
        partial = Path(tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{key}-{os.getpid()}-", dir=self.runs_dir))
        try:
            _write_synced(partial / "config.json", lambda f: f.write(config_text.encode()))
            _write_synced(partial / "manifest.json", lambda f: f.write(manifest_text.encode()))
            for name, frame in frames.items():
                if "run_key" not in frame.columns:
                    frame = frame.copy()
                    frame.insert(0, "run_key", pd.Series([key] * len(frame), index=frame.index, dtype=object))
                _write_synced(partial / f"{name}.parquet", lambda f, frame=frame: frame.to_parquet(f, index=False))
            _fsync_dir(partial)
            final = self.runs_dir / key
            try:
                # Onto an existing run (another writer won the race) this fails: a stored run is never empty.
                os.rename(partial, final)
            except OSError as error:
                if final.exists():
                    raise ValueError(f"run {key} is already stored in {self.runs_dir}; the store is append-only") from error
                raise
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        _fsync_dir(self.runs_dir)
        return final

    def _record_format(self) -> None:
        """store.json says the newest format written here; written once per format, atomically."""
        if self.format() >= STORE_FORMAT and (self.root / STORE_FILE).exists():
            return
        partial = self.root / f".{STORE_FILE}-{os.getpid()}"
        partial.write_text(json.dumps({FORMAT_KEY: STORE_FORMAT}) + "\n")
        os.replace(partial, self.root / STORE_FILE)

    def set_aside(self, key: str, why: str) -> Path:
        """Move the record under `key` out of the store's runs into aside/, with a note saying why: never deleted,
        no longer read, and the key free for a rerun."""
        aside = self.root / ASIDE_FOLDER
        aside.mkdir(parents=True, exist_ok=True)
        target = aside / f"{key}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
        os.rename(self.runs_dir / key, target)
        (target / "aside.txt").write_text(why + "\n")
        self._manifests.pop(key, None)
        return target

    def append_failure(
        self, key: str, config: Mapping[str, object], code: str, message: str,
        manifest: Mapping | None = None, columns: Mapping[str, object] | None = None,
    ) -> Path:
        """Record a run that ran out of memory as a run whose one summary row has status "failed": resuming skips
        it and reports show it as a missing point.
        The row holds the configuration (mappings as "k=v;k=v"); `columns` adds or overrides columns, e.g.
        the resolved input_shape and device, so the row lines up with the successful runs' rows."""
        row = {"run_key": key, **_flat(config), **(columns or {})}
        summary = pd.DataFrame([{**row, "status": "failed", "error_code": code, "error": f"{code}: {message}"}])
        record = {"status": "failed", "code": code, "message": message, "recorded_at_unix_s": time.time(), **(manifest or {})}
        return self.append(key, config, {"summary": summary}, record)

    def partials(self) -> list[Path]:
        if not self.runs_dir.is_dir():
            return []
        return sorted(p for p in self.runs_dir.iterdir() if p.name.startswith(PARTIAL_PREFIX))

    def clean_partials(self) -> list[Path]:
        """Remove what killed writers left behind; a folder whose writer is still alive is kept.
        Returns the folders removed."""
        removed = []
        for path in self.partials():
            parts = path.name.removeprefix(PARTIAL_PREFIX).rsplit("-", 2)  # key (may hold '-'), pid, suffix
            writer = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
            if writer is not None and _pid_alive(writer):
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        return removed
