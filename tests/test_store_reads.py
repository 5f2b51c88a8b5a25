"""A frame of many runs read at once (store/frame_reads.py) is the frame pandas made run by run: the same rows in the
same order, the same columns and dtypes, whatever mix of schemas and store formats the runs hold; and a report over it
analyses the same tables."""

from __future__ import annotations

import json
import shutil
from dataclasses import fields
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from support.progress import RecordingProgress
from test_report import build_frames
from test_store_format import old_store

from fwbench_aggregator.analyse.results import Analysis, analysed, part_keys
from fwbench_aggregator.app import report as report_module
from fwbench_aggregator.app.report import store_report
from fwbench_aggregator.store import frame_reads
from fwbench_aggregator.store.migrations import migrated
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_aggregator.store.schema import CALIBRATION_COLUMNS

RUN = ["runner", "model", "mode", "batch_size", "device", "repetition"]  # one run of build_frames


def run_by_run(store: ResultStore, name: str) -> pd.DataFrame:
    """What ResultStore.load returned before it read runs at once: each run's frame read by pandas, migrated, and
    concatenated in key order."""
    frames = []
    for key in sorted(store.keys()):
        path = store.runs_dir / key / f"{name}.parquet"
        if path.exists():
            frame = pd.read_parquet(path)
            if not frame.empty:
                frames.append(migrated(name, frame, store.manifest(key)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def mixed_store(root: Path) -> ResultStore:
    """Runs of a report's test frames, one entry each, their keys interleaved with runs of store format 1 and with
    runs of other schemas: failed runs (a summary of a few columns), runs with an extra column, runs without steps,
    and a calibration."""
    old_store(root / "old", runs=3)
    (root / "runs").mkdir()
    for n, folder in enumerate(sorted((root / "old" / "runs").iterdir())):
        shutil.move(folder, root / "runs" / f"k{n * 11:03d}")
    store = ResultStore(root)
    summary, steps = build_frames(devices={"gpu:0": 1.0})
    for n, (_, run) in enumerate(summary.groupby(RUN, sort=False, dropna=False)):
        own = steps.merge(run[RUN], on=RUN)
        run = run.dropna(axis="columns", how="all") if run["status"].iloc[0] == "failed" else run
        frames = {"summary": run.assign(run_id=f"k{n:03d}")}
        if n % 7:  # a seventh of the runs kept no steps
            frames["steps"] = own.assign(run_id=f"k{n:03d}", **({"extra": 1.5} if n % 5 == 0 else {}))
        store.append(f"k{n:03d}", {"n": n}, frames, {})
    floor = {column: "" for column in CALIBRATION_COLUMNS} | summary.iloc[0][RUN].to_dict()
    calibration = pd.DataFrame([{**floor, "framework": "torch", "runs": 6, "noise_floor": 0.02, "repetition": 0}])
    store.append("calibration", {}, {"calibration": calibration}, {})
    return ResultStore(root)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> ResultStore:
    return mixed_store(tmp_path_factory.mktemp("mixed"))


@pytest.mark.parametrize("name", ["summary", "steps", "calibration"])
def test_a_frame_of_many_runs_is_the_frame_read_run_by_run(store, name, monkeypatch):
    monkeypatch.setattr(frame_reads, "_COMPACT_TABLES", 3)  # small tables made one several times on the way
    expected = run_by_run(store, name)
    pd.testing.assert_frame_equal(ResultStore(store.root).load(name), expected, check_exact=True)
    assert len(expected) and len(expected.columns) > 1


def test_a_selection_reads_its_runs_in_key_order_and_counts_them(store):
    keys = {"k005", "k000", "k011", "k031"}
    progress = RecordingProgress()
    summary = ResultStore(store.root).load("summary", keys, progress)
    assert list(summary["run_key"]) == sorted(keys) and progress.tasks == ["reading the store's summary"]
    assert ResultStore(store.root).load("power").empty


def test_the_report_analyses_the_tables_it_analysed_run_by_run(store, tmp_path, monkeypatch):
    monkeypatch.setattr(report_module, "write_report", lambda *_, **__: tmp_path)  # the analysis, not its pages
    progress = RecordingProgress()
    report = store_report(ResultStore(store.root), tmp_path / "report", progress=progress)
    assert {"reading the store's summary", "reading the store's steps"} < set(progress.tasks)
    frames = {name: run_by_run(store, name) for name in ("summary", "steps", "calibration")}
    expected = analysed(frames["summary"], frames["steps"], frames["calibration"], pd.DataFrame(), pd.DataFrame())
    assert len(report.analysis.rows) > 10
    for field in fields(Analysis):
        got, want = getattr(report.analysis, field.name), getattr(expected, field.name)
        if isinstance(want, pd.DataFrame):
            pd.testing.assert_frame_equal(got, want, check_exact=True)
        else:
            assert json.dumps(got, default=repr) == json.dumps(want, default=repr)


def test_the_report_reads_the_steps_one_part_of_the_analysis_at_a_time(store, tmp_path, monkeypatch):
    """A large store's steps never all in memory: each read is one part's runs (analyse.results.PART_COLUMNS)."""
    monkeypatch.setattr(report_module, "write_report", lambda *_, **__: tmp_path)
    reader = ResultStore(store.root)
    read, load = [], reader.load

    def recorded(name, keys=None, *rest):
        if name == "steps":
            read.append(keys)
        return load(name, keys, *rest)

    monkeypatch.setattr(reader, "load", recorded)
    progress = RecordingProgress()
    store_report(reader, tmp_path / "report", progress=progress)
    summary = run_by_run(store, "summary")
    part_of = dict(zip(summary["run_key"], part_keys(summary)))
    assert len(read) == len(set(part_of.values())) > 3
    assert all(keys is not None and len({part_of[key] for key in keys}) == 1 for keys in read)
    assert set().union(*read) == set(part_of)
    assert f"analysing {len(summary)} runs" in progress.tasks


def test_the_summaries_are_read_from_the_catalog_their_files_checked(store, monkeypatch):
    monkeypatch.setattr(pq, "ParquetFile", lambda *_, **__: pytest.fail("a summary file parsed"))
    monkeypatch.setattr(pd, "read_parquet", lambda *_, **__: pytest.fail("a summary file parsed"))
    reader = ResultStore(store.root)
    checked = []
    monkeypatch.setattr(reader, "damage", lambda key: checked.append(key) or [])
    assert set(reader.load("summary")["run_key"]) == set(checked) == reader.run_keys()
