"""fwbench store bundle / store add: a store's runs (all, or a selection) carried as one file, and a bundle's runs
added to a store (store.bundle)."""

from __future__ import annotations

from pathlib import Path

from ..base.progress import Progress
from ..store.bundle import Added, BundleError, Written, add_bundle, check_bundle, write_bundle
from ..store.lock import store_lock
from ..store.results_store import ResultStore
from ..store.selection import Selection, SelectionError
from .errors import UsageError


def bundle_store(store: Path, out: Path, selection: Selection = Selection()) -> Written:
    """Every readable entry of `store` (runs, noise floors, searches, FLOP counts), or the runs `selection` chooses,
    into the bundle `out`."""
    if not store.is_dir():
        raise UsageError(f"{store} is no results store: no such folder", "--store")
    results_store = ResultStore(store)
    if selection.everything:
        keys = results_store.keys()
    else:
        try:
            keys = selection.keys_in(results_store) or set()
        except SelectionError as exc:
            raise UsageError(str(exc), exc.option) from None
    if not keys:
        raise UsageError(f"{store} holds no readable run to bundle", "--store")
    return write_bundle(results_store, keys, out)


def add_to_store(store: Path, bundle: Path, progress: Progress = Progress()) -> Added:
    """The bundle's runs that `store` lacks, checked, added under the store's writer lock (store.bundle)."""
    try:
        check_bundle(bundle)  # a bundle refused whole leaves the store as it was, its lock not even taken
        with store_lock(store, progress):
            return add_bundle(ResultStore(store), bundle)
    except BundleError as exc:
        raise UsageError(str(exc), "BUNDLE") from None
