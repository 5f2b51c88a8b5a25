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
  A run that failed (out of memory, a refused setting) is stored too, with a summary whose status
  is "failed": resuming does not retry it, and reports show it as a missing point.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

KEY_LENGTH = 16
PARTIAL_PREFIX = ".partial-"
_KEY_PATTERN = re.compile(r"[0-9A-Za-z_-]+")
_FRAME_NAME_PATTERN = re.compile(r"[a-z_][a-z0-9_]*")
_RESERVED_NAMES = {"config", "manifest"}


def run_key(config: Mapping[str, object]) -> str:
    """A stable key for a configuration: the first 16 hex digits of the sha256 of its canonical JSON
    (keys sorted, no spaces). Every field of `config` counts; tuples and lists hash alike."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:KEY_LENGTH]


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

    # Reading: only complete runs, that is folders without a leading dot.

    def keys(self) -> set[str]:
        if not self.runs_dir.is_dir():
            return set()
        return {p.name for p in self.runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")}

    def run_keys(self) -> set[str]:
        """The keys that hold a run, completed or failed (a summary frame): not a calibration, a max-batch search
        or a model's FLOP count, which are kept here too."""
        return {key for key in self.keys() if (self.runs_dir / key / "summary.parquet").exists()}

    def has(self, key: str) -> bool:
        return not key.startswith(".") and (self.runs_dir / key).is_dir()

    def config(self, key: str) -> dict:
        return json.loads((self.runs_dir / key / "config.json").read_text())

    def manifest(self, key: str) -> dict:
        return json.loads((self.runs_dir / key / "manifest.json").read_text())

    def load(self, name: str) -> pd.DataFrame:
        """Frame `name` of every complete run, concatenated (runs in key order); empty if none has it."""
        frames = []
        for key in sorted(self.keys()):
            path = self.runs_dir / key / f"{name}.parquet"
            if path.exists():
                frame = pd.read_parquet(path)
                if not frame.empty:
                    frames.append(frame)
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
        if self.has(key):
            raise ValueError(f"run {key} is already stored in {self.runs_dir}; the store is append-only")
        config_text = json.dumps(dict(config), indent=2, sort_keys=True, allow_nan=False)
        manifest_text = json.dumps(dict(manifest), indent=2, sort_keys=True, default=str)
        self.runs_dir.mkdir(parents=True, exist_ok=True)
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

    def append_failure(
        self, key: str, config: Mapping[str, object], code: str, message: str,
        manifest: Mapping | None = None, columns: Mapping[str, object] | None = None,
    ) -> Path:
        """Record a run that could not complete (e.g. RESOURCE_EXHAUSTED, INVALID_ARGUMENT) as a run whose
        one summary row has status "failed": resuming skips it and reports show it as a missing point.
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
