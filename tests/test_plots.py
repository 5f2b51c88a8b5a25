"""Plots: the relative-time bars with their intervals and unresolved comparisons marked, each plot's data in a CSV
beside it, and the power timeline, from frames as the aggregator stores them."""

from __future__ import annotations

import pandas as pd
import pytest
from PIL import Image

from fwbench_aggregator.analyse.comparison import comparison_rows, per_run
from fwbench_aggregator.present.line_plots import power_timeline
from fwbench_aggregator.present.plot_kit import MISSING_COLOUR, RUNNER_COLOURS
from fwbench_aggregator.present.plots import make_plots

CONFIG = dict(
    model="resnet18",
    model_options="",
    mode="infer",
    input_shape="3x32x32",
    precision="fp32",
    device="cpu:0",
    world_size=1,
    nodes=1,
    profile="equal",
    serving="",
    device_name="a CPU",
)


def runs(batch_size: int, times_ms: dict[str, list[float]]) -> list[dict]:
    return [
        {
            **CONFIG,
            "batch_size": batch_size,
            "runner": runner,
            "run_id": f"{runner}-{batch_size}-{i}",
            "repetition": i,
            "status": "ok",
            "median_step_time_s": ms / 1e3,
        }
        for runner, values in times_ms.items()
        for i, ms in enumerate(values)
    ]


def test_relative_bars_draw_each_ratios_interval_and_mark_what_the_runs_did_not_resolve(tmp_path):
    summary = pd.DataFrame(
        runs(2, {"torch": [10.0, 10.1, 9.9], "tensorflow": [14.0, 14.1, 13.9]})  # 40% apart, tight: resolved
        + runs(4, {"torch": [10.0, 11.5, 9.0], "tensorflow": [10.5, 9.5, 12.0]})  # noisy: not resolved
    )
    rows = comparison_rows(summary, pd.DataFrame())
    (bars,) = [p for p in make_plots(rows, tmp_path) if p.key == "infer-cpu-relative"]
    drawn = pd.read_csv(bars.path.with_suffix(".csv")).set_index(["configuration", "runner"])
    resolved, noisy = drawn.loc[("resnet18 batch 2", "tensorflow")], drawn.loc[("resnet18 batch 4", "tensorflow")]
    assert resolved["ratio_ci_low"] < resolved["ratio_to_fastest"] < resolved["ratio_ci_high"]
    assert pd.isna(resolved["unresolved"])
    slower = rows[(rows["batch_size"] == 4) & (rows["verdict"] != "fastest")].iloc[0]
    assert 0.05 < slower["resolvable"] < 1.0 and not slower["significant"]
    assert noisy["unresolved"] == f"not resolved: resolves {slower['resolvable']:.0%}"
    assert drawn.loc[("resnet18 batch 2", "torch"), "ratio_to_fastest"] == 1.0
    with Image.open(bars.path) as image:
        colours = {image.getpixel((x, y))[:3] for x in range(0, image.width, 3) for y in range(0, image.height, 3)}
    assert {tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in RUNNER_COLOURS[:2]} <= colours
    assert MISSING_COLOUR not in RUNNER_COLOURS


def samples(runner: str, repetition: int) -> list[dict]:
    phases = ["idle"] * 10 + ["warmup"] * 5 + ["measure"] * 20 + ["after"] * 2
    return [
        {
            "runner": runner,
            "repetition": repetition,
            "model": "resnet18",
            "mode": "train",
            "batch_size": 32,
            "time_s": 100 + i * 0.05,
            "phase": phase,
            "power_w": 80.0 if phase == "idle" else 300.0,
            "power_source": "nvml_instant",
        }
        for i, phase in enumerate(phases)
    ]


def test_time_per_sample_draws_each_runs_value_beside_the_runners_line(tmp_path):
    summary = pd.DataFrame(runs(2, {"torch": [10.0, 10.5, 9.5]}) + runs(4, {"torch": [12.0, 12.5, 11.5]}))
    rows = comparison_rows(summary, pd.DataFrame())
    (line,) = [
        p for p in make_plots(rows, tmp_path, runs=per_run(summary, pd.DataFrame())) if p.key == "infer-time-per-sample"
    ]
    drawn = pd.read_csv(line.path.with_suffix(".csv"))
    one_run = drawn[drawn["value_of"] == "one run"].sort_values(["batch_size", "ms_per_sample"])
    assert one_run["ms_per_sample"].round(4).tolist() == [4.75, 5.0, 5.25, 2.875, 3.0, 3.125]
    means = drawn[drawn["value_of"] != "one run"].set_index("batch_size")["ms_per_sample"]
    assert means[2] == pytest.approx((10.0 * 10.5 * 9.5) ** (1 / 3) / 2)


def test_one_png_per_run_with_power_readings(tmp_path):
    frame = pd.DataFrame(samples("torch", 0) + samples("tensorflow", 0) + samples("tensorflow", 1))
    unreadable = pd.DataFrame(samples("fake", 0)).assign(power_w=None)
    written = power_timeline(pd.concat([frame, unreadable]), tmp_path)
    assert sorted(p.name for p in written) == ["power-tensorflow-1.png", "power-tensorflow-2.png", "power-torch-1.png"]
    with Image.open(written[0]) as image:
        assert image.width > 500 and image.height > 200
        colours = {image.getpixel((x, image.height // 2))[:3] for x in range(0, image.width, 5)}
        assert (0xCD, 0xE5, 0xC8) in colours  # the measured phase is shaded
