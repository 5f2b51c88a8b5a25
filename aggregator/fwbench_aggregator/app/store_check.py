"""fwbench store check: a results store's health, every file read whole; nothing is changed."""

from __future__ import annotations

from pathlib import Path

from ..store import lock
from ..store.health import StoreHealth
from ..store.migrations import StoreFormatError
from ..store.results_store import ResultStore
from .errors import UsageError


def check_store(store: Path) -> StoreHealth:
    """The store's format, its readable runs and entries, each damaged file with why, the half-written entries,
    and who is writing it now."""
    if not store.is_dir():
        raise UsageError(f"{store} is no results store: no such folder", "--store")
    try:
        results_store = ResultStore(store)
    except StoreFormatError as error:
        raise UsageError(str(error), "--store") from None
    return StoreHealth(
        store,
        results_store.format(),
        len(results_store.run_keys()),
        len(results_store.keys()),
        results_store.damaged(),
        len(results_store.partials()),
        lock.holder(store),
    )
