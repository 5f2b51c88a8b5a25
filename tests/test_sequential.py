"""Sequential repetitions (analyse.sequential) against support.run_variation's model of how runs vary, simulated
over whole procedures: every look from the first round to the budget, thousands of pairs at once.

Each regime is one of its run spreads (GPU-bound, steady CPU, launch-bound GPU), a noisier 30%, and a
host where one run in ten is slowed as a whole by 1.2 to 2 times (another process for the length of a run).
Run with -s to see the rates and the runs each regime used.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats
from support.run_variation import RUN_SPREADS, SLOW_STEP_CHANCE, SLOW_STEP_FACTORS, STEP_SPREAD, STEPS

from fwbench_aggregator.analyse import sequential, spending, stats
from fwbench_aggregator.plan.spec import DEFAULT_REPETITIONS

PAIRS = 4000
MAX_RUNS = sequential.DEFAULT_MAX_RUNS
REGIMES = [pytest.param(spread, False, id=f"{spread:.1%}") for spread in (*RUN_SPREADS, 0.30)]
REGIMES.append(pytest.param(0.03, True, id="3.0%+outlier runs"))
# The simulated rate may exceed the level by sampling error alone: three standard errors of PAIRS trials.
A_A_LIMIT = stats.ALPHA + 3 * math.sqrt(stats.ALPHA * (1 - stats.ALPHA) / PAIRS)


def run_medians(rng, pairs: int, median_s: float, run_spread: float, outliers: bool = False) -> np.ndarray:
    """support.run_variation.run_medians for `pairs` runners at once, MAX_RUNS runs each: a log-normal offset per
    run, then log-normal step jitter with the odd slow step, each run reduced to its median step."""
    shape = (pairs, MAX_RUNS, STEPS)
    times = median_s * rng.lognormal(0.0, run_spread, shape[:2])[..., None] * rng.lognormal(0.0, STEP_SPREAD, shape)
    times = np.where(rng.random(shape) < SLOW_STEP_CHANCE, times * rng.uniform(*SLOW_STEP_FACTORS, shape), times)
    medians = np.median(times, axis=-1)
    if outliers:
        medians = np.where(rng.random(shape[:2]) < 0.1, medians * rng.uniform(1.2, 2.0, shape[:2]), medians)
    return medians


def calibrated_floor(rng, run_spread: float, outliers: bool) -> float:
    """The noise floor `fwbench calibrate` would measure here: the median of 200 A/A calibrations at the default
    repetitions (one calibration is itself noisy; the median is the typical host)."""
    first, second = (run_medians(rng, 200, 0.004, run_spread, outliers)[:, :DEFAULT_REPETITIONS] for _ in range(2))
    return float(np.median([stats.noise_floor(stats.compare("a", a, "a2", b)) for a, b in zip(first, second)]))


def until_stopped(plan: sequential.SequentialPlan, a: np.ndarray, b: np.ndarray) -> sequential.Decision:
    """A look after every round, as `--repetitions auto` runs them, to the one that stops."""
    return next(d for n in range(1, MAX_RUNS + 1) if (d := sequential.look(plan, a[:n], b[:n], "torch", "jax")).stop)


def report(regime: str, what: str, **figures) -> None:
    print(f"\n[sequential] {regime:>18} {what:<28} " + "  ".join(f"{k} {v}" for k, v in figures.items()))


@pytest.mark.parametrize(
    "looks, gamma",
    [
        pytest.param(tuple(range(3, MAX_RUNS + 1)), None, id="every round, Pocock type"),
        pytest.param((3, 6, 10, 20), -4.0, id="4 looks, HSD -4"),
        pytest.param((4, 10), 0.0, id="2 looks, HSD 0"),
    ],
)
def test_the_spending_function_shares_alpha_over_the_looks(looks, gamma):
    t = np.asarray(looks) / looks[-1]
    spent = spending.spent(t, gamma=gamma)
    assert np.all(np.diff(spent) > 0) and spent[-1] == pytest.approx(stats.ALPHA)
    assert spending.spent(0.0, gamma=gamma) == 0.0
    critical = spending.critical_values(looks, gamma=gamma)
    # A standard normal score watched at those looks (Brownian motion at information t) crosses by each look as
    # often as the spending function allows, no more.
    rng = np.random.default_rng(1)
    score = np.cumsum(rng.normal(size=(400_000, t.size)) * np.sqrt(np.diff(t, prepend=0.0)), axis=1)
    crossed = np.maximum.accumulate(np.abs(score / np.sqrt(t)) >= critical, axis=1).mean(axis=0)
    assert crossed == pytest.approx(spent, abs=4 * math.sqrt(stats.ALPHA / 400_000))
    plan = sequential.SequentialPlan(max_runs=looks[-1], looks=() if gamma is None else looks, spending_gamma=gamma)
    levels = [plan.level(n) for n in looks]
    assert max(levels) < stats.ALPHA < sum(levels)
    assert plan.level(looks[-1] + 5) == levels[-1]


def test_hwang_shih_decani_spending_spans_pocock_to_obrien_fleming():
    t = np.array([0.15, 0.5, 1.0])
    pocock_like, linear, obf_like = (spending.spent(t, gamma=g) for g in (1.0, 0.0, -4.0))
    assert linear == pytest.approx(stats.ALPHA * t)
    # The more negative gamma, the less spent early and the more kept for the last look.
    assert np.all(obf_like[:2] < linear[:2]) and np.all(linear[:2] < pocock_like[:2])
    assert spending.spent(t, gamma=1.0) == pytest.approx(spending.spent(t), rel=0.1)


def test_a_plan_with_planned_looks_judges_only_there():
    plan = sequential.SequentialPlan(max_runs=10, looks=(4, 10), spending_gamma=-4.0)
    a, b = [1.0, 1.01, 0.99, 1.0, 1.02], [2.0, 2.02, 1.98, 2.0, 2.01]
    # Twice as slow in every run: settled at the first look, not before it.
    assert sequential.look(plan, a[:3], b[:3], "torch", "jax").outcome == "continue"
    decided = sequential.look(plan, a[:4], b[:4], "torch", "jax")
    assert decided.outcome == "different" and decided.comparison.alpha == plan.level(4)
    between = sequential.look(plan, a, b, "torch", "jax")
    assert between.outcome == "continue" and between.comparison.alpha == plan.level(4) < plan.level(10)
    assert plan.schedule == (4, 10) and sequential.SequentialPlan(max_runs=5).schedule == (3, 4, 5)
    for looks in ((4, 8), (2, 10), (6, 4, 10)):
        with pytest.raises(ValueError, match=r"looks must rise from min_runs \(3\) or more to max_runs \(10\)"):
            sequential.SequentialPlan(max_runs=10, looks=looks)


@pytest.mark.parametrize("run_spread, outliers", REGIMES)
def test_a_a_gives_a_wrong_verdict_in_at_most_alpha_of_whole_procedures(run_spread, outliers, request):
    rng = np.random.default_rng(2026)
    a, b = (run_medians(rng, PAIRS, 0.004, run_spread, outliers) for _ in range(2))
    outcome, runs, _, _ = sequential.simulate(sequential.SequentialPlan(), a, b)
    wrong = float(np.mean(outcome == "different"))
    floor = calibrated_floor(rng, run_spread, outliers)
    calibrated, calibrated_runs, _, _ = sequential.simulate(sequential.SequentialPlan(noise_floor=floor), a, b)
    report(
        request.node.callspec.id,
        "A/A",
        wrong=f"{wrong:.2%}",
        equivalent=f"{np.mean(outcome == 'equivalent'):.0%}",
        median_runs=np.median(runs),
        floor=f"{floor:.1%}",
        wrong_at_floor=f"{np.mean(calibrated == 'different'):.2%}",
        equivalent_at_floor=f"{np.mean(calibrated == 'equivalent'):.0%}",
        median_runs_at_floor=np.median(calibrated_runs),
    )
    assert wrong <= 0.05 and wrong <= A_A_LIMIT
    assert np.mean(calibrated == "different") <= A_A_LIMIT


def naive_wrong(a: np.ndarray, b: np.ndarray) -> float:
    """Stopping at the first look where stats.compare's own rule (p < ALPHA and the minimum effect) calls a
    difference: what looking after every round does without spending."""
    log_a, log_b = np.log(a), np.log(b)
    called = np.zeros(a.shape[0], dtype=bool)
    for n in range(stats.MIN_REPETITIONS, MAX_RUNS + 1):
        p_value = scipy_stats.ttest_ind(log_b[:, :n], log_a[:, :n], axis=1, equal_var=False).pvalue
        effect = np.abs(log_b[:, :n].mean(axis=1) - log_a[:, :n].mean(axis=1))
        called |= (p_value < stats.ALPHA) & (effect >= math.log1p(stats.MIN_EFFECT))
    return float(called.mean())


@pytest.mark.parametrize("run_spread", RUN_SPREADS[1:])
def test_stopping_at_p_below_alpha_at_any_look_calls_identical_runners_different_far_more_often(run_spread):
    rng = np.random.default_rng(17)
    a, b = (run_medians(rng, PAIRS, 0.004, run_spread) for _ in range(2))
    outcome, _, _, _ = sequential.simulate(sequential.SequentialPlan(), a, b)
    naive, spent = naive_wrong(a, b), float(np.mean(outcome == "different"))
    report(f"{run_spread:.1%}", "A/A, naive against spent", naive=f"{naive:.2%}", spent=f"{spent:.2%}")
    assert naive > 3 * stats.ALPHA and spent <= A_A_LIMIT


@pytest.mark.parametrize("run_spread, outliers", REGIMES)
def test_a_true_difference_of_twice_the_noise_floor_is_found_in_90_percent_of_procedures(run_spread, outliers, request):
    rng = np.random.default_rng(11)
    floor = calibrated_floor(rng, run_spread, outliers)
    pairs = PAIRS // 4
    fast = run_medians(rng, pairs, 0.004, run_spread, outliers)
    slow = run_medians(rng, pairs, 0.004 * (1 + 2 * floor), run_spread, outliers)
    outcome, runs, ratio, _ = sequential.simulate(sequential.SequentialPlan(noise_floor=floor), fast, slow)
    found = float(np.mean((outcome == "different") & (ratio > 1)))
    report(
        request.node.callspec.id,
        "twice the floor",
        floor=f"{floor:.1%}",
        found=f"{found:.1%}",
        median_runs=np.median(runs),
    )
    assert found >= 0.90


@pytest.mark.parametrize("run_spread, outliers", REGIMES)
def test_a_large_difference_stops_sooner_than_the_fixed_design(run_spread, outliers, request):
    rng = np.random.default_rng(5)
    pairs = PAIRS // 4
    fast = run_medians(rng, pairs, 0.004, run_spread, outliers)
    slow = run_medians(rng, pairs, 0.006, run_spread, outliers)
    outcome, runs, ratio, _ = sequential.simulate(sequential.SequentialPlan(), fast, slow)
    found = float(np.mean((outcome == "different") & (ratio > 1)))
    report(request.node.callspec.id, "a 50% difference", found=f"{found:.1%}", median_runs=np.median(runs))
    assert not np.any((outcome == "different") & (ratio < 1))
    if run_spread <= 0.12:  # 50% is at least four times these runs' spread: a large difference
        assert found >= 0.99 and np.median(runs) < DEFAULT_REPETITIONS


def test_tight_a_a_runs_are_stated_equivalent_within_the_minimum_effect():
    rng = np.random.default_rng(3)
    a, b = (run_medians(rng, PAIRS // 4, 0.004, RUN_SPREADS[0]) for _ in range(2))
    outcome, runs, _, _ = sequential.simulate(sequential.SequentialPlan(), a, b)
    assert np.mean(outcome == "equivalent") >= 0.90 and np.median(runs) < MAX_RUNS
    decision = until_stopped(sequential.SequentialPlan(), a[0], b[0])
    c = decision.comparison
    assert decision.outcome == "equivalent" and 1 / 1.02 < c.ci_low <= c.ratio <= c.ci_high < 1.02
    assert decision.verdict.startswith(f"{c.faster} and {c.slower} equivalent within 2.0% [{c.slower} ")


def test_huge_spreads_stop_early_as_too_noisy_to_tell():
    rng = np.random.default_rng(3)
    a, b = (run_medians(rng, PAIRS // 4, 0.004, 1.0) for _ in range(2))
    outcome, runs, _, _ = sequential.simulate(sequential.SequentialPlan(), a, b)
    assert np.mean(outcome == "unresolved") >= 0.99 and np.median(runs) <= 4
    first = run_medians(np.random.default_rng(4), 2, 0.004, 1.0)[:, :3]
    fixed = stats.compare("torch", first[0], "jax", first[1])
    assert fixed.ci_high / fixed.ci_low > 1000  # the absurd interval the fixed design prints
    decision = sequential.look(sequential.SequentialPlan(), first[0], first[1], "torch", "jax")
    assert decision.stop and decision.outcome == "unresolved" and decision.comparison.resolvable > stats.TOO_NOISY
    assert decision.verdict == stats.too_noisy_text(decision.spread)
    assert decision.verdict.startswith("too noisy to tell: runs varied ") and decision.verdict.endswith(
        "%; rerun on a quiet host"
    )


@pytest.mark.parametrize(
    "plan",
    [
        sequential.SequentialPlan(noise_floor=0.05),
        sequential.SequentialPlan(noise_floor=0.05, looks=(4, 8, 20), spending_gamma=-2.0),
    ],
    ids=["every round", "planned looks"],
)
def test_look_after_each_round_is_what_the_simulation_runs(plan):
    rng = np.random.default_rng(8)
    a = run_medians(rng, 40, 0.004, 0.12)
    b = run_medians(rng, 40, 0.004, 0.12) * np.repeat([1.0, 1.1, 1.4, 0.7], 10)[:, None]
    outcome, runs, ratio, resolvable = sequential.simulate(plan, a, b)
    for i in range(40):
        decision = until_stopped(plan, a[i], b[i])
        assert (decision.outcome, decision.runs) == (outcome[i], runs[i])
        c = decision.comparison
        assert c.ratio == pytest.approx(ratio[i] if c.faster == "torch" else 1 / ratio[i])
        assert c.resolvable == pytest.approx(resolvable[i])
    assert set(outcome) >= {"different", "unresolved"} and set(runs) <= set(plan.schedule)


def test_a_look_is_welchs_t_test_at_the_looks_level():
    rng = np.random.default_rng(6)
    # One run short on one side (a run failed): the look is the smaller side's.
    a, b = run_medians(rng, 1, 0.004, 0.05)[0, :7], run_medians(rng, 1, 0.0041, 0.08)[0, :6]
    plan = sequential.SequentialPlan()
    decision = sequential.look(plan, a, b, "torch", "jax")
    c = decision.comparison
    welch = scipy_stats.ttest_ind(np.log(b), np.log(a), equal_var=False)
    interval = welch.confidence_interval(1 - plan.level(6))
    assert decision.runs == 6 and {c.runs_faster, c.runs_slower} == {6, 7}
    assert c.p_value == pytest.approx(welch.pvalue) and c.alpha == plan.level(6) < stats.ALPHA
    low, high = sorted(
        (math.exp(interval.low), math.exp(interval.high))
        if c.faster == "torch"
        else (math.exp(-interval.high), math.exp(-interval.low))
    )
    assert (c.ci_low, c.ci_high) == (pytest.approx(low), pytest.approx(high))
    assert c.resolvable == pytest.approx(math.exp((interval.high - interval.low) / 2) - 1)


def test_identical_runs_are_settled_at_the_first_look():
    plan = sequential.SequentialPlan()
    same = sequential.look(plan, [0.005] * 3, [0.005] * 3, "fake", "fake-2")
    assert same.outcome == "equivalent" and same.comparison.ratio == same.comparison.ci_low == 1.0
    assert same.verdict == "fake and fake-2 equivalent within 2.0% [fake-2 +0.0% to +0.0%]"
    apart = sequential.look(plan, [0.006] * 3, [0.005] * 3, "slow", "quick")
    assert apart.outcome == "different" and apart.verdict == "quick faster by 20% [20%, 20%]"
    close = sequential.look(plan, [0.005] * 3, [0.00505] * 3, "a", "b")
    assert close.outcome == "equivalent"


def test_verdicts_read_at_a_glance():
    assert stats.faster_text(1.12, 1.05, 1.19) == "faster by 12% [5%, 19%]"
    assert stats.faster_text(4.29, 3.15, 5.83) == "4.3x faster [3.1x, 5.8x]"
    assert stats.too_noisy_text(0.5) == "too noisy to tell: runs varied 65%; rerun on a quiet host"
    plan = sequential.SequentialPlan()
    four_fold = sequential.look(plan, [1.0, 1.01, 0.99], [4.3, 4.35, 4.25], "torch", "jax")
    assert four_fold.outcome == "different" and four_fold.verdict.startswith("torch 4.3x faster [4.")
    early = sequential.look(plan, [1.0, 1.2], [1.1, 1.0], "torch", "jax")
    assert early.outcome == "continue" and not early.stop and early.verdict == "undecided after 2 runs per runner"
    assert not early.comparison.enough_runs and math.isnan(early.comparison.ci_low)
    going = sequential.look(plan, [1.0, 1.1, 0.95], [1.05, 1.0, 1.12], "torch", "jax")
    assert going.outcome == "continue"
    assert going.verdict.startswith("undecided after 3 runs per runner: these runs resolve ")


def test_an_unresolved_verdict_says_how_many_more_runs_would_resolve_the_threshold():
    rng = np.random.default_rng(12)
    plan = sequential.SequentialPlan(max_runs=8)
    a, b = run_medians(rng, 1, 0.004, 0.03)[0, :8], run_medians(rng, 1, 0.004, 0.03)[0, :8]
    decision = sequential.look(plan, a, b, "torch", "jax")
    more = decision.runs_to_resolve(0.02)
    assert decision.outcome == "unresolved" and 0 < more < 1000
    resolves = decision.comparison.resolvable
    assert decision.comparison.ratio - 1 < 0.02  # the difference seen is below the threshold: the threshold is asked
    assert decision.verdict == (
        f"not resolved after 8 runs per runner: these runs resolve {resolves:.1%}, so a smaller difference cannot be "
        f"told from noise here; about {more} more runs per runner would tell a 2.0% difference, fewer on a quieter host"
    )

    def half_width(runs: int) -> float:
        level = plan.level(plan.max_runs)
        return scipy_stats.t.ppf(1 - level / 2, 2 * runs - 2) * decision.spread * math.sqrt(2 / runs)

    assert half_width(8 + more) <= math.log(1.02) < half_width(8 + more - 1)
    assert decision.runs_to_resolve(1.0) == 0 and decision.runs_to_resolve(0.01) > more


def test_a_looks_comparison_is_judged_at_the_looks_level():
    # p=0.005 passes ALPHA but not a look's share of it: no significant difference, not "below the minimum effect".
    c = stats.Comparison("a", "b", 5, 5, 1.10, 0.99, 1.22, p_value=0.005, resolvable=0.11, alpha=0.0013)
    assert "p=0.005; these runs resolve 11.0%" in c.verdict


def test_a_plan_needs_a_verdicts_minimum_of_runs():
    with pytest.raises(ValueError, match="min_runs <= max_runs"):
        sequential.SequentialPlan(min_runs=2)
    with pytest.raises(ValueError, match="min_runs <= max_runs"):
        sequential.SequentialPlan(min_runs=6, max_runs=5)
    with pytest.raises(ValueError, match="at least one run"):
        sequential.look(sequential.SequentialPlan(), [], [1.0], "a", "b")


def test_futility_ends_a_a_runs_that_no_budget_could_settle_at_the_fixed_designs_cost():
    # Runs that vary 12% cannot state equivalence within 2% in 20 runs: without futility A/A ran all 20 of them.
    rng = np.random.default_rng(11)
    a, b = (run_medians(rng, PAIRS // 4, 0.004, 0.12) for _ in range(2))
    outcome, runs, _, _ = sequential.simulate(sequential.SequentialPlan(), a, b)
    assert np.median(runs) == sequential.FUTILITY_RUNS and np.mean(outcome == "different") <= stats.ALPHA * 1.5
    assert set(outcome) <= {"different", "unresolved"}
