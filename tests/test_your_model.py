"""A user's own model, through the commands docs/your-model.md gives, with real torch and TensorFlow runners: a
plug-in folder outside the project is compared (its verdict saying parity was not checked), checked with
`fwbench parity` (then compared as proven), swept and reported; a resume after the plug-in changed is refused,
and a plug-in whose runners build different networks is refused unless the user allows it."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from support.cli import fwbench, only_run_dir
from support.runners import EXAMPLE_MODELS

from fwbench_aggregator.store.results_store import ResultStore

# Every test here runs real framework runners.
pytestmark = pytest.mark.frameworks

SMALL = [
    "--mode",
    "infer",
    "--batch-size",
    "2",
    "--shape",
    "3x32x32",
    "--warmup",
    "1",
    "--steps",
    "3",
    "--min-measure-s",
    "0",
    "--repetitions",
    "3",
]
SWEEP = """\
models_dir: my_models
models: [tiny_cnn]
modes: [train]
shapes: [3x32x32]
batch_sizes: [2, 4]
warmup: 1
steps: 3
min_measure_s: 0
repetitions: 3
"""


@pytest.fixture
def my_models(tmp_path):
    """The example CNN, copied where a user keeps their own models: outside the project."""
    folder = tmp_path / "my_models"
    shutil.copytree(EXAMPLE_MODELS / "tiny_cnn", folder / "tiny_cnn")
    return folder


def test_a_plugin_is_compared_then_checked_for_parity_then_compared_as_proven(tmp_path, my_models):
    out, store = tmp_path / "results", tmp_path / "results" / "store"
    first = fwbench("compare", "--models-dir", str(my_models), "--model", "tiny_cnn", *SMALL, "--out", str(out))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "(parity not checked)" in first.stdout and "fwbench parity --models tiny_cnn" in first.stdout
    table = pd.read_csv(only_run_dir(out) / "comparison.csv")
    assert set(table["model_source"]) == {f"{my_models / 'tiny_cnn'} (--models-dir)"}
    assert table["model_hash"].str.startswith("sha256:").all() and set(table["parity"]) == {"parity not checked"}

    checked = fwbench(
        "parity",
        "--models-dir",
        str(my_models),
        "--models",
        "tiny_cnn",
        "--out",
        str(tmp_path / "p"),
        "--store",
        str(store),
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert set(ResultStore(store).load("parity")["verdict"]) == {"same"}

    second = fwbench("compare", "--models-dir", str(my_models), "--model", "tiny_cnn", *SMALL, "--out", str(out))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "parity not checked" not in second.stdout
    newest = max((p for p in out.iterdir() if p.is_dir() and p.name != "store"), key=lambda p: p.name)
    assert set(pd.read_csv(newest / "comparison.csv")["parity"]) == {"parity checked"}


def test_a_sweep_of_a_plugin_is_stored_and_reported_and_a_resume_after_it_changed_is_refused(tmp_path, my_models):
    sweep_file = tmp_path / "study.yaml"
    sweep_file.write_text(SWEEP)
    store = tmp_path / "store"
    done = fwbench("sweep", str(sweep_file), "--store", str(store), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = ResultStore(store).load("summary")
    assert (summary["status"] == "ok").all() and set(summary["model"]) == {"tiny_cnn"}
    assert summary["model_hash"].nunique() == 1 and summary["model_source"].str.contains("tiny_cnn").all()
    report = pd.read_csv(store / "report" / "comparison.csv")
    assert set(report["parity"]) == {"parity not checked"}
    assert "parity not checked" in (store / "report" / "report.html").read_text()

    # An edited plug-in is another model: its runs must not be pooled with the stored ones.
    with (my_models / "tiny_cnn" / "build_torch.py").open("a") as builder:
        builder.write("\n# edited\n")
    sweep_file.write_text(SWEEP.replace("batch_sizes: [2, 4]", "batch_sizes: [2, 4, 8]"))
    resumed = fwbench("sweep", str(sweep_file), "--store", str(store), "--resume", timeout=900)
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert "plug-in tiny_cnn changed since this store's runs of it" in resumed.stderr
    assert len(ResultStore(store).load("summary")) == len(summary)


def test_a_plugin_whose_runners_build_different_networks_is_refused_by_compare_and_sweep(tmp_path, my_models):
    # One more output unit in the Keras classifier, which the TensorFlow runner builds (build_tensorflow.py imports
    # build_keras.py) and torch does not: a different network with the same declaration.
    builder = my_models / "tiny_cnn" / "build_keras.py"
    edited = builder.read_text().replace("spec.head(options).outputs", "spec.head(options).outputs + 1", 1)
    assert edited != builder.read_text()
    builder.write_text(edited)
    args = ["compare", "--models-dir", str(my_models), "--model", "tiny_cnn", *SMALL, "--out", str(tmp_path / "r")]
    refused = fwbench(*args)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "different trainable parameter counts" in refused.stderr and "--allow-different-models" in refused.stderr
    assert not (tmp_path / "r").exists() or not any(p.name != "store" for p in (tmp_path / "r").iterdir())
    sweep_file = tmp_path / "study.yaml"
    sweep_file.write_text(SWEEP)
    swept = fwbench("sweep", str(sweep_file), "--store", str(tmp_path / "store"))
    assert swept.returncode == 2 and "different trainable parameter counts" in swept.stderr, swept.stdout + swept.stderr
    assert ResultStore(tmp_path / "store").load("summary").empty
