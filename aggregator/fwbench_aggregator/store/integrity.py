"""A run's own integrity: its manifest records every other file of the run with its sha256 and size, and a checksum
of the manifest's own content, so that any byte changed after the run was written (a flipped bit, a file edited,
swapped or added) is found when the run is read, and the run is damaged (health.py) instead of read with a changed
figure. Runs written before checksums were recorded (no "files" in the manifest) read as before."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

FILES_KEY = "files"
CHECKSUM_KEY = "manifest_sha256"
MANIFEST_FILE = "manifest.json"
CHECKED_SUFFIXES = (".json", ".parquet")  # what an entry's readers read; a note such as damaged.txt is not


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_record(data: bytes) -> dict:
    """What the manifest records of one file: its sha256 and size."""
    return {"sha256": _sha256(data), "size_bytes": len(data)}


def _content_sha256(manifest: Mapping) -> str:
    # Over the parsed content, not the text: the checksum says what the manifest means, whatever its layout.
    return _sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())


def sealed(manifest: Mapping, files: Mapping[str, dict]) -> dict:
    """The manifest with `files` (name -> file_record) and its own checksum; values JSON cannot hold become text,
    as the reader will see them."""
    body = json.loads(json.dumps({**manifest, FILES_KEY: dict(files)}, default=str))
    return {**body, CHECKSUM_KEY: _content_sha256(body)}


def data_records(folder: Path) -> dict[str, dict]:
    """file_record of each file of the entry in `folder` but its manifest: what says two entries hold the same run
    (the manifest differs with where and when the entry was written or carried)."""
    return {
        p.name: file_record(p.read_bytes()) if stat.S_ISREG(p.lstat().st_mode) else {"kind": "not a regular file"}
        for p in sorted(folder.iterdir())
        if p.suffix in CHECKED_SUFFIXES and p.name != MANIFEST_FILE
    }


def manifest_problem(manifest: Mapping) -> str | None:
    """Why a manifest is not the one its writer sealed, or None (a sealed one intact, or one from before sealing)."""
    if FILES_KEY not in manifest and CHECKSUM_KEY not in manifest:
        return None
    if not isinstance(manifest.get(FILES_KEY), Mapping) or CHECKSUM_KEY not in manifest:
        return f"it has one of {FILES_KEY} and {CHECKSUM_KEY} without the other: changed after the run was written"
    if _content_sha256({k: v for k, v in manifest.items() if k != CHECKSUM_KEY}) != manifest[CHECKSUM_KEY]:
        return "its content does not match its checksum: changed after the run was written"
    return None


def file_problems(folder: Path, manifest: Mapping) -> list[tuple[Path, str]]:
    """Each file of the entry in `folder` whose bytes are not those its manifest records (or that it does not record,
    or that is missing), with why; empty for a manifest from before checksums were recorded."""
    files = manifest.get(FILES_KEY)
    if not isinstance(files, Mapping):
        return []
    present = {p.name for p in folder.iterdir() if p.suffix in CHECKED_SUFFIXES and p.name != MANIFEST_FILE}
    found = []
    for name in sorted(present | set(files)):
        path = folder / name
        if name not in files:
            found.append((path, "not recorded in the run's manifest: added after the run was written"))
        elif name not in present:
            found.append((path, "missing: the run's manifest records it"))
        elif not stat.S_ISREG(os.lstat(path).st_mode):  # a FIFO would block the read for ever (health.py names it)
            found.append((path, "not a regular file"))
        elif files[name] != file_record(path.read_bytes()):
            found.append(
                (path, "its sha256 or size differs from the run's manifest: changed after the run was written")
            )
    return found
