"""The store's catalog (store/catalog.py): it agrees with the runs after appends, interrupted appends, damage and
resumes; a missing, stale or damaged catalog is rebuilt from the runs, never trusted; a store written before catalogs
gets one on its first open; commands read only the runs they select."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_store_format import OLD_SUMMARY, old_store

from fwbench_aggregator.app.report import selected_frames
from fwbench_aggregator.app.store_check import check_store
from fwbench_aggregator.store import catalog, catalog_sync
from fwbench_aggregator.store.catalog import CATALOG_FILE, CATALOG_FORMAT
from fwbench_aggregator.store.config_keys import runs_by_config
from fwbench_aggregator.store.health import entry_damage
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_aggregator.store.schema import STORE_FORMAT
from fwbench_aggregator.store.selection import Selection


def frames(key: str, batch: int) -> dict[str, pd.DataFrame]:
    summary = {**OLD_SUMMARY, "run_id": key, "batch_size": batch, "median_step_time_s": 0.01 * batch}
    steps = pd.DataFrame([{"runner": "torch", "step_index": i, "step_time_s": 0.01 * batch} for i in range(3)])
    return {"summary": pd.DataFrame([summary]), "steps": steps}


def append(store: ResultStore, key: str, batch: int = 1, compare: str = "c1") -> None:
    store.append(key, {"batch": batch, "compare": compare}, frames(key, batch), {"config_key": f"point-{batch}"})


def truth(root: Path) -> set[str]:
    """The runs that read whole, found by reading every file of every run: what the catalog must agree with."""
    runs = root / "runs"
    return {p.name for p in runs.iterdir() if not p.name.startswith(".") and not entry_damage(p)}


def agrees(root: Path) -> None:
    store = ResultStore(root)
    summary = store.load("summary")
    expected = truth(root)
    assert set(summary.get("run_key", [])) == expected and store.keys() == expected and store.run_keys() == expected
    assert set(store.load("steps").get("run_key", [])) == expected
    listed = catalog.listed(sqlite3.connect(root / CATALOG_FILE))
    assert listed == {p.name for p in (root / "runs").iterdir() if not p.name.startswith(".")}


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


class Unlisted(ResultStore):
    """A writer killed between its run's rename and its catalog row: the run is stored, the row is not."""

    def _catalogued(self, row, forget: str = "") -> None:
        pass


OPERATIONS = st.lists(
    st.sampled_from(["append", "interrupted", "damage", "set_aside", "drop_catalog", "garble_catalog", "resume"]),
    min_size=1,
    max_size=8,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_the_catalog_agrees_with_the_runs_whatever_happens(tmp_path_factory, operations):
    root = tmp_path_factory.mktemp("store")
    store = ResultStore(root)
    append(store, "r0")
    for n, operation in enumerate(operations, start=1):
        key = f"r{n}"
        if operation == "append":
            append(store, key, n)
        elif operation == "interrupted":
            append(Unlisted(root), key, n)
        elif operation == "damage":
            intact = sorted(truth(root))
            if intact:
                flip(root / "runs" / intact[0] / "steps.parquet")
        elif operation == "set_aside":
            survivors = sorted(truth(root))
            if survivors:
                store.set_aside(survivors[-1], "test")
        elif operation == "drop_catalog":
            (root / CATALOG_FILE).unlink(missing_ok=True)
        elif operation == "garble_catalog":
            (root / CATALOG_FILE).write_bytes(b"not a database" * 100)
        else:  # a resume: a new writer sets the damaged runs aside and appends
            store = ResultStore(root)
            damaged = sorted({d.key for d in store.damaged() if d.key})
            if damaged:
                store.set_damaged_aside(damaged)
            append(store, key, n)
        agrees(root)


def test_a_catalog_of_another_format_or_store_format_is_rebuilt(tmp_path):
    store = ResultStore(tmp_path)
    append(store, "a")
    append(store, "b", 2)
    for name, value in (("catalog_format", CATALOG_FORMAT - 1), ("store_format", STORE_FORMAT - 1)):
        connection = sqlite3.connect(tmp_path / CATALOG_FILE)
        connection.execute("UPDATE meta SET value = ? WHERE name = ?", (str(value), name))
        connection.execute("DELETE FROM entries WHERE key = 'b'")  # what a stale catalog lacks
        connection.commit()
        connection.close()
        assert ResultStore(tmp_path).keys() == {"a", "b"}
        assert catalog.formats(sqlite3.connect(tmp_path / CATALOG_FILE)) == (CATALOG_FORMAT, STORE_FORMAT)


def test_a_damaged_run_put_right_reads_again(tmp_path):
    store = ResultStore(tmp_path)
    append(store, "a")
    path = tmp_path / "runs" / "a" / "steps.parquet"
    flip(path)
    assert ResultStore(tmp_path).load("summary").empty
    flip(path)  # the same byte back: the run as it was written
    assert ResultStore(tmp_path).keys() == {"a"}


def test_a_row_that_lies_is_never_trusted(tmp_path):
    store = ResultStore(tmp_path)
    append(store, "a")
    append(store, "b", 2)
    connection = sqlite3.connect(tmp_path / CATALOG_FILE)  # the row says "a" is damaged, and "b" has other files
    connection.execute("UPDATE entries SET files = '{}' WHERE key = 'b'")
    connection.commit()
    reopened = ResultStore(tmp_path)
    assert set(reopened.load("summary")["run_key"]) == {"a", "b"}  # b read again from its own files
    (tmp_path / "runs" / "a" / "config.json").write_text('{"batch": 9}')  # a byte changed after the write
    again = ResultStore(tmp_path)
    assert set(again.load("summary")["run_key"]) == {"b"} and again.keys() == {"b"}
    assert {d.key for d in again.known_damage()} == {"a"}


def test_a_store_from_before_catalogs_gets_one_on_first_open(tmp_path):
    old_store(tmp_path, runs=3, refusal=True)  # format 1: no catalog, no checksums, a refusal record
    assert not (tmp_path / CATALOG_FILE).exists()
    store = ResultStore(tmp_path)
    summary = store.load("summary")
    assert (tmp_path / CATALOG_FILE).exists() and len(summary) == 3 and "world_size" in summary  # migrated
    assert store.keys() == store.run_keys() == {f"{r:016x}" for r in range(3)}  # the refusal is no run
    assert runs_by_config(store) == {key: [key] for key in store.keys()}  # before format 9, a run's id was its key
    shutil.rmtree(tmp_path / "runs" / f"{0:016x}")
    assert ResultStore(tmp_path).keys() == {f"{r:016x}" for r in (1, 2)}


def test_store_check_rebuild_makes_the_catalog_again(tmp_path):
    store = ResultStore(tmp_path)
    append(store, "a")
    (tmp_path / CATALOG_FILE).write_bytes(b"garbage")
    health = check_store(tmp_path, rebuild=True)
    assert health.catalog_rebuilt and health.runs == 1 and not health.damaged
    assert catalog.listed(sqlite3.connect(tmp_path / CATALOG_FILE)) == {"a"}


def test_a_selection_reads_only_its_runs(tmp_path, monkeypatch):
    store = ResultStore(tmp_path)
    for n in range(6):
        append(store, f"r{n}", batch=n % 2 + 1, compare=f"c{n // 3}")
    opened: list[str] = []
    parquet_file = pq.ParquetFile
    monkeypatch.setattr(
        pq, "ParquetFile", lambda path, **k: opened.append(Path(path).parent.name) or parquet_file(path)
    )
    names = ("summary", "steps", "calibration")
    chosen = selected_frames(ResultStore(tmp_path), names, Selection.parse(compare="c1", where=["batch_size=2"]))
    assert set(chosen["summary"]["run_key"]) == {"r3", "r5"} and set(opened) == {"r3", "r5"}


def test_an_append_reads_no_other_run(tmp_path, monkeypatch):
    store = ResultStore(tmp_path)
    append(store, "a")
    monkeypatch.setattr(catalog_sync, "entry_damage", lambda folder: (_ for _ in ()).throw(AssertionError(folder)))
    append(store, "b")
    assert store.keys() == {"a", "b"}
