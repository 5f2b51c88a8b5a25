"""The aggregator's statistics, against support.run_variation's model of how runs really vary, in each noise
regime measured (docs/verdict.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from scipy import stats as scipy_stats
from support.run_variation import RUN_SPREADS, STEP_SPREAD, STEPS, run_medians

from fwbench_aggregator.analyse import stats
from fwbench_aggregator.analyse.stats import compare, describe, noise_floor
from fwbench_aggregator.plan.spec import DEFAULT_REPETITIONS
from fwbench_aggregator.run.client import RunnerClient

TRIALS = 400


def test_describe_matches_numpy():
    times = [0.010, 0.012, 0.011, 0.013, 0.030]
    d = describe(times, batch_size=8)
    assert d["steps"] == 5
    assert d["median_step_time_s"] == 0.012
    assert d["mean_step_time_s"] == pytest.approx(np.mean(times))
    assert d["std_step_time_s"] == pytest.approx(np.std(times, ddof=1))
    assert d["p5_step_time_s"] == pytest.approx(np.percentile(times, 5))
    assert d["p95_step_time_s"] == pytest.approx(np.percentile(times, 95))
    assert d["throughput_samples_per_s"] == pytest.approx(8 * 5 / sum(times))


@pytest.mark.parametrize("run_spread", RUN_SPREADS)
def test_a_a_gives_a_wrong_verdict_in_at_most_5_percent_of_trials(run_spread):
    rng = np.random.default_rng(2026)
    n = DEFAULT_REPETITIONS
    wrong = [
        c.verdict
        for c in (
            compare("a", run_medians(rng, n, 0.004, run_spread), "b", run_medians(rng, n, 0.004, run_spread))
            for _ in range(TRIALS)
        )
        if c.significant
    ]
    assert len(wrong) / TRIALS <= 0.05, f"{len(wrong)} wrong verdicts in {TRIALS}: {wrong[:5]}"


def test_pooling_steps_is_what_made_a_a_verdicts_wrong():
    # The model above has teeth: the old statistic (Mann-Whitney over every step of every run, as if steps
    # were independent) calls most A/A pairs different under launch-bound run offsets.
    from scipy.stats import mannwhitneyu

    rng = np.random.default_rng(5)
    wrong = 0
    for _ in range(100):
        pooled = [
            np.concatenate([m * rng.lognormal(0.0, STEP_SPREAD, STEPS) for m in run_medians(rng, 3, 0.004, 0.12)])
            for _ in range(2)
        ]
        wrong += mannwhitneyu(*pooled).pvalue < 0.01
    assert wrong >= 50


@pytest.mark.parametrize("run_spread", RUN_SPREADS)
def test_a_true_difference_of_twice_the_noise_floor_is_found_in_90_percent_of_trials(run_spread):
    rng = np.random.default_rng(11)
    n = DEFAULT_REPETITIONS
    found, floors = 0, []
    trials = TRIALS // 2
    for _ in range(trials):
        # Calibrate as `fwbench calibrate` does (the runner against itself), then compare with a real difference.
        floor = noise_floor(
            compare("a", run_medians(rng, n, 0.004, run_spread), "a2", run_medians(rng, n, 0.004, run_spread))
        )
        floors.append(floor)
        slower = run_medians(rng, n, 0.004 * (1 + 2 * floor), run_spread)
        c = compare("torch", run_medians(rng, n, 0.004, run_spread), "tensorflow", slower, noise_floor=floor)
        found += c.significant and c.faster == "torch"
    assert found / trials >= 0.90, f"found {found} of {trials}; median floor {np.median(floors):.1%}"


def test_default_repetitions_call_a_real_ten_percent_difference_when_runs_differ_by_3_percent():
    rng = np.random.default_rng(7)
    n = DEFAULT_REPETITIONS
    found = 0
    for _ in range(200):
        c = compare("torch", run_medians(rng, n, 0.02, 0.03), "tensorflow", run_medians(rng, n, 0.022, 0.03))
        found += c.significant and c.faster == "torch"
    assert found >= 180
    c = compare("torch", run_medians(rng, 20, 0.02, 0.03), "tensorflow", run_medians(rng, 20, 0.022, 0.03))
    assert c.verdict.startswith("torch faster by ") and "[" in c.verdict
    assert c.ratio == pytest.approx(1.10, abs=0.03) and c.ci_low < c.ratio < c.ci_high
    assert 0 < c.resolvable < 0.1


def test_too_few_repetitions_is_said_not_guessed():
    c = compare("a", [0.010, 0.0101], "b", [0.013, 0.0131, 0.0129])
    assert not c.significant and not c.enough_runs
    assert c.verdict == "too few repetitions to call (ratio 1.294; 2 and 3 runs, need 3 per runner)"
    assert math.isnan(c.ci_low) and math.isnan(noise_floor(c))
    with pytest.raises(ValueError, match="at least one run"):
        compare("a", [], "b", [1.0])


def test_a_difference_below_the_noise_floor_or_minimum_effect_is_not_called_and_says_why():
    rng = np.random.default_rng(3)
    fast, slow = run_medians(rng, 12, 0.02, 0.005), run_medians(rng, 12, 0.0206, 0.005)
    assert compare("a", fast, "b", slow).significant
    below_floor = compare("a", fast, "b", slow, noise_floor=0.05)
    assert not below_floor.significant
    assert "below the noise floor, 5.0%" in below_floor.verdict
    tiny = compare("a", fast, "b", run_medians(rng, 12, 0.0202, 0.001), min_effect=0.02)
    assert not tiny.significant


def test_a_wider_spread_needs_a_larger_difference_to_resolve():
    rng = np.random.default_rng(9)
    tight = compare("a", run_medians(rng, 6, 0.01, 0.01), "b", run_medians(rng, 6, 0.01, 0.01))
    wide = compare("a", run_medians(rng, 6, 0.01, 0.15), "b", run_medians(rng, 6, 0.01, 0.15))
    assert tight.resolvable < 0.05 < wide.resolvable
    assert "these runs resolve" in wide.verdict


def fake_run_median(client: RunnerClient) -> float:
    request = pb.RunRequest(
        model="resnet18", mode=pb.MODE_TRAIN, batch_size=2, warmup_steps=2, measured_steps=10, min_measure_s=0.0
    )
    return float(np.median([s.step_time_s for s in client.run(request).steps if not s.warmup]))


def test_a_a_the_same_runner_twice_is_no_significant_difference(runner_pool):
    # The fake runner's steps sleep a fixed time: two sets of its runs come from one distribution.
    client = RunnerClient("fake", runner_pool.get("fake").address)
    trials, n = 6, stats.MIN_REPETITIONS
    verdicts = [
        compare(
            "first", [fake_run_median(client) for _ in range(n)], "second", [fake_run_median(client) for _ in range(n)]
        )
        for _ in range(trials)
    ]
    client.close()
    assert not [c.verdict for c in verdicts if c.significant]


def test_geometric_interval_is_a_t_interval_on_the_logs_and_needs_three_runs():
    values = [0.99, 1.0, 1.01, 1.02]
    interval = stats.geometric_interval(values)
    logs = np.log(values)
    half = scipy_stats.t.ppf(0.995, 3) * logs.std(ddof=1) / 2.0
    assert interval.value == pytest.approx(stats.geometric_mean(values))
    assert interval.low == pytest.approx(interval.value * np.exp(-half))
    assert interval.high == pytest.approx(interval.value * np.exp(half))
    assert interval.resolved
    two = stats.geometric_interval([1.0, 1.1])
    assert not two.resolved and np.isnan(two.low) and two.value == pytest.approx(np.sqrt(1.1))


def test_trend_gives_the_rank_correlation_and_the_ratio_per_doubling():
    sizes = [1, 1, 2, 2, 4, 4, 8, 8]
    halving = [1.0, 1.01, 0.5, 0.505, 0.25, 0.2525, 0.125, 0.12625]
    found = stats.trend(sizes, halving)
    assert found.direction == "falls" and found.spearman_rho < -0.9 and found.spearman_p < stats.ALPHA
    assert found.ratio_per_doubling == pytest.approx(0.5, rel=1e-6) and found.points == 8
    assert stats.trend(sizes, [2.0 / v for v in halving]).direction == "rises"
    assert stats.trend([1, 2, 4], [1.0, 1.0, 1.0]).direction == "no significant trend"
