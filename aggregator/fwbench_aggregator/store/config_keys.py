"""Which stored runs are a configuration's: a sweep records its configuration's key with each run (its manifest's
config_key; migrations.config_key_of reads it, and an older run's id, which was that key), so that a resume finds its
own runs wherever and whenever they were made, and never by an id (a run's id is its own)."""

from __future__ import annotations

from collections.abc import Iterable

from . import catalog
from .health import read_store_json, unreadable
from .integrity import MANIFEST_FILE
from .migrations import config_key_of
from .results_store import ResultStore


def runs_by_config(store: ResultStore, config_keys: Iterable[str] | None = None) -> dict[str, list[str]]:
    """The ids of the readable runs of `store` for each configuration key a sweep recorded (the catalog finds them), or
    for `config_keys` only. Each run is checked against its checksums (ResultStore.damage): a run changed since it was
    written is no done run, and a resume runs it again."""
    keys = store.run_keys()
    if config_keys is not None:
        keys &= catalog.keys_where(store.catalog, "config_key", config_keys)
    checked = {key for key in keys if not store.damage(key)}  # first: a row found stale is read again
    recorded = catalog.column(store.catalog, "config_key", checked)
    found: dict[str, list[str]] = {}
    for key in sorted(recorded):
        found.setdefault(recorded[key], []).append(key)
    found.pop("", None)
    return found


def unread_runs_of(store: ResultStore, config_keys: Iterable[str]) -> list[str]:
    """The entries no read sees (damaged, or an old record of a refused request) that were stored for one of
    `config_keys`: a rerun of them supersedes these. A manifest that does not read says no key: such an entry is taken
    for one of before format 9, stored under its configuration's key."""
    wanted = set(config_keys)
    folders = (
        {p.name for p in store.runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")}
        if store.runs_dir.is_dir()
        else set()
    )
    found = []
    for key in sorted(folders - store.keys()):
        path = store.runs_dir / key / MANIFEST_FILE
        manifest = read_store_json(path) if path.exists() and not unreadable(path) else {}
        if config_key_of(key, manifest if isinstance(manifest, dict) else {}) in wanted:
            found.append(key)
    return found
