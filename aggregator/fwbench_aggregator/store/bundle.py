"""A results bundle: one file that carries a store's runs to another machine's store. A gzipped tar of
`fwbench-bundle.json` (what it holds) and each run's folder as the store keeps it (`runs/<key>/...`): its frames,
configuration and manifest, whose checksums (integrity.py) are checked again where the bundle is added.

Adding a bundle writes each run as the store writes its own (a hidden folder, checked, then renamed into place),
skips a run the store already holds, and refuses a run whose files do not match its manifest, naming it: nothing
is dropped in silence, and nothing is read from outside `runs/<key>/`.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..base.read_files import UnreadableFile, parse_json
from ..base.write_paths import checked_write_path
from .health import entry_damage
from .results_store import PARTIAL_PREFIX, ResultStore
from .schema import STORE_FORMAT

BUNDLE_FORMAT = 1
INDEX_NAME = "fwbench-bundle.json"
_KEY = re.compile(r"[0-9A-Za-z_-]+")
_FILE = re.compile(r"(config|manifest)\.json|[a-z_][a-z0-9_]*\.parquet")


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
    present: list[str] = field(default_factory=list)  # held by the store already: skipped
    refused: dict[str, str] = field(default_factory=dict)  # key -> why its files cannot be trusted


def write_bundle(store: ResultStore, keys: Iterable[str], path: Path) -> Written:
    """The entries `keys` of `store` (readable ones: damaged entries are never carried) into one file at `path`,
    written whole or not at all, never where the rule for every path fwbench writes refuses it (base.write_paths)."""
    checked_write_path(path, "file", "OUT")
    keys = sorted(set(keys) & store.keys())
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


def add_bundle(store: ResultStore, path: Path) -> Added:
    """Every run of the bundle at `path` that `store` lacks, each checked against its manifest before it is renamed
    into place (the caller holds the store's writer lock)."""
    added = Added()
    with _open(path) as tar:
        members = _members(tar, path)
        store.runs_dir.mkdir(parents=True, exist_ok=True)
        store.record_format()
        for key, files in members.items():
            if store.occupied(key):
                added.present.append(key)
                continue
            why = _add_one(store, tar, key, files)
            if why:
                added.refused[key] = why
            else:
                added.added.append(key)
    return added


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
    try:
        for member in tar:
            name = PurePosixPath(member.name)
            if member.name == INDEX_NAME and member.isfile():
                index = parse_json(tar.extractfile(member).read().decode("utf-8", "replace"), f"{path}: {INDEX_NAME}")
                continue
            parts = name.parts
            if (not member.isfile() or len(parts) != 3 or parts[0] != "runs" or not _KEY.fullmatch(parts[1])
                    or not _FILE.fullmatch(parts[2])):
                raise BundleError(f"{path}: holds {member.name!r}, which is no run file (runs/<key>/<frame>.parquet, "
                                  "config.json or manifest.json): refused whole, nothing added")
            runs.setdefault(parts[1], []).append(member)
    except (tarfile.TarError, OSError, EOFError, UnreadableFile) as error:
        raise BundleError(f"{path}: cannot be read whole: {error}") from None
    if not isinstance(index, dict) or index.get("bundle_format") != BUNDLE_FORMAT:
        found = index.get("bundle_format") if isinstance(index, dict) else "none"
        raise BundleError(f"{path}: bundle format {found}; this fwbench reads bundle format {BUNDLE_FORMAT}")
    missing = sorted(set(index.get("runs", [])) - set(runs))
    if missing:
        raise BundleError(f"{path}: its index lists runs it does not hold ({', '.join(missing[:5])}): cut short")
    return runs


def _add_one(store: ResultStore, tar: tarfile.TarFile, key: str, files: list[tarfile.TarInfo]) -> str:
    """One run written into the store, or why not ("" where it was added)."""
    partial = Path(tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{key}-{os.getpid()}-", dir=store.runs_dir))
    try:
        entry = partial / key  # checked under its own name: its frames' run_key must name it
        entry.mkdir()
        for member in files:
            with tar.extractfile(member) as source, open(entry / PurePosixPath(member.name).name, "wb") as target:
                shutil.copyfileobj(source, target)
        damage = entry_damage(entry)
        if damage:
            return "; ".join(f"{d.path.name}: {d.reason}" for d in damage)
        os.rename(entry, store.runs_dir / key)
        return ""
    finally:
        shutil.rmtree(partial, ignore_errors=True)

