"""fwbench export mlflow against a real local MLflow store, read back with MLflow's own client: each comparison one run
with its configuration, figures and verdicts, nested under a run holding the report; exporting again adds nothing, and
a comparison that gained runs is exported anew."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
from support.cli import fwbench_in_process

from fwbench_aggregator.app.errors import UsageError
from fwbench_aggregator.app.mlflow_export import COMPARISON_TAG, EXPORT_TAG, export_mlflow, tracking_uri_of
from fwbench_aggregator.store.results_store import ResultStore

mlflow = pytest.importorskip("mlflow", reason="MLflow is the aggregator's optional extra; the test environment has it")
pytestmark = pytest.mark.slow  # a new MLflow database runs its migrations: seconds

STEPS = 5


def add_runs(store: ResultStore, runner: str, mode: str, median_s: float, runs: int = 3, first: int = 0) -> None:
    """`runs` runs of resnet18 at batch 8 by `runner`, each its own run id, every step at about `median_s`."""
    for repetition in range(first, first + runs):
        run_id = f"{runner}-{mode}-{repetition}"
        identity = {
            "run_id": run_id,
            "runner": runner,
            "framework": runner,
            "framework_version": "1.0",
            "model": "resnet18",
            "mode": mode,
            "batch_size": 8,
            "input_shape": "3x32x32",
            "precision": "fp32",
            "device": "cpu:0",
            "repetition": repetition,
        }
        step_s = median_s * (1 + 0.003 * (repetition % 3 - 1))
        steps = pd.DataFrame(
            [{**identity, "step_index": i, "warmup": False, "step_time_s": step_s} for i in range(STEPS)]
        )
        summary = pd.DataFrame(
            [{**identity, "status": "ok", "error": "", "median_step_time_s": step_s, "measured_steps": STEPS}]
        )
        store.append(run_id, identity, {"steps": steps, "summary": summary}, {"host": "here"})


def client_of(folder: Path):
    uri, _ = tracking_uri_of(str(folder))
    return mlflow.MlflowClient(tracking_uri=uri)


def runs_of(folder: Path) -> list:
    client = client_of(folder)
    experiment = client.get_experiment_by_name("fwbench")
    return client.search_runs([experiment.experiment_id], max_results=1000)


def test_each_comparison_is_a_run_read_back_by_mlflow_and_exporting_again_adds_nothing(tmp_path):
    store = ResultStore(tmp_path / "store")
    for mode, tensorflow_s in (("train", 0.013), ("infer", 0.010)):
        add_runs(store, "torch", mode, 0.010)
        add_runs(store, "tensorflow", mode, tensorflow_s)
    target = tmp_path / "mlflow"

    exported = export_mlflow(tmp_path / "store", str(target))
    assert (exported.added, exported.skipped) == (2, 0)
    runs = runs_of(target)
    parent = next(r for r in runs if EXPORT_TAG in r.data.tags)
    children = {r.data.params["mode"]: r for r in runs if COMPARISON_TAG in r.data.tags}
    assert len(runs) == 3 and set(children) == {"train", "infer"}
    train = children["train"]
    assert train.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert {k: train.data.params[k] for k in ("model", "batch_size", "input_shape", "precision", "device")} == {
        "model": "resnet18",
        "batch_size": "8",
        "input_shape": "3x32x32",
        "precision": "fp32",
        "device": "cpu:0",
    }
    assert train.data.params["torch.framework_version"] == "1.0"
    metrics = train.data.metrics
    assert metrics["torch.median_step_ms"] == pytest.approx(10.0, rel=0.01)
    assert metrics["tensorflow.ratio_to_fastest"] == pytest.approx(1.3, rel=0.01)
    assert metrics["tensorflow.ratio_ci_low"] < 1.3 < metrics["tensorflow.ratio_ci_high"]
    assert metrics["tensorflow.runs"] == 3
    assert train.data.tags["fwbench.fastest"] == "torch"
    assert train.data.tags["fwbench.verdict.tensorflow"].startswith("torch faster by")
    infer = sorted(children["infer"].data.tags[f"fwbench.verdict.{r}"] for r in ("torch", "tensorflow"))
    assert infer[0] == "fastest" and infer[1].startswith("no significant difference")

    client = client_of(target)
    table = Path(client.download_artifacts(train.info.run_id, "comparison.csv", str(tmp_path / "down")))
    assert set(pd.read_csv(table)["runner"]) == {"torch", "tensorflow"}
    report = [a.path for a in client.list_artifacts(parent.info.run_id, "report")]
    assert "report/report.html" in report and "report/comparison.csv" in report

    again = export_mlflow(tmp_path / "store", str(target))
    assert (again.added, again.skipped, again.parent_run_id) == (0, 2, None)
    assert len(runs_of(target)) == 3

    # Training gains three runs: its comparison is a new one, exported under a new parent; inference is not.
    add_runs(ResultStore(tmp_path / "store"), "torch", "train", 0.010, first=3)
    more = export_mlflow(tmp_path / "store", str(target))
    assert (more.added, more.skipped) == (1, 1)
    trains = [r for r in runs_of(target) if r.data.params.get("mode") == "train"]
    assert sorted(r.data.metrics["torch.runs"] for r in trains) == [3, 6]


def test_a_file_for_a_tracking_store_is_refused_naming_the_option(tmp_path):
    store = ResultStore(tmp_path / "store")
    add_runs(store, "torch", "train", 0.010)
    (tmp_path / "file").write_text("not a folder")
    done = fwbench_in_process(
        "export", "mlflow", "--store", str(tmp_path / "store"), "--tracking-uri", str(tmp_path / "file")
    )
    said = " ".join(done.output.split())
    assert done.exit_code == 2 and "--tracking-uri" in said and "is a regular file, not a folder" in said


def test_without_mlflow_the_export_says_how_to_install_it(tmp_path, monkeypatch):
    store = ResultStore(tmp_path / "store")
    add_runs(store, "torch", "train", 0.010)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` now raises ImportError
    with pytest.raises(UsageError, match=r"MLflow is not installed.*fwbench-aggregator\[mlflow\]"):
        export_mlflow(tmp_path / "store", str(tmp_path / "mlflow"))
