"""Statistics over runs: a runner's figures, and whether a difference between two runners is real.

The unit of evidence is the run (one repetition), not the step. Steps inside one run are tight, but a
run (a process, a moment of the host, a GPU's clock and launch queue) carries an offset of its own:
on an H100, 1-second windows of resnet50 b1 inference vary from 3.0 to 5.0 ms between repetitions
while their steps vary by a few percent. Statistics that pool steps as independent samples call such
offsets differences. So each run is reduced to its median step time, and two runners are compared
on the logarithms of those per-run medians with Welch's t-test: the ratio of geometric means, its
confidence interval, and the smallest difference the runs could resolve. A t-test on a few run values
is exact where the run offsets are log-normal and still honest with three runs a side, where a
bootstrap over runs has too few distinct resamples to give an interval at all.

The paired test by round (`paired`) is the analysis for runs made in pairs, one run of each runner per round: a
host's drift slower than a round moves both runs of a round alike and cancels in their ratio, where Welch's test
counts it as spread; it has half the degrees of freedom, so with little drift and few rounds its interval is the
wider one. Compares keep Welch's test: on the shared 2-core VMs this project runs on, the paired test over the same
real A/A runs was a median 0.99 times as narrow as Welch's on one day and 1.15 times on another (30 comparisons of
fresh runner pairs each), and called one of them different each day: a process carries an offset of its own that no
test within one pair of processes can see, and the narrower the interval, the sooner it is called
(studies/design_aa.py measures each design; studies/evidence.md has its figures).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Per-run values as the callers hold them: a list, or a column of a frame as an array.
Values = Sequence[float] | npt.NDArray[np.floating] | npt.NDArray[np.object_]

CONFIDENCE = 0.99
ALPHA = 1.0 - CONFIDENCE
# Below this many runs a side a verdict is not attempted: with two, the t-test has one or two degrees
# of freedom and cannot call anything short of a several-fold difference.
MIN_REPETITIONS = 3
# Nor is a difference smaller than this called, however tight: two runs of the same code on one
# machine can differ by about 1% (clocks, caches, placement), which says nothing about the frameworks.
MIN_EFFECT = 0.02
# Runs that cannot resolve even a twofold difference (resolvable above this) give no verdict at all: their
# interval, such as [0.000, 8531.503], says only that the host was too noisy.
TOO_NOISY = 1.0


def _scipy_stats():
    """scipy.stats, imported when a test is first computed: it takes about a second to import, which every command
    would otherwise pay at start-up, those that compute nothing included."""
    from scipy import stats

    return stats


def describe(step_times_s: Sequence[float], batch_size: int) -> dict[str, float]:
    times = np.asarray(step_times_s, dtype=float)
    return {
        "steps": int(times.size),
        "mean_step_time_s": float(times.mean()),
        "median_step_time_s": float(np.median(times)),
        "std_step_time_s": float(times.std(ddof=1)) if times.size > 1 else 0.0,
        "p5_step_time_s": float(np.percentile(times, 5)),
        "p95_step_time_s": float(np.percentile(times, 95)),
        "throughput_samples_per_s": float(batch_size * times.size / times.sum()),
    }


def geometric_mean(values: Values) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(values, dtype=float)))))


def run_spread(run_medians_s: Values) -> float:
    """How much a runner's runs differ from one another: the standard deviation of their log medians
    (0.03 is about 3%); NaN with fewer than two runs."""
    logs = np.log(np.asarray(run_medians_s, dtype=float))
    return float(logs.std(ddof=1)) if logs.size > 1 else float("nan")


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:.0f}%"


def faster_text(ratio: float, low: float, high: float) -> str:
    """How much faster, to be read at a glance: "faster by 12% [5%, 19%]" up to twice as fast, "4.3x faster
    [3.2x, 5.8x]" beyond, where percentages such as 329% [215%, 483%] stop meaning much to a reader."""
    if ratio > 2.0:
        return f"{ratio:.1f}x faster [{low:.1f}x, {high:.1f}x]"
    return f"faster by {_pct(ratio)} [{_pct(low)}, {_pct(high)}]"


def too_noisy_text(spread: float) -> str:
    """What to say instead of an interval when the runs resolve nothing short of TOO_NOISY; spread as run_spread's."""
    return f"too noisy to tell: runs varied {math.expm1(spread):.0%}; rerun on a quiet host"


@dataclass(frozen=True)
class Comparison:
    """The slower runner against the faster one, over their per-run median step times."""

    faster: str
    slower: str
    runs_faster: int
    runs_slower: int
    ratio: float  # slower's geometric mean over faster's: 1.12 means the slower one's steps take 12% longer
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_value: float = math.nan
    # The smallest ratio above 1 these runs could have called: (1 + resolvable) is where the interval's
    # lower end clears 1. It shrinks with more runs and grows with the runs' spread.
    resolvable: float = math.nan
    noise_floor: float = math.nan  # measured by calibration for this configuration; NaN where not measured
    min_effect: float = MIN_EFFECT
    significant: bool = False
    # The level the difference was tested at: ALPHA, or a sequential look's share of it (analyse.sequential).
    alpha: float = ALPHA
    spread: float = math.nan  # the runs' pooled spread (the log per-run medians' standard deviation; paired_spread's)
    paired: bool = False  # judged by round or block (the paired test) rather than as unrelated runs (Welch's)
    unit: str = "run"  # what one value is: a run, or a process block of interleaved windows (plan.design)

    @property
    def enough_runs(self) -> bool:
        return min(self.runs_faster, self.runs_slower) >= MIN_REPETITIONS

    @property
    def threshold(self) -> float:
        """The smallest difference this verdict calls real: the minimum effect or the noise floor."""
        return max(self.min_effect, 0.0 if math.isnan(self.noise_floor) else self.noise_floor)

    @property
    def verdict(self) -> str:
        if not self.enough_runs:
            return (
                f"too few repetitions to call (ratio {self.ratio:.3f}; {self.runs_faster} and {self.runs_slower} "
                f"{self.unit}s, need {MIN_REPETITIONS} per runner)"
            )
        if self.significant:
            return f"{self.faster} {faster_text(self.ratio, self.ci_low, self.ci_high)}"
        if self.resolvable > TOO_NOISY and not math.isnan(self.spread):
            # An interval such as [0.000, 8531.503] says nothing a reader can use.
            return too_noisy_text(self.spread)
        interval = f"ratio {self.ratio:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}]"
        if self.p_value < self.alpha:
            below = "the noise floor" if self.threshold > self.min_effect else "the minimum effect"
            return f"no significant difference ({interval}: {_pct(self.ratio)} is below {below}, {self.threshold:.1%})"
        return (
            f"no significant difference ({interval}, p={self.p_value:.2g}; these {self.unit}s resolve "
            f"{self.resolvable:.1%})"
        )


def compare(
    name_a: str,
    run_medians_a: Values,
    name_b: str,
    run_medians_b: Values,
    min_effect: float = MIN_EFFECT,
    noise_floor: float = math.nan,
    paired: bool = False,
    unit: str = "run",
) -> Comparison:
    """Welch's t-test on the log per-run medians of two runners, or with `paired` (the i-th run of each ran in the
    same round) the paired t-test on their log ratio per round. A difference is called when the interval excludes no
    difference AND the ratio reaches the minimum effect and the noise floor."""
    a, b = np.asarray(run_medians_a, dtype=float), np.asarray(run_medians_b, dtype=float)
    if min(a.size, b.size) < 1:
        raise ValueError(f"comparing needs at least one run per runner; got {a.size} and {b.size}")
    if paired and a.size != b.size:
        raise ValueError(f"paired runs come one per runner per round; got {a.size} and {b.size}")
    (fast_name, fast), (slow_name, slow) = sorted(((name_a, a), (name_b, b)), key=lambda item: geometric_mean(item[1]))
    ratio = geometric_mean(slow) / geometric_mean(fast)
    partial = Comparison(
        fast_name, slow_name, fast.size, slow.size, ratio, noise_floor=noise_floor, min_effect=min_effect, unit=unit
    )
    if not partial.enough_runs:
        return partial
    log_slow, log_fast = np.log(slow), np.log(fast)
    difference = float(log_slow.mean() - log_fast.mean())
    # The paired test's values, one log ratio a round; unpaired sides may differ in size.
    within = log_slow - log_fast if paired else np.array([])
    if within.var() == 0.0 if paired else log_slow.var() == 0.0 and log_fast.var() == 0.0:
        # Identical runs on each side, or one ratio in every round (a timer's resolution, a fake runner): nothing
        # varies to test.
        p_value, half_width = (1.0 if difference == 0.0 else 0.0), 0.0
    else:
        test = (
            _scipy_stats().ttest_rel(log_slow, log_fast)
            if paired
            else _scipy_stats().ttest_ind(log_slow, log_fast, equal_var=False)
        )
        interval = test.confidence_interval(CONFIDENCE)
        p_value, half_width = float(test.pvalue), float(interval.high - interval.low) / 2
    significant = p_value < ALPHA and ratio - 1.0 >= partial.threshold
    return Comparison(
        fast_name,
        slow_name,
        fast.size,
        slow.size,
        ratio,
        ci_low=math.exp(difference - half_width),
        ci_high=math.exp(difference + half_width),
        p_value=p_value,
        resolvable=math.exp(half_width) - 1.0,
        noise_floor=noise_floor,
        min_effect=min_effect,
        significant=significant,
        spread=paired_spread(within) if paired else math.sqrt((log_slow.var(ddof=1) + log_fast.var(ddof=1)) / 2),
        paired=paired,
        unit=unit,
    )


def paired_spread(log_ratios: np.ndarray) -> float:
    """The run spread that paired rounds leave, in run_spread's terms: the standard deviation of the rounds' log
    ratios over the square root of 2 (for independent runs it is their spread, as a ratio of two runs has twice a
    run's variance); NaN with fewer than two rounds."""
    return float(log_ratios.std(ddof=1) / math.sqrt(2)) if log_ratios.size > 1 else math.nan


def noise_floor(calibration: Comparison) -> float:
    """The smallest difference a host resolves for a configuration, from an A/A comparison (a runner
    against a second instance of itself): the far end of its interval, as a fraction. A difference
    inside it could be the instances' own offset plus the runs' spread, so no verdict calls it."""
    # The ratio is slower over faster, so the interval's upper end is its far end.
    return calibration.ci_high - 1.0 if calibration.enough_runs else math.nan


@dataclass(frozen=True)
class Interval:
    """A geometric mean over runs and its confidence interval (NaN bounds with fewer than MIN_REPETITIONS runs)."""

    value: float
    low: float
    high: float
    runs: int

    @property
    def resolved(self) -> bool:
        return self.runs >= MIN_REPETITIONS and not math.isnan(self.high)


def geometric_interval(values: Values) -> Interval:
    """The geometric mean of per-run values with its CONFIDENCE interval from a t-interval on their logs:
    the same model of run offsets (log-normal) that compare() tests with."""
    logs = np.log(np.asarray(values, dtype=float))
    centre = float(np.exp(logs.mean()))
    if logs.size < MIN_REPETITIONS:
        return Interval(centre, math.nan, math.nan, int(logs.size))
    half_width = float(_scipy_stats().t.ppf(1 - ALPHA / 2, logs.size - 1) * logs.std(ddof=1) / math.sqrt(logs.size))
    return Interval(centre, centre * math.exp(-half_width), centre * math.exp(half_width), int(logs.size))


@dataclass(frozen=True)
class Trend:
    """How per-run values move with a size: a rank correlation and a log-log slope, each with its p-value."""

    spearman_rho: float
    spearman_p: float
    ratio_per_doubling: float  # 2**slope of log(value) on log2(size): 0.8 means 20% less per doubling
    slope_p: float
    points: int

    @property
    def direction(self) -> str:
        """'falls', 'rises' or 'no significant trend', by the rank correlation at ALPHA."""
        if math.isnan(self.spearman_p) or self.spearman_p >= ALPHA:
            return "no significant trend"
        return "falls" if self.spearman_rho < 0 else "rises"


def trend(sizes: Sequence[float], values: Sequence[float]) -> Trend:
    """Spearman's rank correlation of per-run values against sizes (monotone, no model assumed), and the
    regression of log value on log2 size (how much each doubling changes it). Every run is one point."""
    x, y = np.asarray(sizes, dtype=float), np.asarray(values, dtype=float)
    if np.unique(x).size < 2 or np.unique(y).size < 2:
        return Trend(math.nan, math.nan, math.nan, math.nan, int(x.size))
    stats = _scipy_stats()
    rank = stats.spearmanr(x, y)
    fit = stats.linregress(np.log2(x), np.log(y))
    # log value = a + slope * log2 size: one doubling multiplies the value by exp(slope).
    return Trend(float(rank.statistic), float(rank.pvalue), math.exp(fit.slope), float(fit.pvalue), int(x.size))
