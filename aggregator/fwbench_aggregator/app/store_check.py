"""fwbench store check: a results store's health, every file read whole; no run is changed (its catalog is brought up to
date, or made again with --rebuild)."""

from __future__ import annotations

from pathlib import Path

from ..base.progress import Progress
from ..store import lock
from ..store.health import StoreHealth
from ..store.migrations import StoreFormatError
from ..store.results_store import ResultStore
from .errors import UsageError


def check_store(store: Path, rebuild: bool = False, progress: Progress = Progress()) -> StoreHealth:
    """The store's format, its readable runs and entries, each damaged file with why, the half-written entries,
    and who is writing it now; with `rebuild`, its catalog made again from the runs first."""
    if not store.is_dir():
        raise UsageError(f"{store} is no results store: no such folder", "--store")
    try:
        results_store = ResultStore(store)
    except StoreFormatError as error:
        raise UsageError(str(error), "--store") from None
    if rebuild:
        results_store.rebuild_catalog(progress)
    damaged = results_store.damaged()
    left_out = {d.key for d in damaged}
    return StoreHealth(
        store,
        results_store.format(),
        len(results_store.run_keys() - left_out),
        len(results_store.keys() - left_out),
        damaged,
        len(results_store.partials()),
        lock.holder(store),
        rebuild,
    )
