"""A Keras runner through the command line, as a user compares one: two instances of one Keras runner (A/A),
compared in process blocks, call no difference, and neither is judged against a native runner that did not run."""

from __future__ import annotations

from contextlib import ExitStack

import pandas as pd
import pytest
from support.cli import SHORT_BLOCKS, SMALL_INFER, fwbench, only_run_dir

from fwbench_aggregator.run import launch

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]

# The Keras runner whose start-up and first build cost least on a 2-core VM (TensorFlow's graph, no XLA build).
RUNNER = "keras-tensorflow"


def test_an_a_a_comparison_of_two_instances_of_a_keras_runner_calls_no_difference(tmp_path):
    with ExitStack() as stack:
        addresses = {}
        for instance in ("a", "b"):
            command = launch.embedded_command(RUNNER, launch.default_venvs(), launch.StartupSettings(), "127.0.0.1:0")
            local = launch.LocalRunner(f"{RUNNER}-{instance}", command, log_path=tmp_path / f"{instance}.log")
            local.start()
            stack.callback(local.stop)
            addresses[local.name] = local.address
        done = fwbench(
            "compare",
            *(f"--runner={name}={address}" for name, address in addresses.items()),
            *SMALL_INFER,
            *SHORT_BLOCKS,
            "--repetitions",
            "4",
            "--out",
            str(tmp_path / "out"),
        )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = pd.read_csv(only_run_dir(tmp_path / "out") / "comparison.csv")
    assert (rows["blocks"] == 4).all() and not rows["significant"].any(), rows.to_dict("records")
    summary = pd.read_parquet(only_run_dir(tmp_path / "out") / "summary.parquet")
    assert set(summary["framework"]) == {RUNNER} and summary["runner_options"].str.contains("keras_backend").all()
    # Judged against the framework it runs on only where that runner ran in the same block: here none did.
    assert rows["native_runner"].isna().all() and rows["native_verdict"].isna().all(), rows.to_dict("records")
