"""fwbench max-batch stores each runner's search as frame max_batch, in the summary frame's terms, so it joins
with the runs of the same configuration; a repeated search adds a row."""

from __future__ import annotations

import pandas as pd
import pytest
from support.cli import fwbench

from fwbench_aggregator.store.results_store import ResultStore

# Every test here runs the command line, runners or generated requests end to end: seconds each.
pytestmark = pytest.mark.slow

# The columns a max_batch row shares with a summary row of the same configuration.
JOIN = ["model", "model_options", "mode", "input_shape", "precision", "device", "runner"]
COLUMNS = [
    *JOIN,
    "framework",
    "framework_version",
    "largest_batch",
    "limit",
    "capped",
    "batches_tried",
    "searched_at_unix_s",
]


@pytest.mark.frameworks
def test_both_real_runners_store_their_largest_batch(tmp_path):
    store = tmp_path / "store"
    done = fwbench(
        "max-batch",
        "--model",
        "mobilenet_v2",
        "--mode",
        "infer",
        "--shape",
        "3x32x32",
        "--limit",
        "4",
        "--store",
        str(store),
    )
    assert done.returncode == 0, done.stderr
    rows = ResultStore(store).load("max_batch")
    assert list(rows.columns) == ["run_key", *COLUMNS]
    rows = rows.set_index("framework")
    assert set(rows.index) == {"torch", "tensorflow"}
    for framework, row in rows.iterrows():
        assert row["runner"] == framework and row["framework_version"]
        assert (
            row["model"],
            row["model_options"],
            row["mode"],
            row["input_shape"],
            row["precision"],
            row["device"],
        ) == ("mobilenet_v2", "", "infer", "3x32x32", "fp32", "cpu:0")
        # The limit fits on a CPU: the search stopped there, so the real limit is unknown.
        assert row["largest_batch"] == row["limit"] == 4 and row["capped"]
        assert row["batches_tried"] == "1, 2, 4" and row["searched_at_unix_s"] > 0


def test_defaults_resolved_as_a_run_resolves_them_so_the_row_joins_its_runs(tmp_path, fake_runner):
    store = tmp_path / "store"
    search = (
        "max-batch",
        "--model",
        "bert_base",
        "--mode",
        "infer",
        "--limit",
        "4",
        "--runner",
        f"fake={fake_runner}",
        "--store",
        str(store),
    )
    for _ in range(2):
        done = fwbench(*search)
        assert done.returncode == 0, done.stderr
    searches = ResultStore(store).load("max_batch")
    assert len(searches) == 2 and searches["run_key"].nunique() == 2  # repeated: a new row, not a refusal
    assert (searches["input_shape"] == "128").all() and (searches["model_options"] == "head=classification").all()
    done = fwbench(
        "compare",
        "--model",
        "bert_base",
        "--mode",
        "infer",
        "--batch-size",
        "1",
        "--warmup",
        "0",
        "--steps",
        "1",
        "--min-measure-s",
        "0",
        "--repetitions",
        "1",
        "--power-rate-hz",
        "0",
        "--runner",
        f"fake={fake_runner}",
        "--out",
        str(tmp_path),
        "--store",
        str(store),
    )
    assert done.returncode == 0, done.stderr
    summary = ResultStore(store).load("summary")
    joined = summary.merge(searches, on=JOIN)
    assert len(joined) == 2 and (joined["largest_batch"] == 4).all()
    assert pd.api.types.is_bool_dtype(searches["capped"]) and pd.api.types.is_integer_dtype(searches["largest_batch"])
