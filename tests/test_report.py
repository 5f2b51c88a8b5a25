"""The comparison report from stored frames alone: rows, verdicts, plots with marked OOM points, a
self-contained HTML file, and that file rendered by a real browser (headless Chromium)."""

from __future__ import annotations

import base64
import io
import os
import shutil
import subprocess
import warnings
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from rich.console import Console

from fwbench_aggregator.analyse.comparison import comparison_rows, flag_summary
from fwbench_aggregator.analyse.results import analysed
from fwbench_aggregator.analyse.versions import VersionTables, version_changes, version_points, version_runs
from fwbench_aggregator.present import plot_kit
from fwbench_aggregator.present import plots as plotting
from fwbench_aggregator.present.display import display_frame
from fwbench_aggregator.present.report import write_report
from fwbench_aggregator.present.terminal import print_series
from fwbench_aggregator.store.analysis_columns import COMPARISON_COLUMNS
from fwbench_aggregator.store.comparability_columns import FLOOR_KEY_COLUMNS
from fwbench_aggregator.store.run_columns import CONFIG_COLUMNS

RUNNERS = ("torch", "tensorflow")
MODELS = {"resnet18": 0.020, "bert": 0.030}  # per-sample step time on GPU, seconds
BATCHES = (1, 2, 4)
DEVICES = {"gpu:0": 1.0, "cpu:0": 8.0}  # CPU steps take this much longer
MEASURED, WARMUP, REPETITIONS = 30, 3, 3
OOM = ("tensorflow", "bert", "train", 4, "gpu:0")
OOM_ERROR = "RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[4,12,128,128]"
CONFIGS = len(MODELS) * 2 * len(BATCHES) * len(DEVICES)


def write(summary, steps, manifest, out, **analysis):
    """The report of these frames: analysed once, then written."""
    return write_report(analysed(summary, steps, **analysis), summary, manifest, out)


def slowdown(runner: str, model: str) -> float:
    """tensorflow is 30% slower on resnet18; on bert both are the same."""
    return 1.3 if runner == "tensorflow" and model == "resnet18" else 1.0


def build_frames(devices=DEVICES, oom=OOM, power=True):
    rng = np.random.default_rng(7)
    summary, steps = [], []
    for runner in RUNNERS:
        for model, per_sample in MODELS.items():
            for mode in ("train", "infer"):
                for batch in BATCHES:
                    for device, device_factor in devices.items():
                        config = {
                            "runner": runner,
                            "framework": runner,
                            "framework_version": "9.9",
                            "model": model,
                            "model_options": "",
                            "mode": mode,
                            "batch_size": batch,
                            "input_shape": "3x224x224",
                            "precision": "fp32",
                            "device": device,
                        }
                        for repetition in range(REPETITIONS):
                            if (runner, model, mode, batch, device) == oom:
                                summary.append(
                                    {**config, "repetition": repetition, "status": "failed", "error": OOM_ERROR}
                                )
                                continue
                            median = (
                                per_sample
                                * (batch**0.6)
                                * device_factor
                                * slowdown(runner, model)
                                * (3 if mode == "train" else 1)
                            )
                            times = median * rng.lognormal(0.0, 0.02, MEASURED)
                            warm = median * np.array([20.0, 3.0, 1.5])  # slow warm-up steps: must not count
                            steps += [
                                {**config, "repetition": repetition, "warmup": True, "step_time_s": t} for t in warm
                            ]
                            steps += [
                                {**config, "repetition": repetition, "warmup": False, "step_time_s": t} for t in times
                            ]
                            gpu = device.startswith("gpu") and power
                            summary.append(
                                {
                                    **config,
                                    "repetition": repetition,
                                    "status": "ok",
                                    "error": "",
                                    "median_step_time_s": float(np.median(times)),
                                    "throughput_samples_per_s": batch / float(np.median(times)),
                                    "mean_power_w": 150.0 + 20 * batch if gpu else np.nan,
                                    "energy_per_sample_j": (150.0 + 20 * batch) * float(np.median(times)) / batch
                                    if gpu
                                    else np.nan,
                                    "energy_status": "ok" if gpu else "unavailable: no power reading on this device",
                                    "python_version": "3.12.1",
                                    "runner_version": "0.1.0",
                                }
                            )
    return pd.DataFrame(summary), pd.DataFrame(steps)


@pytest.fixture(scope="module")
def frames():
    return build_frames()


@pytest.fixture(scope="module")
def rows(frames):
    return comparison_rows(*frames)


@pytest.fixture(scope="module")
def built(frames, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    manifest = {"run_id": "r1", "runners": {"torch": {"describe": {"framework_version": "9.9"}}}}
    return write(*frames, manifest, out)


# Every section report.html can hold, each with its heading (an h2 the contents list links to).
SECTIONS = (
    "The answer",
    "Findings",
    "Plots",
    "Optimal batch size",
    "Batch size and time per sample",
    "Serving",
    "Strategies and scaling",
    "Framework versions side by side",
    "Parity",
    "Comparison",
    "Failed runs",
    "Runners and manifest",
)


def whole_frames(frames) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The report's frames with what the other sections need: torch's resnet18 runs again on an older version (9.8,
    5% faster), its and tensorflow's inference at batch 1 again under a server scenario, both runners' resnet18
    training at batch 2 on two devices too, and a parity check."""
    summary, steps = frames
    summary, steps = summary.assign(world_size=1, strategy="single"), steps.assign(world_size=1, strategy="single")
    older = (summary["runner"] == "torch") & (summary["model"] == "resnet18")
    older_steps = (steps["runner"] == "torch") & (steps["model"] == "resnet18")
    served = (summary["model"] == "resnet18") & (summary["mode"] == "infer") & (summary["batch_size"] == 1)
    two = (
        (summary["model"] == "resnet18")
        & (summary["mode"] == "train")
        & (summary["batch_size"] == 2)
        & (summary["device"] == "gpu:0")
    )
    two_steps = (
        (steps["model"] == "resnet18")
        & (steps["mode"] == "train")
        & (steps["batch_size"] == 2)
        & (steps["device"] == "gpu:0")
    )
    latency_s = summary.loc[served, "median_step_time_s"]
    serving = summary[served].assign(
        serving="server 10 qps",
        scenario="server",
        target_qps=10.0,
        query_count=400,
        duration_s=40.0,
        achieved_qps=10.0,
        batch_timeout_ms=0.0,
        p50_latency_s=latency_s,
        p90_latency_s=latency_s * 1.2,
        p99_latency_s=latency_s * 1.5,
        mean_latency_s=latency_s * 1.05,
        mean_batch_queries=1.0,
        serving_unavailable="",
    )
    summary = pd.concat(
        [
            summary,
            summary[older].assign(framework_version="9.8", median_step_time_s=lambda f: f["median_step_time_s"] * 0.95),
            serving,
            summary[two].assign(world_size=2, strategy="ddp"),
        ],
        ignore_index=True,
    )
    steps = pd.concat(
        [
            steps,
            steps[older_steps].assign(framework_version="9.8", step_time_s=lambda f: f["step_time_s"] * 0.95),
            steps[two_steps].assign(world_size=2, strategy="ddp"),
        ],
        ignore_index=True,
    )
    parity = pd.DataFrame(
        [
            {
                "model": "my_net",
                "variant": "",
                "model_hash": "ab12cd34ef56",
                "reference_runner": "torch",
                "runner": "tensorflow",
                "verdict": "same",
                "numeric": "match",
                "checked_at_unix_s": 1.7e9,
            }
        ]
    )
    return summary, steps, parity


@pytest.fixture(scope="module")
def whole(frames, tmp_path_factory):
    """report.html with every section."""
    summary, steps, parity = whole_frames(frames)
    points = version_points(version_runs(summary, steps))
    versions = VersionTables(version_changes(summary, steps), points)
    out = tmp_path_factory.mktemp("whole-report")
    return write_report(
        analysed(summary, steps, parity=parity), summary, {"run_id": "r1"}, out, versions=versions, parity=parity
    )


def pick(rows, runner, model, mode, batch, device):
    found = rows[
        (rows.runner == runner)
        & (rows.model == model)
        & (rows["mode"] == mode)
        & (rows.batch_size == batch)
        & (rows.device == device)
    ]
    assert len(found) == 1, found
    return found.iloc[0]


# ------------------------------------------------------------------------------------------- the rows


def test_one_row_per_configuration_and_runner(rows):
    assert len(rows) == CONFIGS * len(RUNNERS)
    assert not rows.duplicated(list(CONFIG_COLUMNS) + ["runner"]).any()
    assert set(COMPARISON_COLUMNS) <= set(rows.columns)


def test_figures_are_per_run_first_then_over_runs_without_warmup(frames, rows):
    _, steps = frames
    own = steps[
        (steps.runner == "torch")
        & (steps.model == "resnet18")
        & (steps["mode"] == "infer")
        & (steps.batch_size == 2)
        & (steps.device == "gpu:0")
    ]
    row = pick(rows, "torch", "resnet18", "infer", 2, "gpu:0")
    measured = own[~own.warmup]
    run_medians = measured.groupby("repetition")["step_time_s"].median()
    typical_s = float(np.exp(np.log(run_medians).mean()))
    assert row.steps == MEASURED * REPETITIONS == len(measured)
    assert row.median_step_ms == pytest.approx(typical_s * 1e3)
    assert row.ms_per_sample == pytest.approx(typical_s * 1e3 / 2)
    assert row.throughput_samples_per_s == pytest.approx(2 / typical_s)
    assert row.p95_step_ms == pytest.approx(np.percentile(measured["step_time_s"], 95) * 1e3)
    assert row.run_spread == pytest.approx(np.log(run_medians).std(ddof=1))
    assert row.runs == REPETITIONS and row.failed_runs == 0


def test_a_difference_below_the_calibrated_noise_floor_is_not_called(frames):
    config = {
        "model": "resnet18",
        "model_options": "",
        "mode": "train",
        "batch_size": 2,
        "input_shape": "3x224x224",
        "precision": "fp32",
        "device": "gpu:0",
    }
    summary = frames[0]

    def key_of(framework: str) -> dict:
        """The calibrated runs' comparability key: those of the compared runs, as `fwbench calibrate` records it."""
        runs = summary[(summary["framework"] == framework) & (summary["batch_size"] == 2)]
        return {c: runs[c].iloc[0] for c in FLOOR_KEY_COLUMNS if c in runs}

    calibration = pd.DataFrame(
        [
            {**config, **key_of("tensorflow"), "framework": "tensorflow", "noise_floor": 0.40},
            {**config, **key_of("torch"), "framework": "torch", "noise_floor": 0.10},
        ]
    )
    rows = comparison_rows(*frames, calibration=calibration)
    slow = pick(rows, "tensorflow", "resnet18", "train", 2, "gpu:0")
    # The larger of the two runners' floors counts: 30% is inside tensorflow's 40%.
    assert slow.noise_floor == 0.40 and "below the noise floor, 40.0%" in slow.verdict
    elsewhere = pick(rows, "tensorflow", "resnet18", "train", 4, "gpu:0")
    assert np.isnan(elsewhere.noise_floor) and elsewhere.verdict.startswith("torch faster by")
    # A floor calibrated on another device model, or from before calibrations recorded their key, does not apply.
    for other in ({"device_name": "another GPU"}, {c: "" for c in FLOOR_KEY_COLUMNS}):
        moved = calibration.assign(**other)
        row = pick(comparison_rows(*frames, calibration=moved), "tensorflow", "resnet18", "train", 2, "gpu:0")
        assert np.isnan(row.noise_floor) and row.noise_floor_source == "none"


@pytest.mark.slow  # writes a whole report, plots included
def test_a_run_on_a_busy_device_flags_its_verdict_in_every_table(frames, tmp_path):
    summary, steps = frames
    summary = summary.copy()
    busy = (summary.runner == "tensorflow") & (summary.model == "resnet18") & (summary.batch_size == 1)
    summary["device_flags"] = ""
    summary.loc[busy & (summary.repetition == 1), "device_flags"] = "another process used the device"
    rows = comparison_rows(summary, steps)
    row = pick(rows, "tensorflow", "resnet18", "infer", 1, "gpu:0")
    # Each kind of flag once, with how many of the row's runs it concerns.
    assert row.flagged == "another process used the device in 1 of 3 runs"
    assert pick(rows, "tensorflow", "resnet18", "infer", 2, "gpu:0").flagged == ""
    shown = display_frame(rows)
    assert shown["verdict"].str.contains(r"\[FLAGGED: another process used the device in 1 of 3 runs\]").sum() == 4
    write(summary, steps, None, tmp_path)
    assert "[FLAGGED: another process used the device in 1 of 3 runs]" in (tmp_path / "comparison.md").read_text()
    assert "FLAGGED: another process used the device" in (tmp_path / "report.html").read_text()


def test_too_few_runs_say_so_instead_of_a_verdict(frames):
    summary, steps = frames
    rows = comparison_rows(summary[summary.repetition < 2], steps[steps.repetition < 2])
    slow = pick(rows, "tensorflow", "resnet18", "train", 2, "gpu:0")
    assert slow.verdict.startswith("too few repetitions to call (ratio 1.") and "2 and 2 runs, need 3" in slow.verdict


def test_real_difference_gets_a_verdict_and_equals_do_not(rows):
    for mode in ("train", "infer"):
        for batch in BATCHES:
            for device in DEVICES:
                fast, slow = (
                    pick(rows, "torch", "resnet18", mode, batch, device),
                    pick(rows, "tensorflow", "resnet18", mode, batch, device),
                )
                assert fast.verdict == "fastest" and fast.ratio_to_fastest == 1.0
                assert slow.verdict.startswith("torch faster by"), slow.verdict
                assert slow.ratio_to_fastest == pytest.approx(1.3, rel=0.03)
                assert slow.ratio_ci_low > 1.2
                same = rows[
                    (rows.model == "bert")
                    & (rows["mode"] == mode)
                    & (rows.batch_size == batch)
                    & (rows.device == device)
                ]
                if (mode, batch, device) == OOM[2:]:
                    continue
                assert sorted(same.verdict.str.split(" ").str[0]) == ["fastest", "no"], same.verdict.tolist()
                assert same.ratio_to_fastest.max() < 1.05


def test_out_of_memory_row(rows):
    oom = pick(rows, *OOM)
    assert oom.status == "failed" and oom.verdict == "out of memory"
    assert oom.failed_runs == REPETITIONS and oom.runs == 0 and oom.steps == 0
    assert np.isnan(oom.median_step_ms) and np.isnan(oom.ratio_to_fastest)
    assert "RESOURCE_EXHAUSTED" in oom.error
    other = pick(rows, "torch", *OOM[1:])
    assert other.verdict == "fastest" and other.ratio_to_fastest == 1.0


def test_other_failures_and_energy(rows):
    summary, steps = build_frames()
    summary.loc[
        (summary.runner == "torch") & (summary.model == "bert") & (summary.batch_size == 1), ["status", "error"]
    ] = ["failed", "INTERNAL: segfault in kernel"]
    steps = steps[~((steps.runner == "torch") & (steps.model == "bert") & (steps.batch_size == 1))]
    changed = comparison_rows(summary, steps)
    row = pick(changed, "torch", "bert", "infer", 1, "cpu:0")
    assert row.verdict == "failed: INTERNAL: segfault in kernel"
    assert pick(changed, "tensorflow", "bert", "infer", 1, "cpu:0").verdict == "fastest"
    # Energy where the GPU was read, NaN (not zero) on the CPU.
    assert pick(rows, "torch", "bert", "infer", 4, "gpu:0").energy_per_sample_j > 0
    assert np.isnan(pick(rows, "torch", "bert", "infer", 4, "cpu:0").energy_per_sample_j)


def test_failure_without_configuration_is_kept(frames):
    summary, steps = frames
    bare = pd.DataFrame([{"runner": "jax", "status": "failed", "error": "UNAVAILABLE: connection refused"}])
    rows = comparison_rows(pd.concat([summary, bare], ignore_index=True), steps)
    jax = rows[rows.runner == "jax"]
    assert len(jax) == 1 and jax.iloc[0].verdict.startswith("failed: UNAVAILABLE")


# ------------------------------------------------------------------------------------- table outputs


@pytest.mark.slow  # writes a whole report, plots included
def test_table_files_and_terminal(rows, built):
    out = built.parent
    csv = pd.read_csv(out / "comparison.csv")
    assert len(csv) == len(rows) and "verdict" in csv
    markdown = (out / "comparison.md").read_text().splitlines()
    assert markdown[0].startswith("| model |") and set(markdown[1]) <= set("|-")
    assert len(markdown) == 2 + len(rows)
    assert all(line.count(" | ") == markdown[0].count(" | ") for line in markdown[2:])
    assert "out of memory" in (out / "comparison.html").read_text()
    console = Console(record=True, width=250)
    print_series(rows, console=console)
    text = console.export_text()
    assert "out of memory" in text and "torch faster by" in text


# ------------------------------------------------------------------------------------------------ plots

MISSING_RGB = tuple(int(plot_kit.MISSING_COLOUR[i : i + 2], 16) for i in (1, 3, 5))


def red_pixels(path: Path) -> int:
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=int)
    return int((np.abs(pixels - MISSING_RGB).sum(axis=2) < 40).sum())


@pytest.mark.slow  # writes a whole report, plots included
def test_each_question_has_its_plot_and_oom_is_marked(rows, tmp_path):
    plots = {p.key: p for p in plotting.make_plots(rows, tmp_path)}
    assert list(plots) == [key for key, _ in plotting.PLOT_QUESTIONS]
    for plot in plots.values():
        assert plot.path is not None and plot.path.is_file(), plot.reason
        with Image.open(plot.path) as image:
            assert image.width >= 400 and image.height >= 300
    # The OOM is a training run on the GPU: marked in the training and power plots, as "OOM".
    for key in ("train-relative", "power-vs-batch"):
        assert [(m.runner, m.label) for m in plots[key].missing] == [("tensorflow", "OOM")], key
        assert red_pixels(plots[key].path) > 30, f"{key}: no missing marker drawn"
    assert (
        "bert" in plots["train-relative"].missing[0].config and "batch 4" in plots["train-relative"].missing[0].config
    )
    for key in ("infer-gpu-relative", "infer-cpu-relative", "infer-time-per-sample"):
        assert plots[key].missing == [] and red_pixels(plots[key].path) == 0, key


@pytest.mark.slow  # writes a whole report, plots included
def test_inference_oom_marked_against_batch_size(tmp_path):
    rows = comparison_rows(*build_frames(oom=("torch", "resnet18", "infer", 4, "cpu:0")))
    plots = {p.key: p for p in plotting.make_plots(rows, tmp_path)}
    for key in ("infer-cpu-relative", "infer-time-per-sample"):
        assert [(m.runner, m.label) for m in plots[key].missing] == [("torch", "OOM")], key
        assert red_pixels(plots[key].path) > 30, key
    assert plots["infer-gpu-relative"].missing == []


@pytest.mark.slow  # writes a whole report, plots included
def test_plot_without_data_is_skipped_and_the_page_says_what_would_measure_it(tmp_path):
    summary, steps = build_frames(devices={"cpu:0": 8.0}, oom=None, power=False)
    path = write(summary, steps, None, tmp_path)
    plots = {p.key: p for p in plotting.make_plots(comparison_rows(summary, steps), tmp_path / "again")}
    assert plots["infer-gpu-relative"].path is None
    assert plots["infer-gpu-relative"].reason == "no GPU inference runs in these results"
    assert plots["power-vs-batch"].path is None and "no power readings" in plots["power-vs-batch"].reason
    text = path.read_text()
    # The page lists no plot it did not draw: it says once what these runs do not cover.
    assert "no GPU inference runs in these results" not in text and "Plots not drawn" not in text
    assert "These runs do not cover: GPU inference (<code>fwbench compare --mode infer --device gpu</code>" in text
    assert "Power and energy (runs on a GPU with power telemetry" in text
    assert not (tmp_path / "plots" / "infer-gpu-relative.png").exists()


def test_lines_against_batch_size_need_two_batch_sizes(frames, tmp_path):
    summary, steps = frames
    one = (summary[summary["batch_size"] == 2], steps[steps["batch_size"] == 2])
    plots = {p.key: p for p in plotting.make_plots(comparison_rows(*one), tmp_path)}
    for key in ("infer-time-per-sample", "power-vs-batch"):
        assert plots[key].path is None and plots[key].reason == plotting.ONE_BATCH
    assert plots["train-relative"].path is not None  # the bars still show each runner at that batch
    both = (summary[summary["batch_size"].isin([1, 2])], steps[steps["batch_size"].isin([1, 2])])
    plots = {p.key: p for p in plotting.make_plots(comparison_rows(*both), tmp_path / "two")}
    assert plots["infer-time-per-sample"].path is not None and plots["power-vs-batch"].path is not None


# ------------------------------------------------------------------------------------------ the report


class Elements(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def elements_of(text: str) -> list[tuple[str, dict]]:
    parser = Elements()
    parser.feed(text)
    return parser.tags


def parsed(path: Path) -> list[tuple[str, dict]]:
    return elements_of(path.read_text(encoding="utf-8"))


@pytest.mark.slow  # writes a whole report, plots included
def test_findings_open_the_report_and_the_study_tables_follow_the_plots(built):
    page = built.read_text()
    assert page.index(">Findings</h2>") < page.index(">Plots</h2>") < page.index(">Optimal batch size</h2>")
    # torch is 30% faster on resnet18 everywhere and equal on bert: the findings count that, over runs.
    assert "<b>Training time.</b> torch was faster in 6 of 11 configurations (by 29% to 31%)" in page
    # A question these runs do not answer is not a finding: one line says what would measure it.
    assert "<b>Scaling over devices.</b>" not in page
    assert "These runs do not cover: " in page and "Scaling over devices (<code>fwbench compare --devices" in page
    assert ">Batch size and time per sample</h2>" in page
    # No runner counted its FLOPs here: the efficiency table would say only that, so it is left out.
    assert ">Hardware efficiency</h2>" not in page
    folder = built.parent
    assert (folder / "findings.md").read_text().startswith("# Findings\n\n- Training time: torch was faster")
    optimal = pd.read_csv(folder / "optimal_batch.csv")
    # tensorflow's bert training ran out of memory at batch 4: its optimum is the largest batch that fits.
    bert = optimal[
        (optimal.runner == "tensorflow")
        & (optimal.model == "bert")
        & (optimal["mode"] == "train")
        & (optimal.device == "gpu:0")
    ].iloc[0]
    assert bert.best_batch == 2 and bert.fit_note == "out of memory from batch 4; best at the largest batch that fits"
    trend = pd.read_csv(folder / "batch_trend.csv")
    assert set(trend.loc[trend["batches"] == "1, 2, 4", "trend"]) == {"falls"}
    efficiency = pd.read_csv(folder / "hardware_efficiency.csv")
    assert efficiency["efficiency_note"].str.contains("no FLOP count stored").all()


@pytest.mark.slow  # writes a whole report, plots included
def test_report_is_self_contained(built):
    text = built.read_text(encoding="utf-8")
    tags = parsed(built)
    images = [attrs for tag, attrs in tags if tag == "img"]
    assert len(images) == len(plotting.PLOT_QUESTIONS) + 1  # and the evidence under the answer
    for attrs in images:
        assert attrs["src"].startswith("data:image/png;base64,")
        png = base64.b64decode(attrs["src"].split(",", 1)[1])
        with Image.open(io.BytesIO(png)) as image:
            assert image.format == "PNG" and image.width > 400
    assert "http://" not in text and "https://" not in text
    assert not [tag for tag, _ in tags if tag in ("script", "link", "iframe", "object", "embed")]
    # Links only within the page (its contents list); sources only inline.
    assert not [
        attrs
        for _, attrs in tags
        if not attrs.get("href", "#").startswith("#") or ("src" in attrs and not attrs["src"].startswith("data:"))
    ]
    for phrase in (
        "torch faster by",
        "out of memory",
        "RESOURCE_EXHAUSTED",
        "&quot;run_id&quot;: &quot;r1&quot;",
        "3.12.1",
    ):
        assert phrase in text, phrase
    # Each plot beside the report with the data it draws.
    assert {p.name for p in (built.parent / "plots").iterdir()} == {
        f"{key}.{kind}" for key in (*dict(plotting.PLOT_QUESTIONS), "evidence") for kind in ("png", "csv")
    }


# --------------------------------------------------------------------------------- in a real browser

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
INSTALL = "apt-get install -y chromium"


def chromium() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    message = f"headless Chromium is needed to render the report and none of {', '.join(BROWSERS)} is on PATH; install it: {INSTALL}"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    warnings.warn(message, stacklevel=2)
    pytest.skip(f"!!! NOT TESTED IN A BROWSER: {message}")


def run_browser(browser: str, profile: Path, *args: str) -> str:
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--force-color-profile=srgb",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}"
    return done.stdout


# Test-only: after load, the page records how many of its images the browser actually decoded, and how wide the
# document is against the window (wider: a horizontal scroll).
PROBE = """<script>window.addEventListener('load', () => {
  const decoded = [...document.images].filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.setAttribute('data-decoded-images', String(decoded));
  const page = document.documentElement;
  document.body.setAttribute('data-widths', page.scrollWidth + ' ' + page.clientWidth);
});</script></body>"""
# The width a reader's window has: the page fits it without a horizontal scroll.
WINDOW = "--window-size=1280,800"


def rendered(browser: str, page: Path, folder: Path) -> list[tuple[str, dict]]:
    """The elements of `page` as Chromium built them at 1280x800, the probe's attributes on its body."""
    probed = folder / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE), encoding="utf-8")
    return elements_of(run_browser(browser, folder / "profile-dom", WINDOW, "--dump-dom", probed.as_uri()))


def assert_fits_the_window(tags: list[tuple[str, dict]]) -> None:
    body = next(attrs for tag, attrs in tags if tag == "body")
    document, window = map(int, body["data-widths"].split())
    assert document <= window, f"the page is {document} px wide in a {window} px window"
    # The answer comes before the first table.
    names = [tag for tag, _ in tags]
    first_table = names.index("table") if "table" in names else len(names)
    assert any(attrs.get("id") == "the-answer" for _, attrs in tags[:first_table]), "no answer before the first table"


@pytest.mark.slow  # writes a whole report, plots included
def test_the_contents_list_links_every_section_and_each_section_is_there(whole):
    page = whole.read_text(encoding="utf-8")
    tags = parsed(whole)
    ids = [attrs["id"] for tag, attrs in tags if tag == "h2" and "id" in attrs]
    links = [attrs["href"] for tag, attrs in tags if tag == "a"]
    assert links == [f"#{anchor}" for anchor in ids if anchor != "contents"]
    assert len(set(ids)) == len(ids)
    for title in SECTIONS:
        assert f">{title}</h2>" in page and f">{title}</a></li>" in page, title
    # The contents come after the opening paragraph and before the first section.
    assert (
        page.index("Generated ")
        < page.index(">The answer</h2>")
        < page.index('<nav class="contents"')
        < page.index(">Findings</h2>")
    )
    for phrase in ("server 10 qps", "tensorflow against torch", "9.8", "Scaling efficiency against devices"):
        assert phrase in page, phrase
    for name in ("serving.csv", "scaling.csv", "version_changes.csv", "version_points.csv"):
        assert (whole.parent / name).stat().st_size > 0


@pytest.mark.browser
def test_report_renders_in_headless_chromium(whole, tmp_path):
    browser = chromium()
    drawn = [attrs for tag, attrs in parsed(whole) if tag == "img"]
    assert len(drawn) > len(plotting.PLOT_QUESTIONS)  # the evidence, the plots, latency against load, a version plot
    tags = rendered(browser, whole, tmp_path)
    assert_fits_the_window(tags)
    images = [attrs for tag, attrs in tags if tag == "img"]
    assert len(images) == len(drawn) and all(a["src"].startswith("data:image/png") for a in images)
    body = next(attrs for tag, attrs in tags if tag == "body")
    assert body.get("data-decoded-images") == str(len(drawn)), f"decoded: {body.get('data-decoded-images')}"
    # Every link of the contents lands on a section the browser built.
    targets = {attrs["id"] for _, attrs in tags if "id" in attrs}
    links = [attrs["href"] for tag, attrs in tags if tag == "a"]
    assert len(links) >= len(SECTIONS) and all(link[1:] in targets for link in links)

    shot = tmp_path / "report.png"
    run_browser(browser, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1200,3000", whole.as_uri())
    with Image.open(shot) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=int)
    assert pixels.shape[:2] == (3000, 1200)
    assert (pixels.sum(axis=2) < 700).mean() > 0.02, "the screenshot is (nearly) blank"
    # The first runner's bar colour appears only inside the plots: the images were painted.
    first = tuple(int(plot_kit.RUNNER_COLOURS[0][i : i + 2], 16) for i in (1, 3, 5))
    assert (np.abs(pixels - first).sum(axis=2) < 30).sum() > 500, "no plot pixels in the screenshot"


def test_a_flag_counts_what_was_measured_runs_or_a_blocks_windows():
    flags = pd.Series(["host busy: load 3.1 | throttled: 0x4", None, "host busy: load 2.5"])
    assert flag_summary(flags, 3) == "host busy in 2 of 3 runs; throttled in 1 of 3 runs"
    assert flag_summary(flags, 3, "windows") == "host busy in 2 of 3 windows; throttled in 1 of 3 windows"
