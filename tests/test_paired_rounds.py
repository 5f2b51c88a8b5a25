"""The paired test by round (analyse.stats and analyse.sequential with `paired`: each round's log ratio is one
sample), simulated on a drifting host (support.run_variation.drifting_rounds): what it holds (A/A at alpha, for fixed
runs and whole sequential procedures) and what it buys where the host drifts slower than a round.

Run with -s to see each regime's rates and widths.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats
from support.run_variation import drifting_rounds

from fwbench_aggregator.analyse import sequential, stats

PAIRS = 4000
ROUNDS = 8
A_A_LIMIT = stats.ALPHA + 3 * math.sqrt(stats.ALPHA * (1 - stats.ALPHA) / PAIRS)
# (run spread, drift from round to round, drift within a round): a steady host, then hosts that drift as the shared
# 2-core VMs measured for issue 45 did (run medians moving by up to 30% within a minute).
REGIMES = [
    pytest.param(0.03, 0.0, 0.0, id="steady 3%"),
    pytest.param(0.03, 0.05, 0.0, id="3% + drift 5%/round"),
    pytest.param(0.03, 0.10, 0.02, id="3% + drift 10%/round, 2% within"),
    pytest.param(0.12, 0.10, 0.05, id="12% + drift 10%/round, 5% within"),
]


def report(regime: str, what: str, **figures) -> None:
    print(f"\n[paired] {regime:>34} {what:<26} " + "  ".join(f"{k} {v}" for k, v in figures.items()))


def called(a: np.ndarray, b: np.ndarray, paired: bool) -> np.ndarray:
    """stats.compare's rule for every pair at once (p below alpha and the minimum effect reached): whether it calls
    a difference."""
    log_a, log_b = np.log(a), np.log(b)
    test = (
        scipy_stats.ttest_rel(log_b, log_a, axis=1)
        if paired
        else scipy_stats.ttest_ind(log_b, log_a, axis=1, equal_var=False)
    )
    effect = np.abs(log_b.mean(axis=1) - log_a.mean(axis=1))
    return (test.pvalue < stats.ALPHA) & (effect >= math.log1p(stats.MIN_EFFECT))


def half_widths(a: np.ndarray, b: np.ndarray, paired: bool) -> np.ndarray:
    """The fixed design's interval half-width (log) of every pair, at stats.CONFIDENCE."""
    log_a, log_b = np.log(a), np.log(b)
    test = (
        scipy_stats.ttest_rel(log_b, log_a, axis=1)
        if paired
        else scipy_stats.ttest_ind(log_b, log_a, axis=1, equal_var=False)
    )
    interval = test.confidence_interval(stats.CONFIDENCE)
    return (interval.high - interval.low) / 2


@pytest.mark.parametrize("run_spread, drift, within", REGIMES)
def test_a_a_by_round_calls_a_difference_in_at_most_alpha_of_procedures(run_spread, drift, within, request):
    rng = np.random.default_rng(45)
    a, b = drifting_rounds(rng, PAIRS, sequential.DEFAULT_MAX_RUNS, 0.004, run_spread, drift, within)
    outcome, runs, _, _ = sequential.simulate(sequential.SequentialPlan(), a, b, paired=True)
    fixed = called(a[:, :ROUNDS], b[:, :ROUNDS], paired=True)
    report(
        request.node.callspec.id,
        "A/A",
        sequential=f"{np.mean(outcome == 'different'):.2%}",
        fixed=f"{fixed.mean():.2%}",
        median_runs=np.median(runs),
    )
    assert np.mean(outcome == "different") <= A_A_LIMIT and fixed.mean() <= A_A_LIMIT


def test_the_paired_looks_share_of_alpha_holds_whole_a_a_procedures_at_alpha():
    # At the full alpha the paired looks spend more than it (their first looks have 2 and 3 degrees of freedom).
    rng = np.random.default_rng(46)
    a, b = drifting_rounds(rng, 5 * PAIRS, sequential.DEFAULT_MAX_RUNS, 0.004, 0.03, 0.05)
    shared, _, _, _ = sequential.simulate(sequential.SequentialPlan(), a, b, paired=True)
    full, _, _, _ = sequential.simulate(
        sequential.SequentialPlan(alpha=stats.ALPHA / sequential.PAIRED_SHARE), a, b, paired=True
    )
    report(
        "3% + drift 5%/round",
        "A/A, share against full",
        shared=f"{np.mean(shared == 'different'):.2%}",
        full=f"{np.mean(full == 'different'):.2%}",
    )
    assert np.mean(shared == "different") <= stats.ALPHA < np.mean(full == "different")


@pytest.mark.parametrize("run_spread, drift, within", REGIMES[1:])
def test_on_a_drifting_host_rounds_resolve_finer_and_find_a_ten_percent_difference(run_spread, drift, within, request):
    rng = np.random.default_rng(7)
    a, b = drifting_rounds(rng, PAIRS // 4, ROUNDS, 0.004, run_spread, drift, within)
    narrower = np.median(half_widths(a, b, paired=False) / half_widths(a, b, paired=True))
    planted = b * 1.10
    found = {paired: np.mean(called(a, planted, paired)) for paired in (False, True)}
    report(
        request.node.callspec.id,
        f"{ROUNDS} rounds",
        narrower=f"{narrower:.2f}x",
        found_welch=f"{found[False]:.0%}",
        found_paired=f"{found[True]:.0%}",
    )
    assert narrower > 1.1 and found[True] > found[False]


def test_on_a_steady_host_few_rounds_leave_the_paired_interval_wider_which_is_why_the_design_decides():
    # Half the degrees of freedom and nothing to cancel: with 3 rounds the paired t quantile (2 degrees of freedom) is
    # 2.2 times Welch's (about 4).
    rng = np.random.default_rng(9)
    a, b = drifting_rounds(rng, PAIRS // 4, 3, 0.004, 0.03, 0.0)
    assert np.median(half_widths(a, b, paired=True) / half_widths(a, b, paired=False)) > 1.4


def test_called_is_stats_compares_rule():
    rng = np.random.default_rng(10)
    a, b = drifting_rounds(rng, 200, ROUNDS, 0.004, 0.03, 0.05)
    b = b * np.repeat([1.0, 1.1], 100)[:, None]
    for paired in (False, True):
        expected = [stats.compare("a", x, "b", y, paired=paired).significant for x, y in zip(a, b)]
        assert list(called(a, b, paired)) == expected and any(expected)


def test_a_paired_comparison_is_scipys_paired_t_test_on_the_log_ratios():
    rng = np.random.default_rng(3)
    a, b = drifting_rounds(rng, 1, 6, 0.004, 0.03, 0.08)
    c = stats.compare("torch", a[0], "jax", b[0] * 1.2, paired=True)
    test = scipy_stats.ttest_rel(np.log(b[0] * 1.2), np.log(a[0]))
    interval = test.confidence_interval(stats.CONFIDENCE)
    assert c.paired and (c.faster, c.slower) == ("torch", "jax")
    assert (c.ci_low, c.ci_high) == (pytest.approx(math.exp(interval.low)), pytest.approx(math.exp(interval.high)))
    assert c.p_value == pytest.approx(test.pvalue)
    assert c.spread == pytest.approx(np.std(np.log(b[0] * 1.2 / a[0]), ddof=1) / math.sqrt(2))
    with pytest.raises(ValueError, match="one per runner per round"):
        stats.compare("torch", a[0], "jax", b[0][:5], paired=True)


def test_a_look_by_round_is_the_paired_test_at_the_looks_level():
    rng = np.random.default_rng(4)
    a, b = drifting_rounds(rng, 1, 7, 0.004, 0.03, 0.08)
    plan = sequential.SequentialPlan()
    decision = sequential.look(plan, a[0], b[0], "torch", "jax", paired=True)
    test = scipy_stats.ttest_rel(np.log(b[0]), np.log(a[0]))
    interval = test.confidence_interval(1 - plan.level(7, paired=True))
    c = decision.comparison
    low, high = sorted(
        (math.exp(interval.low), math.exp(interval.high))
        if c.faster == "torch"
        else (math.exp(-interval.high), math.exp(-interval.low))
    )
    assert decision.paired and c.paired and c.p_value == pytest.approx(test.pvalue)
    assert c.alpha == plan.level(7, paired=True) < plan.level(7)
    assert (c.ci_low, c.ci_high) == (pytest.approx(low), pytest.approx(high))
