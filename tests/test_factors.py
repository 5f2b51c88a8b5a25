"""fwbench factors: each setting changed alone, per runner, against that runner's own baseline; the effect's
arithmetic, and what a runner refuses named with its reason."""

from __future__ import annotations

import pandas as pd
import pytest
from support.cli import fwbench, only_run_dir

from fwbench_aggregator.analyse import stats
from fwbench_aggregator.app.factors import FactorEffect


def effect(baseline_ms: list[float], variant_ms: list[float]) -> str:
    comparison = stats.compare("channels_last", baseline_ms, "channels_first", variant_ms)
    return FactorEffect("torch", "layout", "channels_last", "channels_first", comparison).effect


def test_an_effect_reads_as_the_variant_against_its_baseline_with_its_interval():
    slower = effect([100.0, 101.0, 99.0, 100.5, 99.5, 100.2], [128.0, 129.0, 127.0, 128.5, 127.5, 128.2])
    assert slower.startswith("1.28x slower [1.2") and slower.endswith("]")
    faster = effect([128.0, 129.0, 127.0, 128.5, 127.5, 128.2], [100.0, 101.0, 99.0, 100.5, 99.5, 100.2])
    assert faster.startswith("0.78x faster [0.7")
    unresolved = effect([100.0, 102.0, 98.0, 101.0, 99.0, 100.0], [101.0, 103.0, 99.0, 100.0, 102.0, 101.5])
    assert unresolved.startswith("not resolved: 1.01x slower [0.9") and "these runs resolve" in unresolved
    refused = FactorEffect(
        "tensorflow",
        "layout",
        "channels_last",
        "channels_first",
        not_supported="layout channels_first is not supported on cpu:0",
    )
    assert refused.effect == "not supported: layout channels_first is not supported on cpu:0"


@pytest.mark.slow
def test_factors_runs_what_each_runner_accepts_and_names_what_it_refuses(tmp_path, fake_runner):
    done = fwbench(
        "factors",
        "--model",
        "resnet18",
        "--batch-size",
        "2",
        "--shape",
        "3x32x32",
        "--warmup",
        "0",
        "--steps",
        "2",
        "--min-measure-s",
        "0",
        "--repetitions",
        "3",
        "--runner",
        f"fake={fake_runner}",
        "--out",
        str(tmp_path),
        columns=80,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "factors: resnet18 train, batch 2, fp32, one setting changed at a time" in done.stdout
    table = pd.read_csv(only_run_dir(tmp_path) / "factors.csv").set_index(["factor", "value"])
    # The fake runner takes both layouts, and one compilation and precision only.
    assert table.loc[("layout", "channels_first"), "baseline"] == "channels_last"
    assert pd.isna(table.loc[("layout", "channels_first"), "not_supported"])
    assert "not supported" in table.loc[("compilation", "xla"), "effect"]
    assert "not supported" in table.loc[("precision", "amp_bf16"), "effect"]
    # Threads: the fake runner fixes its count at start-up (as TensorFlow does); the refusal says how to change it.
    threads = table.xs("threads")
    assert len(threads) >= 1 and threads["not_supported"].str.contains("fixes at start-up").all()
    summary = pd.read_csv(only_run_dir(tmp_path) / "summary.csv")
    assert sorted(summary["runner"].unique()) == ["fake/baseline", "fake/layout=channels_first"]
    assert summary.groupby("runner").size().eq(3).all()
