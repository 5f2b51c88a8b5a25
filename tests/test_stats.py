"""The aggregator's statistics: right figures, no false alarms between equals, real differences found."""

from __future__ import annotations

import numpy as np
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench_aggregator.client import RunnerClient
from fwbench_aggregator.stats import compare, describe

TRIALS = 300
STEPS = 30


def noisy_steps(rng, n: int, median_s: float) -> np.ndarray:
    """Step times as a runner sees them: log-normal jitter plus the odd slow step (a GC, a page fault)."""
    times = median_s * rng.lognormal(0.0, 0.04, n)
    slow = rng.random(n) < 0.05
    times[slow] *= rng.uniform(1.2, 2.0, slow.sum())
    return times


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


def test_a_a_same_distribution_is_no_significant_difference_in_95_percent_of_trials():
    rng = np.random.default_rng(2026)
    verdicts = [
        compare("a", noisy_steps(rng, STEPS, 0.02), "b", noisy_steps(rng, STEPS, 0.02), seed=trial)
        for trial in range(TRIALS)
    ]
    quiet = sum(not v.significant for v in verdicts)
    assert quiet / TRIALS >= 0.95, f"{TRIALS - quiet} false alarms in {TRIALS} trials"
    assert all(v.verdict.startswith("no significant difference") for v in verdicts if not v.significant)


def test_a_real_ten_percent_difference_is_found_and_named():
    rng = np.random.default_rng(7)
    found = 0
    for trial in range(100):
        c = compare("torch", noisy_steps(rng, STEPS, 0.02), "tensorflow", noisy_steps(rng, STEPS, 0.022), seed=trial)
        found += c.significant and c.faster == "torch"
    assert found >= 95
    c = compare("torch", noisy_steps(rng, 200, 0.02), "tensorflow", noisy_steps(rng, 200, 0.022))
    assert c.verdict.startswith("torch faster by ") and "[" in c.verdict
    assert c.ratio == pytest.approx(1.10, abs=0.03) and c.ci_low < c.ratio < c.ci_high


def test_too_few_samples_is_refused():
    with pytest.raises(ValueError, match="at least 3"):
        compare("a", [1.0, 1.0], "b", [1.0, 1.0, 1.0])


def fake_measured_steps(client: RunnerClient) -> list[float]:
    request = pb.RunRequest(model="resnet18", mode=pb.MODE_TRAIN, batch_size=2, warmup_steps=2, measured_steps=STEPS)
    return [s.step_time_s for s in client.run(request).steps if not s.warmup]


def test_a_a_the_same_runner_twice_is_no_significant_difference(runner_pool):
    # The fake runner's steps sleep a fixed time: two runs of it draw from one distribution.
    client = RunnerClient("fake", runner_pool.get("fake").address)
    trials = 20
    alarms = [compare("first", fake_measured_steps(client), "second", fake_measured_steps(client), seed=t) for t in range(trials)]
    client.close()
    assert sum(c.significant for c in alarms) <= 1, [c.verdict for c in alarms if c.significant]


def test_a_difference_smaller_than_the_minimum_effect_is_not_called():
    rng = np.random.default_rng(3)
    fast, slow = noisy_steps(rng, 400, 0.02), noisy_steps(rng, 400, 0.0202)
    assert not compare("a", fast, "b", slow).significant
    assert compare("a", fast, "b", slow, min_effect=0.0).significant
