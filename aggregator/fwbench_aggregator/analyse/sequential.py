"""Sequential repetitions: run in rounds (one run per runner each), look at the evidence after every round, and stop
as soon as the verdict is settled or the budget is spent.

Looking after every round and stopping at p < ALPHA would call a difference between identical runners far more
often than ALPHA says: each look is another chance for the noise to cross. So the looks share ALPHA between them,
a group-sequential design with an alpha-spending function (Lan & DeMets 1983, Biometrika 70:659): by the look
with n of the plan's max_runs runs per runner (information fraction t = n / max_runs) at most alpha(t) of the
level is spent, whatever happens later. The spending function is Lan & DeMets' Pocock type,
alpha(t) = ALPHA ln(1 + (e - 1) t). The O'Brien-Fleming type would keep the last look's level near ALPHA, but it
spends almost nothing early (3e-11 at 3 runs of 20, 5e-5 at 8): a 50% difference between runs that vary by 12%
then takes a median 8 runs, more than the fixed design's 6, which defeats the point of looking. The Pocock type
spends a quarter of ALPHA at the first look (5 runs for that difference) and pays at the last, whose level is
0.17% instead of 1%, yet 20 runs a side at 0.17% resolve a difference 40% smaller than 6 runs at 1% do.

The share of each look becomes a critical value by the recursive integration of Armitage, McPherson & Rowe (1969)
over the standard normal score process, computed once per plan. Each look then applies its nominal level (the
two-sided tail of its critical value) to the same t-test on log per-run medians that stats.compare makes (Welch's, or
the paired test by round where every run has its round's partner; a round's log ratio is one increment of the score):
the significance-level approach to group sequential t-tests (Jennison & Turnbull, Group Sequential Methods with
Applications to Clinical Trials, 2000). The interval reported at a look is the Welch interval at that look's
level: a repeated confidence interval (ibid., chapter 9), which covers the true ratio at every look at once with
probability 1 - ALPHA (exactly for a known spread, closely for t-tests on a few runs, as the simulations in
tests/test_sequential.py show), so it stays honest whichever look the procedure stops at. Both verdicts read it
(Jennison & Turnbull 1993, Biometrics 49:31, equivalence by repeated confidence intervals): a difference when it
excludes no difference and the ratio reaches the threshold (stats.compare's rule), equivalence when it lies
inside +-threshold (the minimum effect or the noise floor; two one-sided tests at each look's level). Either
wrong verdict needs an interval that misses the truth, so together they stay below ALPHA.

A third stop needs no share of ALPHA since it calls nothing: runs so noisy that even the whole budget at their
spread would not resolve a twofold difference (stats.TOO_NOISY) stop at once as unresolved.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..plan.study import DEFAULT_MAX_REPETITIONS
from . import stats
from .spending import critical_values

DEFAULT_MAX_RUNS = DEFAULT_MAX_REPETITIONS
# Futility: stop unresolved once the whole budget, at the spread seen so far, could neither state equivalence (even
# for no difference) nor resolve FUTILITY times the difference seen so far, judged from FUTILITY_RUNS runs (the fixed
# design's) on: more runs would most likely end unresolved too. It calls nothing, so it spends none of ALPHA; it
# costs a little power (tests/test_sequential.py shows how little).
FUTILITY = 2.0
FUTILITY_RUNS = 6
# A paired design's looks share this much of alpha. Its t-tests have one degree of freedom per round, half Welch's, and
# at the first looks so few that the significance-level approach spends more than its share: 1.08-1.10% of whole A/A
# procedures called a difference at the full alpha (3 x 20000 simulated, tests/test_paired_rounds.py), 0.94-0.98% at
# 85% of it.
PAIRED_SHARE = 0.85


@dataclass(frozen=True)
class SequentialPlan:
    """When to look and what may be called: after every round from min_runs to max_runs runs per runner, or only at
    `looks` (runs per runner, the last max_runs); spending by spent(), with `spending_gamma` as its gamma."""

    min_runs: int = stats.MIN_REPETITIONS
    max_runs: int = DEFAULT_MAX_RUNS
    alpha: float = stats.ALPHA
    min_effect: float = stats.MIN_EFFECT
    noise_floor: float = math.nan
    looks: tuple[int, ...] = ()
    spending_gamma: float | None = None

    def __post_init__(self) -> None:
        if not stats.MIN_REPETITIONS <= self.min_runs <= self.max_runs:
            raise ValueError(
                f"a sequential plan needs {stats.MIN_REPETITIONS} <= min_runs <= max_runs; "
                f"got {self.min_runs} and {self.max_runs}"
            )
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must lie between 0 and 1; got {self.alpha}")
        if self.looks and (
            list(self.looks) != sorted(set(self.looks))
            or self.looks[0] < self.min_runs
            or self.looks[-1] != self.max_runs
        ):
            raise ValueError(
                f"looks must rise from min_runs ({self.min_runs}) or more to max_runs ({self.max_runs}); "
                f"got {list(self.looks)}"
            )

    @property
    def schedule(self) -> tuple[int, ...]:
        """The runs per runner at which the plan looks."""
        return self.looks or tuple(range(self.min_runs, self.max_runs + 1))

    @property
    def threshold(self) -> float:
        """The smallest difference called real, and the margin equivalence is stated within (as Comparison's)."""
        return max(self.min_effect, 0.0 if math.isnan(self.noise_floor) else self.noise_floor)

    def level(self, runs: int, paired: bool = False) -> float:
        """The nominal two-sided level of the last look at or before `runs` runs per runner (the first look's before
        it, the last look's beyond max_runs); a paired design's looks share PAIRED_SHARE of alpha."""
        from scipy import special

        schedule = self.schedule
        critical = critical_values(schedule, self.alpha * (PAIRED_SHARE if paired else 1.0), self.spending_gamma)
        return float(2 * special.ndtr(-critical[max(bisect.bisect_right(schedule, runs) - 1, 0)]))

    def looks_at(self, runs: int) -> bool:
        """Whether the plan looks after `runs` runs per runner: at a planned look, or at any round past the budget."""
        return runs in self.schedule or runs > self.max_runs


# Process blocks look twice, at half their budget and at its end (block_looks; by default 8 blocks, so at 4 and 8), and
# spend little of alpha at the first look (Hwang, Shih & DeCani's gamma -4). Simulated on the real blocks of three
# sittings together (studies/spending_study.py --paired, 30 configurations, 300,000 procedures a variant), looks at
# 4 and 8 called 0.88% of A/A procedures different and resolved a median 3.8% where they stopped (8.0 blocks); looks
# after every block from 3 to 20 called 0.85% and resolved 6.4% (11.0 blocks): every look costs width, and a drifting
# host settles few A/A comparisons early. A large difference still stops at the first look. The Pocock type called
# 1.05% at 4 and 8. Rounds keep the Pocock type after every round, which held its level on their runs
# (studies/evidence.md).
DEFAULT_MAX_BLOCKS = 8
BLOCKS_SPENDING_GAMMA = -4.0


def default_budget(blocks: bool) -> int:
    """A sequential design's budget where none was asked for: DEFAULT_MAX_BLOCKS blocks, or DEFAULT_MAX_RUNS runs in
    rounds."""
    return DEFAULT_MAX_BLOCKS if blocks else DEFAULT_MAX_RUNS


def block_looks(budget: int) -> tuple[int, ...]:
    """Where a sequential design in process blocks looks: at half its budget of blocks (where that is at least
    stats.MIN_REPETITIONS) and at its end."""
    half = budget // 2
    return (half, budget) if half >= stats.MIN_REPETITIONS else (budget,)


def plan_for(
    budget: int,
    paired_blocks: bool,
    min_effect: float = stats.MIN_EFFECT,
    noise_floor: float = math.nan,
    looks: tuple[int, ...] | None = None,
) -> SequentialPlan:
    """The sequential plan evidence made under a budget of `budget` units (max_repetitions) is judged by: blocks
    judged paired at block_looks, spending by BLOCKS_SPENDING_GAMMA; runs in rounds after every round from
    stats.MIN_REPETITIONS, spending by the Pocock type. `looks` are those the evidence was made under, as the store
    recorded them (() after every unit, as blocks before store format 8 looked); None is today's rule."""
    budget = max(budget, stats.MIN_REPETITIONS)
    if looks is None:
        looks = block_looks(budget) if paired_blocks else ()
    elif looks and (looks[0] < stats.MIN_REPETITIONS or looks[-1] != budget or list(looks) != sorted(set(looks))):
        looks = ()  # not a schedule this budget could have looked at (a damaged store): after every unit
    return SequentialPlan(
        max_runs=budget,
        min_effect=min_effect,
        noise_floor=noise_floor,
        looks=looks,
        spending_gamma=BLOCKS_SPENDING_GAMMA if paired_blocks else None,
    )


class _Look(NamedTuple):
    """One look over many pairs at once, as arrays: b's mean log over a's, the half-width of its interval at the
    look's level, Welch's p-value, the pooled run spread, and the outcome."""

    difference: np.ndarray
    half_width: np.ndarray
    p_value: np.ndarray
    spread: np.ndarray
    outcome: np.ndarray


def _welch(log_a: np.ndarray, log_b: np.ndarray) -> tuple[np.ndarray, ...]:
    """Welch's test on the last axis, written out to run over many pairs: b's mean log over a's, its standard error,
    degrees of freedom, and the pooled run spread."""
    na, nb = log_a.shape[-1], log_b.shape[-1]
    var_a, var_b = log_a.var(-1, ddof=1), log_b.var(-1, ddof=1)
    se_a, se_b = var_a / na, var_b / nb
    still = se_a + se_b == 0.0
    df = np.where(still, 1.0, (se_a + se_b) ** 2 / np.where(still, 1.0, se_a**2 / (na - 1) + se_b**2 / (nb - 1)))
    return log_b.mean(-1) - log_a.mean(-1), np.sqrt(se_a + se_b), df, np.sqrt((var_a + var_b) / 2)


def _paired(log_a: np.ndarray, log_b: np.ndarray) -> tuple[np.ndarray, ...]:
    """The paired test by round on the last axis (the i-th of each ran in one round), in _welch's terms; its spread is
    stats.paired_spread's."""
    within = log_b - log_a
    rounds = within.shape[-1]
    var = within.var(-1, ddof=1)
    return within.mean(-1), np.sqrt(var / rounds), np.full(var.shape, rounds - 1.0), np.sqrt(var / 2)


def _judge(plan: SequentialPlan, log_a: np.ndarray, log_b: np.ndarray, paired: bool = False) -> _Look:
    """The t-test on the last axis (the same as stats.compare's: Welch's, or with `paired` the paired test by round)
    and the stopping rule, at the look with the smaller side's number of runs."""
    from scipy import special

    runs = min(log_a.shape[-1], log_b.shape[-1])
    level = plan.level(runs, paired)
    difference, se, df, spread = (_paired if paired else _welch)(log_a, log_b)
    still = se == 0.0
    # Identical runs on each side (a timer's resolution, a fake runner): nothing varies to test, as in stats.compare.
    safe_se = np.where(still, 1.0, se)
    p_value = np.where(
        still, np.where(difference == 0.0, 1.0, 0.0), 2 * special.stdtr(df, -np.abs(difference) / safe_se)
    )
    half_width = np.where(still, 0.0, special.stdtrit(df, 1 - level / 2) * se)
    margin = math.log1p(plan.threshold)
    different = (p_value < level) & (np.abs(difference) >= margin)
    equivalent = np.abs(difference) + half_width < margin
    # Projected to the whole budget at the last look's level, these runs' spread would not resolve TOO_NOISY; or
    # (futility) it could state equivalence for no difference at all, nor resolve twice the difference seen so far:
    # more runs would most likely end unresolved as well.
    projected = _half_width(spread, plan.max_runs, plan.level(plan.max_runs, paired), paired)
    hopeless = (projected > math.log1p(stats.TOO_NOISY)) | (
        (projected >= margin) & (projected > FUTILITY * np.abs(difference)) & (runs >= FUTILITY_RUNS)
    )
    outcome = (
        np.select(
            [different, equivalent, (runs >= plan.max_runs) | hopeless],
            ["different", "equivalent", "unresolved"],
            "continue",
        )
        if plan.looks_at(runs)
        else np.full(difference.shape, "continue")
    )
    return _Look(difference, half_width, p_value, spread, outcome)


def _half_width(spread: np.ndarray | float, runs: int, level: float, paired: bool = False) -> np.ndarray | float:
    """The half-width of an interval on the log ratio with `runs` runs a side of this spread each: Welch's (as many
    degrees of freedom as two runners' runs give), or the paired test's (one per round)."""
    from scipy import special

    df = runs - 1 if paired else 2 * runs - 2
    return special.stdtrit(df, 1 - level / 2) * spread * math.sqrt(2 / runs)


@dataclass(frozen=True)
class Decision:
    """What one look says: stop or continue, and the comparison at this look (its interval the look's)."""

    outcome: str  # "different", "equivalent", "unresolved" (budget spent, or too noisy to spend it) or "continue"
    comparison: stats.Comparison
    runs: int  # per runner, the smaller side's
    spread: float  # the runs' pooled spread, as stats.run_spread's (stats.paired_spread's where paired)
    plan: SequentialPlan
    paired: bool = False  # judged by round or block (the paired test), as comparison.paired

    @property
    def unit(self) -> str:
        return self.comparison.unit

    @property
    def stop(self) -> bool:
        return self.outcome != "continue"

    def runs_to_resolve(self, target: float) -> int | float:
        """About how many more runs per runner would resolve a difference of `target` (0.05 for 5%) at this spread
        and the last look's level: the t-based half-width formula solved for the runs; inf with no spread measured."""
        margin = math.log1p(target)
        if math.isnan(self.spread) or margin <= 0.0:  # no spread measured, or no difference to resolve
            return math.inf
        level = self.plan.level(self.plan.max_runs, self.paired)
        width = functools.partial(_half_width, self.spread, level=level, paired=self.paired)
        low = max(self.runs, 2)
        # The half-width at `low` over-estimates every later one, so `high` runs are surely enough.
        high = max(low, math.ceil(2 * (width(low) / math.sqrt(2 / low) / margin) ** 2))
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if width(middle) <= margin else (middle + 1, high)
        return max(high - self.runs, 0)

    @property
    def verdict(self) -> str:
        c, runs = self.comparison, f"{self.runs} {self.unit}{'s' if self.runs != 1 else ''}"
        per = " per runner" if self.unit == "run" else ""  # a block holds every runner's windows
        if self.outcome == "different":
            return f"{c.faster} {stats.faster_text(c.ratio, c.ci_low, c.ci_high)}"
        if self.outcome == "equivalent":
            return (
                f"{c.faster} and {c.slower} equivalent within {c.threshold:.1%} "
                f"[{c.slower} {c.ci_low - 1:+.1%} to {c.ci_high - 1:+.1%}]"
            )
        if self.outcome == "continue":
            so_far = f"undecided after {runs}{per}"
            if math.isnan(c.resolvable):
                return so_far
            return f"{so_far}: " + (
                "too noisy so far"
                if c.resolvable > stats.TOO_NOISY
                else f"these {self.unit}s resolve {c.resolvable:.1%}"
            )
        if c.resolvable > stats.TOO_NOISY:
            return stats.too_noisy_text(self.spread)
        # What the runs can tell, then what would tell more: whether the difference seen is real where it reaches the
        # threshold (the question a reader has), else the threshold itself; a quieter host needs fewer.
        seen = c.ratio - 1.0
        target = seen if seen > c.threshold else c.threshold
        more = self.runs_to_resolve(target)
        told = (
            f"not resolved after {runs}{per}: these {self.unit}s resolve {c.resolvable:.1%}, so a smaller difference "
            "cannot be told from noise here"
        )
        if not 0 < more < math.inf:  # none more: these runs resolve the target already, and the difference lies at it
            return told
        what = f"whether the {seen:.1%} seen is real" if target == seen else f"a {target:.1%} difference"
        return f"{told}; about {more} more {self.unit}s{per} would tell {what}, fewer on a quieter host"


def look(
    plan: SequentialPlan,
    run_medians_a: stats.Values,
    run_medians_b: stats.Values,
    name_a: str,
    name_b: str,
    paired: bool = False,
    unit: str = "run",
) -> Decision:
    """The look after a round: whether these runs settle the verdict, by the plan's stopping rule; with `paired`
    (the i-th run of each ran in the same round) judged by round."""
    a, b = np.asarray(run_medians_a, dtype=float), np.asarray(run_medians_b, dtype=float)
    runs = min(a.size, b.size)
    if runs < 1:
        raise ValueError(f"a look needs at least one run per runner; got {a.size} and {b.size}")
    if paired and a.size != b.size:
        raise ValueError(f"paired runs come one per runner per round; got {a.size} and {b.size}")
    log_a, log_b = np.log(a)[None, :], np.log(b)[None, :]
    if runs < plan.min_runs:
        no_test = (log_b.mean() - log_a.mean(), math.nan, math.nan, math.nan, "continue")
        judged = _Look(*(np.array([value]) for value in no_test))
    else:
        judged = _judge(plan, log_a, log_b, paired)
    difference, half_width, p_value, spread = (float(value[0]) for value in judged[:4])
    outcome = str(judged.outcome[0])
    # As stats.compare: the slower over the faster, a first where they tie.
    (faster, n_faster), (slower, n_slower) = ((name_a, a.size), (name_b, b.size))[:: 1 if difference >= 0 else -1]
    size = abs(difference)
    comparison = stats.Comparison(
        faster,
        slower,
        n_faster,
        n_slower,
        math.exp(size),
        ci_low=math.exp(size - half_width),
        ci_high=math.exp(size + half_width),
        p_value=p_value,
        resolvable=math.expm1(half_width),
        noise_floor=plan.noise_floor,
        min_effect=plan.min_effect,
        significant=outcome == "different",
        alpha=plan.level(runs, paired),
        spread=spread,
        paired=paired,
        unit=unit,
    )
    return Decision(outcome, comparison, runs, spread, plan, paired)


def simulate(
    plan: SequentialPlan, run_medians_a: np.ndarray, run_medians_b: np.ndarray, paired: bool = False
) -> tuple[np.ndarray, ...]:
    """The whole procedure over many pairs at once, each row a pair's max_runs run medians in the order they ran
    (column i of each in round i where `paired`): per pair, the outcome it stopped with, the runs per runner it took,
    b's ratio over a at that look, and the difference its runs resolve there (Comparison.resolvable). The same rule as
    look(), for the simulations that show what it guarantees (tests/test_sequential.py) and choose the default plan
    (studies/spending_study.py)."""
    log_a, log_b = np.log(np.asarray(run_medians_a, dtype=float)), np.log(np.asarray(run_medians_b, dtype=float))
    outcome = np.full(log_a.shape[0], "continue", dtype=object)
    runs, ratio = np.zeros(log_a.shape[0], dtype=int), np.full(log_a.shape[0], math.nan)
    resolvable = np.full(log_a.shape[0], math.nan)
    for n in plan.schedule:
        going = outcome == "continue"
        judged = _judge(plan, log_a[going, :n], log_b[going, :n], paired)
        outcome[going], runs[going], ratio[going] = judged.outcome, n, np.exp(judged.difference)
        resolvable[going] = np.expm1(judged.half_width)
    return outcome, runs, ratio, resolvable
