"""Three frameworks through the commands a user runs: a sweep file naming torch, TensorFlow and JAX starts the
three embedded runners itself, stores every run, and its report compares all three; `models` lists them."""

from __future__ import annotations

import pandas as pd
import pytest
from support.cli import fwbench

from fwbench_aggregator.store.results_store import ResultStore

# Every test here runs a real framework runner.
pytestmark = pytest.mark.frameworks

THREE = ("torch", "tensorflow", "jax")
SWEEP = f"""\
runners: [{", ".join(THREE)}]
models: [resnet18]
modes: [infer]
shapes: [3x32x32]
batch_sizes: [1, 2]
warmup: 1
steps: 3
min_measure_s: 0
repetitions: 3
"""


def test_a_sweep_of_three_frameworks_is_stored_and_reported(tmp_path):
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(SWEEP)
    store = tmp_path / "store"
    done = fwbench("sweep", str(sweep_file), "--store", str(store), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = ResultStore(store).load("summary")
    assert (summary["status"] == "ok").all(), summary[["runner", "error"]]
    # Three runs of each framework at each batch size, each with its own framework and version.
    assert summary.groupby(["framework", "batch_size"]).size().to_dict() == {
        (framework, batch): 3 for framework in THREE for batch in (1, 2)
    }
    assert summary.groupby("framework")["framework_version"].nunique().eq(1).all()
    comparison = pd.read_csv(store / "report" / "comparison.csv")
    for _, rows in comparison.groupby("batch_size"):
        assert set(rows["runner"]) == set(THREE)
        # One fastest; each of the others judged against it with a verdict the runs can carry.
        assert (rows["verdict"] == "fastest").sum() == 1 and rows["verdict"].notna().all()
    page = (store / "report" / "report.html").read_text()
    assert all(f"<td>{framework}</td>" in page for framework in THREE) and "data:image/png;base64," in page


def test_models_lists_what_each_of_three_frameworks_builds():
    done = fwbench("models", "--frameworks", ",".join(THREE))
    assert done.returncode == 0, done.stderr
    for framework in THREE:
        assert framework in done.stdout
    assert "bert_base" in done.stdout and "wav2vec2_base" in done.stdout
