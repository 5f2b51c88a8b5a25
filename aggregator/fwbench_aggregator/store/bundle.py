"""A results bundle: one file that carries a store's runs to another machine's store. A gzipped tar of
`fwbench-bundle.json` (what it holds) and each run's folder as the store keeps it (`runs/<key>/...`): its frames,
configuration and manifest, whose checksums (integrity.py) are checked again where the bundle is added.

Adding a bundle writes each run as the store writes its own (a hidden folder, checked, then renamed into place). A
run whose manifest records no checksums, or whose files do not match them, is refused, named and counted. A run whose
id the store holds already is skipped where its files are the same, and kept apart under a new id where they are
not (rekey.py): nothing is dropped in silence, and nothing is read from outside `runs/<key>/`. A bundle that would
unpack to more than MAX_UNPACKED_RATIO times its size is refused whole, from its members' headers, before anything
is written.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sqlite3
import tarfile
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..base.read_files import UnreadableFile, parse_json
from ..base.write_paths import checked_write_path
from . import catalog
from .catalog_sync import row_of
from .health import entry_damage, read_store_json
from .integrity import CHECKSUM_KEY, FILES_KEY, MANIFEST_FILE, data_records
from .location import RUNS_FOLDER, store_subfolder
from .rekey import apart_id, rekeyed
from .results_store import PARTIAL_PREFIX, ResultStore
from .schema import STORE_FORMAT

BUNDLE_FORMAT = 1
INDEX_NAME = "fwbench-bundle.json"
_KEY = re.compile(r"[0-9A-Za-z_-]+")
_FILE = re.compile(r"(config|manifest)\.json|[a-z_][a-z0-9_]*\.parquet")
# A bundle unpacks to at most this many times its own size. A genuine one unpacks to a few times it (its Parquet
# frames are compressed already; the JSON shrinks about tenfold); gzip itself reaches about a thousand, so a file of
# zeros (400 KB that unpacks to 400 MiB) is refused from its headers, before anything is written. A cap relative to
# the bundle, not an absolute one: a store of any size still travels, and no bundle writes more than it weighs,
# a hundredfold.
MAX_UNPACKED_RATIO = 100


class BundleError(ValueError):
    """A file that is not a bundle this fwbench reads; the message says why."""


@dataclass(frozen=True)
class Written:
    path: Path
    runs: int
    size_bytes: int


@dataclass
class Added:
    added: list[str] = field(default_factory=list)
    identical: list[str] = field(default_factory=list)  # held by the store already, the same files: skipped
    kept_apart: dict[str, str] = field(default_factory=dict)  # its id in the bundle -> its new id in the store
    refused: dict[str, str] = field(default_factory=dict)  # key -> why its files cannot be trusted


def write_bundle(store: ResultStore, keys: Iterable[str], path: Path) -> Written:
    """The entries `keys` of `store` (readable ones: damaged entries are never carried) into one file at `path`,
    written whole or not at all, never where the rule for every path fwbench writes refuses it (base.write_paths)."""
    checked_write_path(path, "file", "OUT")
    keys = sorted(key for key in set(keys) & store.keys() if not store.damage(key))  # each checked as it is read
    index = {"bundle_format": BUNDLE_FORMAT, "store_format": STORE_FORMAT, "created_unix_s": time.time(), "runs": keys}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)[1])
    try:
        with tarfile.open(partial, "w:gz") as tar:
            data = json.dumps(index, indent=2).encode()
            info = tarfile.TarInfo(INDEX_NAME)
            info.size, info.mtime = len(data), int(index["created_unix_s"])
            tar.addfile(info, fileobj=io.BytesIO(data))
            for key in keys:
                for file in sorted((store.runs_dir / key).iterdir()):
                    tar.add(file, arcname=f"runs/{key}/{file.name}", recursive=False)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return Written(path, len(keys), path.stat().st_size)


def check_bundle(path: Path) -> None:
    """BundleError where the file at `path` is no bundle this fwbench can add: read from its members' headers and its
    index alone, before a store is locked or anything is written."""
    with _open(path) as tar:
        _members(tar, path)


def add_bundle(store: ResultStore, path: Path) -> Added:
    """Every run of the bundle at `path` that `store` lacks, each checked against its manifest before it is renamed
    into place (the caller holds the store's writer lock)."""
    added = Added()
    with _open(path) as tar:
        members = _members(tar, path)
        budget = _Budget(path, MAX_UNPACKED_RATIO * path.stat().st_size)
        store_subfolder(store.root, RUNS_FOLDER)  # never through a link (location.py)
        store.record_format()
        for key, files in members.items():
            outcome, detail = _add_one(store, tar, key, files, budget)
            if outcome == "refused":
                added.refused[key] = detail
            elif outcome == "identical":
                added.identical.append(key)
            elif detail != key:
                added.kept_apart[key] = detail
            else:
                added.added.append(key)
    return added


@dataclass
class _Budget:
    """The bytes a bundle may still unpack to: the headers say what it holds, and the bytes are counted again as they
    are written, since a header is only what the file says."""

    path: Path
    left_bytes: int

    def spend(self, size_bytes: int) -> None:
        self.left_bytes -= size_bytes
        if self.left_bytes < 0:
            raise BundleError(
                f"{self.path}: unpacks to more than {MAX_UNPACKED_RATIO} times its size "
                f"({self.path.stat().st_size} bytes), which no bundle of runs does: refused"
            )


def _open(path: Path) -> tarfile.TarFile:
    if not path.is_file():
        raise BundleError(f"{path}: no such file (a bundle is one file, written by `fwbench store bundle`)")
    try:
        return tarfile.open(path, "r:gz")
    except (tarfile.TarError, OSError, EOFError) as error:
        raise BundleError(f"{path}: not a bundle (a gzipped tar written by `fwbench store bundle`): {error}") from None


def _members(tar: tarfile.TarFile, path: Path) -> dict[str, list[tarfile.TarInfo]]:
    """Each run's files by key, every member checked to be a plain file under runs/<key>/ and the index read."""
    index, runs = None, {}
    budget = _Budget(path, MAX_UNPACKED_RATIO * path.stat().st_size)
    try:
        for member in tar:
            budget.spend(member.size)  # from its header, before its bytes are read
            name = PurePosixPath(member.name)
            if member.name == INDEX_NAME and member.isfile():
                index = parse_json(tar.extractfile(member).read().decode("utf-8", "replace"), f"{path}: {INDEX_NAME}")
                continue
            parts = name.parts
            if (
                not member.isfile()
                or len(parts) != 3
                or parts[0] != "runs"
                or not _KEY.fullmatch(parts[1])
                or not _FILE.fullmatch(parts[2])
            ):
                raise BundleError(
                    f"{path}: holds {member.name!r}, which is no run file (runs/<key>/<frame>.parquet, "
                    "config.json or manifest.json): refused whole, nothing added"
                )
            runs.setdefault(parts[1], []).append(member)
    except (tarfile.TarError, OSError, EOFError, UnreadableFile) as error:
        raise BundleError(f"{path}: cannot be read whole: {error}") from None
    if not isinstance(index, dict) or index.get("bundle_format") != BUNDLE_FORMAT:
        found = index.get("bundle_format") if isinstance(index, dict) else "none"
        raise BundleError(f"{path}: bundle format {found}; this fwbench reads bundle format {BUNDLE_FORMAT}")
    listed = index.get("runs", [])
    if not isinstance(listed, list) or not all(isinstance(key, str) for key in listed):
        raise BundleError(f"{path}: its index's runs are not a list of run ids: not a bundle this fwbench wrote")
    missing = sorted(set(listed) - set(runs))
    if missing:
        raise BundleError(f"{path}: its index lists runs it does not hold ({', '.join(missing[:5])}): cut short")
    return runs


def _add_one(
    store: ResultStore, tar: tarfile.TarFile, key: str, files: list[tarfile.TarInfo], budget: _Budget
) -> tuple[str, str]:
    """One run of the bundle: ("refused", why), ("identical", key) where the store holds the same files under its id
    (or kept them apart before), or ("added", the id it is stored under: its own, or a new one, rekey.apart_id, where
    the store holds other files under its own).

    The same id with other files is kept apart, not refused: runs of store formats before 9 took their ids from their
    configurations, so the same sweep on two machines made one id for two runs, both of which must be kept."""
    partial = Path(tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{key}-{os.getpid()}-", dir=store.runs_dir))
    try:
        entry = partial / key  # checked under its own name: its frames' run_key must name it
        entry.mkdir()
        for member in files:
            with tar.extractfile(member) as source, open(entry / PurePosixPath(member.name).name, "wb") as target:
                _copy_counted(source, target, budget)
        why = _unverified(entry)
        if why:
            return "refused", why
        if store.occupied(key):
            if data_records(store.runs_dir / key) == data_records(entry) or store.occupied(apart_id(key, entry)):
                return "identical", key
            entry = rekeyed(entry, key)
        os.rename(entry, store.runs_dir / entry.name)
        # Checked whole above; where the catalog cannot take its row, the next open reads the run and adds it.
        with contextlib.suppress(sqlite3.Error):
            catalog.put(store.catalog, [row_of(store.runs_dir / entry.name, [])])
        return "added", entry.name
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _copy_counted(source, target, budget: _Budget) -> None:
    while chunk := source.read(1 << 20):
        budget.spend(len(chunk))
        target.write(chunk)


def _unverified(entry: Path) -> str:
    """Why the run in `entry` cannot be trusted ("" where it can): its manifest records no checksums (a run from
    before they were recorded, or one whose record was stripped: its figures could be anything), or a file is
    unreadable, or differs from what its manifest records."""
    damage = entry_damage(entry)
    if damage:
        return "; ".join(f"{d.path.name}: {d.reason}" for d in damage)
    manifest = read_store_json(entry / MANIFEST_FILE) if (entry / MANIFEST_FILE).exists() else {}
    if FILES_KEY not in manifest or CHECKSUM_KEY not in manifest:
        return (
            f"{MANIFEST_FILE}: records no checksums ({FILES_KEY}, {CHECKSUM_KEY}), so its figures cannot be "
            "checked: only runs whose files are checked are added"
        )
    return ""
