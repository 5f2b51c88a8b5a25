"""Scaling over devices (scaling_rows, strategy_pairs) and the report's strategy tables and scaling
plot, from synthetic summary frames as store.records writes them."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from fwbench_aggregator.analyse.comparison import comparison_rows
from fwbench_aggregator.analyse.results import analysed
from fwbench_aggregator.analyse.scaling import has_scaling, scaling_rows, strategy_pairs
from fwbench_aggregator.present.line_plots import scaling_plot
from fwbench_aggregator.present.report import scaling_tables, write_report
from fwbench_aggregator.present.terminal import print_scaling

CONFIG = dict(
    model="mlp", model_options="", mode="train", batch_size=8, input_shape="32", precision="fp32", device="cpu:0"
)


def _run(
    runner: str, strategy: str, world_size: int, throughput: float, repetition: int = 0, nodes: int = 1, **extra
) -> dict:
    median_s = 8 * world_size / throughput
    return {
        **CONFIG,
        "runner": runner,
        "framework": runner,
        "strategy": strategy,
        "world_size": world_size,
        "nodes": nodes,
        "global_batch_size": 8 * world_size,
        "repetition": repetition,
        "status": "ok",
        "median_step_time_s": median_s,
        "throughput_samples_per_s": throughput,
        "straggler_spread": 0.1 if world_size > 1 else None,
        **extra,
    }


def _summary(*runs: dict) -> pd.DataFrame:
    return pd.DataFrame(list(runs))


def test_world_size_separates_configurations_and_strategy_separates_rows():
    summary = _summary(
        _run("torch", "single", 1, 100.0),
        _run("torch", "ddp", 2, 180.0),
        _run("torch", "dp", 2, 120.0),
        _run("tensorflow", "mirrored", 2, 150.0),
    )
    rows = comparison_rows(summary, pd.DataFrame())
    two = rows[rows["world_size"] == 2]
    assert sorted(two["runner"]) == ["tensorflow mirrored", "torch ddp", "torch dp"]
    assert (rows[rows["world_size"] == 1]["runner"] == "torch").all(), "a one-device run is never pooled with two"
    # Throughput counts the job's samples: 8 per device on 2 devices.
    assert two.set_index("runner").loc["torch ddp", "throughput_samples_per_s"] == pytest.approx(180.0)
    assert two.set_index("runner").loc["torch ddp", "verdict"] == "fastest"

    pairs = strategy_pairs(rows, "ddp", "mirrored")
    assert len(pairs) == 1 and pairs.iloc[0]["runner_a"] == "torch ddp"
    assert pairs.iloc[0]["ratio_b_to_a"] == pytest.approx(150 / 180)
    assert strategy_pairs(rows, "dp", "ddp").iloc[0]["ratio_b_to_a"] == pytest.approx(180 / 120)


def test_scaling_efficiency_is_over_n_times_the_same_runners_one_device_run():
    summary = _summary(
        _run("torch", "single", 1, 100.0),
        _run("torch", "single", 1, 100.0 * 1.21, repetition=1),
        _run("torch", "ddp", 2, 176.0),
        _run("torch", "ddp", 2, 176.0 * 1.21, repetition=1),
        _run("tensorflow", "mirrored", 2, 150.0),
    )
    scaling = scaling_rows(summary).set_index("runner")
    assert scaling.loc["torch", "world_size"] == 1 and scaling.loc["torch", "scaling_efficiency"] == pytest.approx(1.0)
    ddp = scaling.loc["torch ddp"]
    # Geometric means over runs: 110 and 193.6 samples/s.
    assert ddp["runs"] == 2 and ddp["throughput_samples_per_s"] == pytest.approx(193.6)
    assert ddp["scaling_efficiency"] == pytest.approx(193.6 / (2 * 110.0))
    assert ddp["straggler_spread"] == pytest.approx(0.1)
    # No one-device TensorFlow run: no efficiency is made up, and the row says why.
    mirrored = scaling.loc["tensorflow mirrored"]
    assert (
        math.isnan(mirrored["scaling_efficiency"]) and "no one-device run of tensorflow" in mirrored["efficiency_note"]
    )
    assert has_scaling(scaling_rows(summary))
    assert not has_scaling(scaling_rows(_summary(_run("torch", "single", 1, 100.0))))


def test_a_world_size_one_run_of_the_strategy_is_the_baseline_where_no_single_run_exists():
    summary = _summary(
        _run("torch", "ddp", 1, 90.0), _run("torch", "ddp", 4, 300.0), _run("torch", "single", 1, 50.0, batch_size=16)
    )
    ddp = scaling_rows(summary)
    four = ddp[(ddp["runner"] == "torch ddp") & (ddp["world_size"] == 4) & (ddp["batch_size"] == 8)].iloc[0]
    # The single run is at another per-device batch: not this configuration's baseline.
    assert four["baseline_throughput_samples_per_s"] == pytest.approx(90.0)
    assert four["scaling_efficiency"] == pytest.approx(300.0 / (4 * 90.0))


def test_runs_stored_before_distributed_runs_read_as_one_device_single():
    old = pd.DataFrame(
        [
            {
                **CONFIG,
                "runner": "torch",
                "repetition": 0,
                "status": "ok",
                "median_step_time_s": 0.08,
                "throughput_samples_per_s": 100.0,
            }
        ]
    )
    rows = comparison_rows(old, pd.DataFrame())
    assert (
        rows.iloc[0]["runner"] == "torch" and rows.iloc[0]["world_size"] == 1 and rows.iloc[0]["strategy"] == "single"
    )
    assert rows.iloc[0]["throughput_samples_per_s"] == pytest.approx(100.0)


def test_the_report_holds_the_strategy_tables_and_the_scaling_plot(tmp_path):
    summary = _summary(
        _run("torch", "single", 1, 100.0),
        _run("torch", "ddp", 2, 180.0),
        _run("torch", "dp", 2, 120.0),
        _run("tensorflow", "single", 1, 90.0),
        _run("tensorflow", "mirrored", 2, 150.0),
    )
    path = write_report(analysed(summary, pd.DataFrame()), summary, None, tmp_path)
    page = path.read_text()
    for title in (
        "DataParallel vs DistributedDataParallel",
        "DistributedDataParallel vs MirroredStrategy",
        "Scaling efficiency against devices",
        "Throughput and scaling efficiency against devices",
    ):
        assert title in page
    assert (tmp_path / "plots" / "scaling.png").stat().st_size > 1000
    markdown = (tmp_path / "scaling.md").read_text()
    assert "| torch ddp |" in markdown and "90.0%" in markdown  # ddp: 180 / (2 x 100)
    assert "83.3%" in markdown  # mirrored: 150 / (2 x 90)
    assert "plots/scaling.png" in markdown


def test_the_scaling_plot_draws_each_runs_throughput_beside_its_line(tmp_path):
    summary = _summary(
        *(
            _run("torch", strategy, size, value, repetition=r)
            for strategy, size, values in (("single", 1, (98.0, 100.0, 102.0)), ("ddp", 2, (170.0, 180.0, 190.0)))
            for r, value in enumerate(values)
        )
    )
    analysis = analysed(summary, pd.DataFrame())
    plot = scaling_plot(analysis.scaling, tmp_path, runs=analysis.runs)
    drawn = pd.read_csv(plot.path.with_suffix(".csv"))
    runs = drawn[drawn["value_of"] == "one run"]
    # The ddp line's three runs at two devices and the three single runs its baseline pools, each a dot.
    assert sorted(runs["throughput_samples_per_s"].round(1)) == [98.0, 100.0, 102.0, 170.0, 180.0, 190.0]
    assert set(runs["line"]) == {"torch ddp"}


def test_no_scaling_plot_or_tables_without_a_second_world_size(tmp_path):
    scaling = scaling_rows(_summary(_run("torch", "single", 1, 100.0)))
    plot = scaling_plot(scaling, tmp_path)
    assert plot.path is None and "more than one number of devices" in plot.reason
    assert scaling_tables(comparison_rows(_summary(_run("torch", "single", 1, 100.0)), pd.DataFrame()), scaling) == []


def test_the_console_scaling_table_names_the_configuration_once(tmp_path):
    from rich.console import Console

    summary = _summary(_run("torch", "single", 1, 100.0), _run("torch", "ddp", 2, 180.0))
    console = Console(width=200, record=True)
    print_scaling(scaling_rows(summary), console)
    text = console.export_text()
    assert (
        "scaling: throughput against devices (mlp, train, batch 8 per device, 32, fp32, cpu:0, equal profile)" in text
    )
    assert "torch ddp" in text and "90.0%" in text and "note" not in text
