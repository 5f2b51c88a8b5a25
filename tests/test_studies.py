"""The studies' questions from stored runs (analyse: optimal, trends, efficiency, findings): the optimal batch and the largest under a latency budget,
the batch trend's test and where it flattens, achieved FLOP/s and MFU, and the findings. Frames are built by hand
with known per-run medians, so every expected answer is worked out here."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from fwbench_aggregator.analyse import stats
from fwbench_aggregator.analyse.comparison import comparison_rows, per_run
from fwbench_aggregator.analyse.efficiency import hardware_efficiency
from fwbench_aggregator.analyse.findings import findings, verdict_counts
from fwbench_aggregator.analyse.optimal import optimal_batches
from fwbench_aggregator.analyse.scaling import scaling_rows
from fwbench_aggregator.analyse.trends import batch_trends

H100 = "NVIDIA H100 80GB HBM3"
# Each run's offset from its configuration's time: three runs, a spread of about 1%.
OFFSETS = (0.99, 1.0, 1.01)


def optimal(summary, max_batch=None, latency_budget_ms=None):
    """The optimal-batch rows of these runs, their steps not kept (each run's median from the summary)."""
    return optimal_batches(per_run(summary, NO_STEPS), summary, max_batch, latency_budget_ms)


def run_rows(
    runner: str,
    step_s_by_batch: dict[int, float],
    mode: str = "infer",
    device: str = "gpu:0",
    offsets=OFFSETS,
    precision: str = "fp32",
    model: str = "resnet18",
    **extra,
) -> list[dict]:
    rows = []
    for batch, step_s in step_s_by_batch.items():
        for repetition, offset in enumerate(offsets):
            rows.append(
                {
                    "runner": runner,
                    "framework": runner,
                    "framework_version": "9.9",
                    "model": model,
                    "model_options": "",
                    "mode": mode,
                    "batch_size": batch,
                    "input_shape": "3x32x32",
                    "precision": precision,
                    "device": device,
                    "device_name": H100 if device.startswith("gpu") else "cpu",
                    "repetition": repetition,
                    "status": "ok",
                    "error": "",
                    "median_step_time_s": step_s * offset,
                    **extra,
                }
            )
    return rows


def frame(*groups: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([row for group in groups for row in group])


NO_STEPS = pd.DataFrame()


def test_the_optimal_batch_is_the_highest_throughput_and_inside_the_grid():
    # Time per sample 10, 6, 4, 5 ms: batch 4 has the highest throughput, and batch 8 is resolvably worse.
    summary = frame(run_rows("torch", {1: 0.010, 2: 0.012, 4: 0.016, 8: 0.040}))
    row = optimal(summary).iloc[0]
    assert row.best_batch == 4
    assert row.best_throughput_samples_per_s == pytest.approx(250.0, rel=1e-3)
    assert row.best_throughput_low < 250.0 < row.best_throughput_high
    assert row.optimal_status == "best of the measured batches (99% confidence)"
    assert row.within_noise == "" and row.fit_note == ""


def test_batches_within_the_noise_of_the_best_are_named_and_one_run_is_not_a_verdict():
    # Batches 4 and 8 differ by 0.5%, under the 2% minimum effect: the runs cannot tell them apart.
    summary = frame(run_rows("torch", {2: 0.020, 4: 0.016, 8: 0.0318}))
    row = optimal(summary).iloc[0]
    assert row.best_batch == 8 and row.within_noise == "4"
    assert row.optimal_status.startswith("best, but batch 4 within the noise")

    once = frame(run_rows("torch", {2: 0.020, 4: 0.016}, offsets=(1.0,)))
    row = optimal(once).iloc[0]
    assert row.optimal_status.startswith("not resolved: fewer than 3 runs per batch")
    shown = studies_display(once)
    assert shown["optimal batch"].iloc[0] == "–" and shown["samples/s"].iloc[0] == "–"


def studies_display(summary):
    from fwbench_aggregator.present.display import optimal_display

    return optimal_display(optimal(summary))


def test_where_the_batches_that_fit_end_comes_from_max_batch_or_out_of_memory_runs():
    rising = {1: 0.010, 2: 0.012, 4: 0.016}
    max_batch = pd.DataFrame(
        [
            {
                "model": "resnet18",
                "model_options": "",
                "mode": "infer",
                "input_shape": "3x32x32",
                "precision": "fp32",
                "device": "gpu:0",
                "runner": "torch",
                "largest_batch": 512,
                "limit": 4096,
                "capped": False,
                "searched_at_unix_s": 1.0,
            }
        ]
    )
    row = optimal(frame(run_rows("torch", rising)), max_batch).iloc[0]
    assert row.largest_fitting_batch == 512
    assert (
        row.fit_note == "max-batch: 512 fits; best at the grid's largest batch: larger batches that fit may do better"
    )

    failed = [
        {
            **run_rows("torch", {8: 1.0})[0],
            "status": "failed",
            "median_step_time_s": np.nan,
            "error": "RESOURCE_EXHAUSTED: out of memory on gpu:0",
        }
    ]
    row = optimal(frame(run_rows("torch", rising), failed)).iloc[0]
    assert row.out_of_memory_batches == "8"
    assert row.fit_note == "out of memory from batch 8; best at the largest batch that fits"


def test_the_latency_budget_takes_the_largest_batch_whose_interval_ends_under_it():
    steps_ms = {1: 2.0, 2: 3.0, 4: 5.0, 8: 9.0, 16: 17.0}
    summary = frame(run_rows("torch", {b: ms / 1e3 for b, ms in steps_ms.items()}))
    row = optimal(summary, latency_budget_ms=10.0).iloc[0]
    assert row.budget_batch == 8 and row.budget_step_ms == pytest.approx(9.0, rel=1e-3)
    assert row.budget_note == ""
    # A budget inside batch 8's interval: batch 8 is not called under it.
    row = optimal(summary, latency_budget_ms=9.02).iloc[0]
    assert row.budget_batch == 4 and row.budget_note == "batch 8: within the noise of the budget"
    row = optimal(summary, latency_budget_ms=1.0).iloc[0]
    assert math.isnan(row.budget_batch) and row.budget_note.startswith("no batch stays under 1 ms (batch 1: 2 ms)")
    once = frame(run_rows("torch", {1: 0.002}, offsets=(1.0,)))
    row = optimal(once, latency_budget_ms=10.0).iloc[0]
    assert math.isnan(row.budget_batch) and "fewer than 3 runs per batch, not judged" in row.budget_note


def test_a_falling_time_per_sample_is_tested_and_its_flattening_found():
    # Per sample: 10, 6, 5, 4.9, 4.85 ms at batch 1..16: gains per doubling 40%, 17%, 2%, 1%.
    per_sample_ms = {1: 10.0, 2: 6.0, 4: 5.0, 8: 4.9, 16: 4.85}
    summary = frame(run_rows("torch", {b: ms * b / 1e3 for b, ms in per_sample_ms.items()}))
    row = batch_trends(per_run(summary, NO_STEPS)).iloc[0]
    assert row.trend == "falls" and row.spearman_rho < -0.8 and row.spearman_p < stats.ALPHA
    assert row.ratio_per_doubling < 1.0 and row.slope_p < stats.ALPHA
    assert row.flattens_at_batch == 4 and row.flatten_note == "each doubling past batch 4 gains < 5%"


def test_no_trend_is_called_where_there_is_none_and_too_few_batches_are_not_tested():
    flat = frame(run_rows("torch", {1: 0.010, 2: 0.020, 4: 0.040}, offsets=(0.9, 1.0, 1.1)))
    row = batch_trends(per_run(flat, NO_STEPS)).iloc[0]
    assert row.trend == "no significant trend" and row.spearman_rho == pytest.approx(0.0, abs=1e-12)
    assert row.flattens_at_batch == 1 and row.flatten_note == "flat from the smallest batch"
    still = frame(run_rows("torch", {1: 0.010, 2: 0.012, 4: 0.016}))
    assert batch_trends(per_run(still, NO_STEPS)).iloc[0].flatten_note == "still gaining 33% per doubling at batch 4"
    two = frame(run_rows("torch", {1: 0.010, 2: 0.012}))
    row = batch_trends(per_run(two, NO_STEPS)).iloc[0]
    assert row.trend == "not tested: 2 batch size(s), a trend needs 3" and math.isnan(row.spearman_p)
    # A perfect fall over one run per batch: scipy's p-value for three points would call it; the runs cannot.
    once = frame(run_rows("torch", {1: 0.010, 2: 0.012, 4: 0.016}, offsets=(1.0,)))
    row = batch_trends(per_run(once, NO_STEPS)).iloc[0]
    assert row.trend == "not tested: fewer than 3 runs per batch (a trend needs 3)" and math.isnan(row.spearman_p)


def facts(runner: str, forward_flops: float) -> dict:
    return {
        "runner": runner,
        "framework": runner,
        "framework_version": "9.9",
        "model": "resnet18",
        "model_options": "",
        "input_shape": "3x32x32",
        "forward_flops": forward_flops,
        "parameter_count": 1,
        "flops_method": "test",
    }


def test_achieved_flops_and_mfu_against_the_published_peak():
    summary = frame(
        run_rows("torch", {64: 0.010}, mode="train", precision="amp_bf16"),
        run_rows("tensorflow", {64: 0.010}, mode="infer", precision="amp_bf16"),
        run_rows("torch", {64: 0.010}, mode="infer", device="cpu:0"),
    )
    rows = comparison_rows(summary, NO_STEPS)
    table = hardware_efficiency(rows, pd.DataFrame([facts("torch", 1e9)])).set_index(["runner", "mode", "device"])
    train = table.loc[("torch", "train", "gpu:0")]
    # 1 GFLOP forward x 64 samples x 3 for training, in 10 ms: 19.2 TFLOP/s of the H100 SXM's 989 in bf16.
    assert train.flops_per_step == pytest.approx(192e9)
    assert train.achieved_flops_per_s == pytest.approx(19.2e12, rel=1e-3)
    assert train.peak_flops_per_s == pytest.approx(989e12, rel=0.01) and "H100" in train.peak_entry
    assert train.mfu == pytest.approx(19.2 / 989, rel=0.01)
    assert train.efficiency_note == ""
    other = table.loc[("tensorflow", "infer", "gpu:0")]
    assert math.isnan(other.mfu) and other.efficiency_note.startswith("no FLOP count stored")
    cpu = table.loc[("torch", "infer", "cpu:0")]
    assert cpu.achieved_flops_per_s == pytest.approx(6.4e12, rel=1e-3) and math.isnan(cpu.mfu)
    assert cpu.efficiency_note == "no peak known for a CPU"


def test_fp32_with_tf32_allowed_is_measured_against_the_tf32_peak():
    # The native profile lets torch's convolutions use TF32: the GPU acceptance run on an H200 read resnet50 training
    # as 68.8% of the non-tensor fp32 peak, which TF32 math can pass; against the TF32 peak it is 9%.
    summary = frame(
        run_rows("torch", {64: 0.010}, mode="train", tf32="convolutions only"),
        run_rows("tensorflow", {64: 0.010}, mode="train", tf32="off"),
    )
    model = [facts("torch", 1e9), {**facts("tensorflow", 1e9), "framework": "tensorflow"}]
    table = hardware_efficiency(comparison_rows(summary, NO_STEPS), pd.DataFrame(model)).set_index("runner")
    assert table.loc["torch", "peak_entry"].endswith("tf32 dense")
    assert table.loc["torch", "mfu"] == pytest.approx(19.2 / 494.7, rel=0.01)
    assert "convolutions only" in table.loc["torch", "efficiency_note"]
    assert table.loc["tensorflow", "peak_entry"].endswith("fp32 non-tensor")
    assert table.loc["tensorflow", "mfu"] == pytest.approx(19.2 / 67, rel=0.01)


def test_findings_say_who_won_with_confidence_and_what_is_not_measured():
    summary = frame(
        run_rows("torch", {1: 0.010, 2: 0.012, 4: 0.016}, mode="train"),
        run_rows("tensorflow", {1: 0.013, 2: 0.0121, 4: 0.020}, mode="train"),
        run_rows("torch", {1: 0.010}, mode="infer", device="cpu:0", offsets=(1.0,)),
        run_rows("tensorflow", {1: 0.020}, mode="infer", device="cpu:0", offsets=(1.0,)),
    )
    rows = comparison_rows(summary, NO_STEPS)
    trends = batch_trends(per_run(summary, NO_STEPS))
    found = {f.question: f for f in findings(rows, per_run(summary, NO_STEPS), trends, scaling_rows(summary))}
    assert found["Training time"].sentence == (
        "torch was faster in 2 of 3 configurations (by 25% to 30%); 1 could not be told apart (99% confidence, over runs)."
    )
    assert found["CPU inference"].sentence == (
        "Not resolved: each of the 1 configurations has fewer than 3 runs per runner, and a verdict needs 3 "
        "(run more repetitions)."
    )
    assert found["GPU inference"].sentence == "Not measured: no GPU inference configuration ran on two or more runners."
    assert found["Batch size and inference time per sample"].sentence.startswith("Not tested")
    assert found["Power and energy"].sentence.startswith("Not measured: no run has a power reading")
    assert found["Scaling over devices"].sentence.startswith("Not measured")
    assert all(f.flagged == "" for f in found.values())


def test_a_finding_is_flagged_where_a_verdict_behind_it_was_and_energy_is_compared_over_runs():
    energy = {"energy_per_sample_j": 0.5}
    summary = frame(
        run_rows("torch", {8: 0.010}, mode="train", device_flags="another process used the device", **energy),
        run_rows("tensorflow", {8: 0.013}, mode="train", energy_per_sample_j=0.8),
    )
    rows = comparison_rows(summary, NO_STEPS)
    found = {
        f.question: f
        for f in findings(
            rows, per_run(summary, NO_STEPS), batch_trends(per_run(summary, NO_STEPS)), scaling_rows(summary)
        )
    }
    assert found["Training time"].flagged == "1 configuration(s) had a run on a device that was not quiet"
    # Every run's energy is the same per runner: nothing varies, and 0.8 / 0.5 is called.
    assert found["Power and energy"].sentence == (
        "torch used less energy per sample in 1 of 1 configurations (99% confidence, over runs)."
    )


def test_verdict_counts_make_the_relative_plots_title():
    summary = frame(
        run_rows("torch", {1: 0.010, 2: 0.012}, mode="train"),
        run_rows("tensorflow", {1: 0.013, 2: 0.0121}, mode="train"),
    )
    counts = verdict_counts(comparison_rows(summary, NO_STEPS))
    assert counts.headline() == "torch faster in 1, 1 not resolved"
    assert verdict_counts(comparison_rows(pd.DataFrame(), NO_STEPS)).headline() == "no verdict"
