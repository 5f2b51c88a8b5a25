"""The store's format: recorded with every run and in the store, older stores read through explicit migrations,
a store from a newer fwbench refused by name, and old refusal records set aside (never deleted) for a rerun; and
the columns every frame builder writes are the schema's."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from support.results import run_result

from fwbench_aggregator.analyse.comparison import comparison_rows
from fwbench_aggregator.run.client import RunnerFailure, RunResult
from fwbench_aggregator.store import records
from fwbench_aggregator.store.analysis_columns import COMPARISON_COLUMNS
from fwbench_aggregator.store.migrations import StoreFormatError
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_aggregator.store.run_columns import POWER_COLUMNS, STEPS_COLUMNS, SUMMARY_COLUMNS
from fwbench_aggregator.store.schema import STORE_FORMAT

OLD_SUMMARY = {  # a run as the first stores wrote it: no strategy, devices, nodes, world size or global batch
    "run_id": "old",
    "runner": "torch",
    "framework": "torch",
    "framework_version": "2.4.0",
    "model": "resnet18",
    "mode": "train",
    "batch_size": 8,
    "input_shape": "3x32x32",
    "precision": "fp32",
    "device": "cpu:0",
    "model_options": "",
    "repetition": 0,
    "status": "ok",
    "error": "",
    "median_step_time_s": 0.05,
}


def old_store(root, runs: int = 3, refusal: bool = False):
    """A store as a format-1 fwbench left it: runs without the distributed columns, no recorded format, and with
    `refusal`, a refused request recorded as a failed run."""
    for repetition in range(runs):
        folder = root / "runs" / f"{repetition:016x}"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"repetition": repetition}))
        (folder / "manifest.json").write_text(json.dumps({"run_id": "old"}))
        pd.DataFrame([{**OLD_SUMMARY, "repetition": repetition, "run_key": folder.name}]).to_parquet(
            folder / "summary.parquet"
        )
    if refusal:
        folder = root / "runs" / "ffffffffffffffff"
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "manifest.json").write_text(
            json.dumps({"status": "failed", "code": "NOT_FOUND", "message": "unknown model"})
        )
        pd.DataFrame(
            [
                {
                    "run_key": folder.name,
                    "runner": "torch",
                    "status": "failed",
                    "error": "NOT_FOUND: unknown model 'resnt18'",
                }
            ]
        ).to_parquet(folder / "summary.parquet")
    return ResultStore(root)


def test_every_run_and_the_store_record_the_format(tmp_path):
    store = ResultStore(tmp_path)
    store.append("k1", {"a": 1}, {"summary": pd.DataFrame([OLD_SUMMARY])}, {"run_id": "new"})
    assert store.manifest("k1")["store_format"] == STORE_FORMAT
    assert json.loads((tmp_path / "store.json").read_text()) == {"store_format": STORE_FORMAT}
    assert ResultStore(tmp_path).format() == STORE_FORMAT


def test_an_old_store_reads_in_the_current_format(tmp_path):
    store = old_store(tmp_path)
    assert store.format() == 1
    summary = store.load("summary")
    assert len(summary) == 3
    assert (
        (summary["strategy"] == "single").all() and (summary["world_size"] == 1).all() and (summary["nodes"] == 1).all()
    )
    assert (summary["devices"] == "cpu:0").all() and (summary["global_batch_size"] == 8).all()
    rows = comparison_rows(summary, pd.DataFrame())
    assert rows.iloc[0]["runs"] == 3 and rows.iloc[0]["world_size"] == 1
    # Before plug-ins and settings profiles: a built-in model under the equal profile.
    assert (summary["profile"] == "equal").all() and (summary["model_source"] == "built-in").all()
    assert (summary["model_hash"] == "").all() and rows.iloc[0]["profile"] == "equal"


def test_appending_to_an_old_store_keeps_its_runs_readable_and_records_the_newer_format(tmp_path):
    store = old_store(tmp_path)
    store.append("k1", {"a": 1}, {"summary": pd.DataFrame([{**OLD_SUMMARY, "strategy": "ddp", "world_size": 2}])}, {})
    assert store.format() == STORE_FORMAT
    summary = ResultStore(tmp_path).load("summary")
    assert sorted(summary["world_size"]) == [1, 1, 1, 2]


def test_a_store_from_a_newer_fwbench_is_refused_by_name(tmp_path):
    (tmp_path / "store.json").write_text(json.dumps({"store_format": STORE_FORMAT + 1}))
    with pytest.raises(
        StoreFormatError,
        match=rf"{tmp_path} was written by a newer fwbench \(store format "
        rf"{STORE_FORMAT + 1}\); this fwbench reads store formats up to {STORE_FORMAT}",
    ):
        ResultStore(tmp_path)


def test_a_run_from_a_newer_fwbench_is_left_out_by_name(tmp_path):
    store = ResultStore(tmp_path)
    for key in ("k1", "k2"):
        store.append(key, {"a": key}, {"summary": pd.DataFrame([OLD_SUMMARY])}, {})
    manifest = tmp_path / "runs" / "k1" / "manifest.json"
    manifest.write_text(json.dumps({"store_format": STORE_FORMAT + 1}))
    reopened = ResultStore(tmp_path)
    assert len(reopened.load("summary")) == 1 and reopened.keys() == {"k2"}  # checked when its data is read
    (left_out,) = reopened.damaged()
    assert left_out.path == manifest and f"newer fwbench (store format {STORE_FORMAT + 1})" in left_out.reason


def test_an_old_refusal_record_is_no_run_and_is_set_aside_for_a_rerun(tmp_path):
    store = old_store(tmp_path, runs=1, refusal=True)
    assert not store.has("ffffffffffffffff") and store.occupied("ffffffffffffffff")
    assert len(store.load("summary")) == 1 and store.run_keys() == {"0000000000000000"}
    aside = store.set_aside("ffffffffffffffff", "rerun by a resume")
    assert not store.occupied("ffffffffffffffff") and (aside / "summary.parquet").exists()
    assert (aside / "aside.txt").read_text() == "rerun by a resume\n" and aside.parent == tmp_path / "aside"
    store.append("ffffffffffffffff", {}, {"summary": pd.DataFrame([OLD_SUMMARY])}, {})
    assert store.has("ffffffffffffffff")


def test_an_out_of_memory_record_stays_a_run(tmp_path):
    store = ResultStore(tmp_path)
    store.append_failure("k1", {"runner": "torch"}, "RESOURCE_EXHAUSTED", "out of memory")
    assert store.has("k1") and store.run_keys() == {"k1"}


def result() -> RunResult:
    info = pb.DescribeResponse(framework="torch", framework_version="2.4.0")
    config = pb.ResolvedConfig(
        model="resnet18",
        mode=pb.MODE_TRAIN,
        batch_size=2,
        input_shape=[3, 32, 32],
        precision=pb.PRECISION_FP32,
        device=pb.Device(kind=pb.DEVICE_KIND_CPU),
    )
    steps = [pb.StepTiming(index=i, warmup=i == 0, step_time_s=0.01) for i in range(3)]
    power = [pb.PowerSample(time_s=0.0, phase="measure", power_w=10.0)]
    return run_result(info, config, pb.Summary(measured_steps=2), steps, power)


def test_every_frame_builder_writes_the_schema_columns():
    assert tuple(records.steps_frame("r", [result()]).columns) == STEPS_COLUMNS
    assert tuple(records.power_frame("r", [result()]).columns) == POWER_COLUMNS
    failure = RunnerFailure("tensorflow", "UNAVAILABLE", "gone")
    summary = records.summary_frame("r", [result()], [failure])
    assert tuple(summary.columns) == SUMMARY_COLUMNS and list(summary["status"]) == ["ok", "failed"]
    rows = comparison_rows(summary, records.steps_frame("r", [result()]))
    assert tuple(rows.columns) == COMPARISON_COLUMNS


def test_a_store_copied_elsewhere_keeps_its_format(tmp_path):
    store = old_store(tmp_path / "a")
    store.append("k1", {"a": 1}, {"summary": pd.DataFrame([OLD_SUMMARY])}, {})
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert (
        ResultStore(tmp_path / "b").format() == STORE_FORMAT and len(ResultStore(tmp_path / "b").load("summary")) == 4
    )
