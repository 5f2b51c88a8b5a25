"""A run carried into a store that holds other files under its id is kept apart under a new id (store.bundle). The new
id is a hash of the old one and of the run's files (their sha256): the same run carried twice gets the same new id,
and is found there, so a bundle added again adds nothing. Its frames name the new id (their run_key, and run_id where it was the old id, so that no reader pools the two runs as
one), its manifest records the id it came with and the key of the configuration it measured, and is sealed again
(integrity.py). Nothing else changes, its store format included, so it migrates as it would have."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..plan.keys import config_key
from .health import read_store_json
from .integrity import CHECKSUM_KEY, FILES_KEY, MANIFEST_FILE, data_records, file_record, sealed
from .migrations import CONFIG_KEY, config_key_of

KEPT_APART_KEY = "kept_apart_from"  # in the manifest: the id the run came with
_ID_COLUMNS = ("run_key", "run_id")


def _renamed(data: bytes, old: str, new: str) -> bytes:
    table = pq.read_table(io.BytesIO(data))
    for name in _ID_COLUMNS:
        if name in table.column_names and (
            pa.types.is_string(kind := table.schema.field(name).type) or pa.types.is_large_string(kind)
        ):
            column = table.column(name)
            index = table.column_names.index(name)
            table = table.set_column(index, name, pc.if_else(pc.equal(column, old), new, column))
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def apart_id(old: str, entry: Path) -> str:
    """The id the run in `entry`, carried as `old`, is kept apart under: content-addressed (see above)."""
    return config_key({KEPT_APART_KEY: old, "files": data_records(entry)})


def rekeyed(entry: Path, old: str) -> Path:
    """The checked run in the folder `entry` (carried as `old`), written again beside it under apart_id; its folder."""
    new = apart_id(old, entry)
    target = entry.parent / new
    target.mkdir()
    manifest = read_store_json(entry / MANIFEST_FILE)
    contents = {}
    for path in sorted(entry.iterdir()):
        if path.name == MANIFEST_FILE:
            continue
        data = path.read_bytes()
        contents[path.name] = _renamed(data, old, new) if path.suffix == ".parquet" else data
    config_key = config_key_of(old, manifest)
    body = {k: v for k, v in manifest.items() if k not in (FILES_KEY, CHECKSUM_KEY)}
    body = {**body, KEPT_APART_KEY: old, **({CONFIG_KEY: config_key} if config_key else {})}
    contents[MANIFEST_FILE] = json.dumps(
        sealed(body, {n: file_record(d) for n, d in contents.items()}), indent=2, sort_keys=True
    ).encode()
    for name, data in contents.items():
        (target / name).write_bytes(data)
    return target
