"""Forward FLOPs in the store: each model that ran is inspected once on its runner and kept as frame
model_facts; a failed inspection warns and loses nothing."""

from __future__ import annotations

import pandas as pd
import pytest
from support.cli import fwbench
from support.progress import RecordingProgress

from fwbench_aggregator.app.facts import record_model_facts
from fwbench_aggregator.run.client import RunnerClient
from fwbench_aggregator.run.connection import Transport
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_aggregator.store.schema import MODEL_FACTS_FRAME as FRAME

COLUMNS = [
    "run_key",
    "runner",
    "framework",
    "framework_version",
    "model",
    "model_options",
    "input_shape",
    "forward_flops",
    "parameter_count",
    "flops_method",
]


def summary_row(model: str, shape: str = "3x32x32", status: str = "ok", **columns) -> dict:
    return {
        "runner": "fake",
        "framework": "fake",
        "framework_version": columns.pop("version", "0"),
        "model": model,
        "model_options": "",
        "input_shape": shape,
        "status": status,
        **columns,
    }


@pytest.fixture
def fake_version(fake_runner):
    with RunnerClient("fake", fake_runner) as client:
        return client.describe().framework_version


def test_each_model_that_ran_is_inspected_once(tmp_path, fake_runner, fake_version):
    store = ResultStore(tmp_path / "store")
    summary = pd.DataFrame(
        [
            summary_row("resnet18", version=fake_version, batch_size=1),
            summary_row("resnet18", version=fake_version, batch_size=2),  # the same model: one fact
            summary_row("bert_base", "128", version=fake_version, model_options="head=mlm"),
            summary_row("vgg16", status="failed", version=fake_version),  # did not run: no fact
            summary_row("resnet50", version="another"),  # run by another version: not this runner's to count
            summary_row("resnet18", version=fake_version, runner="gone"),  # a runner not up any more
        ]
    )
    stored = record_model_facts({"fake": fake_runner}, Transport(), store, summary)
    facts = store.load(FRAME)
    assert len(stored) == 2 and list(facts.columns) == COLUMNS
    facts = facts.set_index("model")
    assert sorted(facts.index) == ["bert_base", "resnet18"]
    assert facts.loc["bert_base", "model_options"] == "head=mlm" and facts.loc["bert_base", "input_shape"] == "128"
    assert (facts["forward_flops"] > 0).all() and (facts["parameter_count"] > 0).all() and facts["flops_method"].all()
    # Known now: nothing is inspected again.
    assert record_model_facts({"fake": fake_runner}, Transport(), store, summary) == []
    assert len(store.load(FRAME)) == 2


def test_a_failed_inspection_warns_and_goes_on(tmp_path, fake_runner, fake_version):
    store = ResultStore(tmp_path / "store")
    summary = pd.DataFrame(
        [summary_row("resnet9000", version=fake_version), summary_row("resnet18", version=fake_version)]
    )
    progress = RecordingProgress()
    assert len(record_model_facts({"fake": fake_runner}, Transport(), store, summary, progress)) == 1
    (warning,) = progress.warnings()
    assert (
        warning.startswith("fake could not inspect resnet9000, so its FLOPs are not stored") and "NOT_FOUND" in warning
    )
    assert list(store.load(FRAME)["model"]) == ["resnet18"]


@pytest.mark.parametrize(
    "summary",
    [
        pd.DataFrame(),
        pd.DataFrame(
            [{"run_id": "r", "runner": "fake", "status": "failed", "error": "UNAVAILABLE: gone"}]
        ),  # only failures
    ],
)
def test_no_successful_runs_no_facts(tmp_path, fake_runner, summary):
    assert record_model_facts({"fake": fake_runner}, Transport(), ResultStore(tmp_path), summary) == []


SWEEP = """\
runners: [first]
models: [resnet18, bert_base]
modes: [infer]
batch_sizes: {batch_sizes}
warmup: 0
steps: 1
min_measure_s: 0
repetitions: 1
"""


@pytest.mark.slow
def test_a_sweep_stores_the_facts_of_its_models_and_a_resumed_one_does_not_inspect_again(tmp_path, fake_runner):
    path, store = tmp_path / "sweep.yaml", tmp_path / "store"
    args = ["sweep", str(path), "--store", str(store), "--runner", f"first={fake_runner}", "--no-report"]
    path.write_text(SWEEP.format(batch_sizes="[1]"))
    done = fwbench(*args)
    assert done.returncode == 0, done.stderr
    facts = ResultStore(store).load(FRAME)
    assert sorted(facts["model"]) == ["bert_base", "resnet18"] and (facts["forward_flops"] > 0).all()
    # The model's default shape and options, as the runs resolved them.
    assert set(zip(facts["model"], facts["input_shape"], facts["model_options"])) == {
        ("resnet18", "3x224x224", ""),
        ("bert_base", "128", "head=classification"),
    }
    path.write_text(SWEEP.format(batch_sizes="[1, 2]"))
    done = fwbench(*args, "--resume")
    assert done.returncode == 0, done.stderr
    assert "2 runs to do" in done.stderr and "forward FLOPs" not in done.stderr
    assert ResultStore(store).load(FRAME)["run_key"].tolist() == facts["run_key"].tolist()
