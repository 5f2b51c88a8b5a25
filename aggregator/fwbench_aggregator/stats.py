"""Statistics over measured step times: per framework, and whether a difference between two is real."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
# A difference is called real only when the Mann-Whitney U test rejects "same
# distribution" at this level AND the bootstrap interval of the ratio of
# medians excludes 1. The strict level keeps false alarms (same code, two
# runs) to about 1 in 100 comparisons.
ALPHA = 0.01
# Nor is a difference whose interval reaches below this: two runs of the same
# code on one machine differ by up to about 1% (clocks, caches, placement), and
# such a shift is real but says nothing about the frameworks.
MIN_EFFECT = 0.02
BOOTSTRAP_RESAMPLES = 4000
MIN_SAMPLES = 3


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


@dataclass(frozen=True)
class Comparison:
    faster: str
    slower: str
    ratio: float  # slower median over faster median: 1.12 means the slower one's steps take 12% longer
    ci_low: float
    ci_high: float
    p_value: float
    significant: bool

    @property
    def verdict(self) -> str:
        if not self.significant:
            return f"no significant difference (ratio {self.ratio:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}], p={self.p_value:.2g})"
        pct = lambda r: f"{(r - 1) * 100:.0f}%"  # noqa: E731
        return f"{self.faster} faster by {pct(self.ratio)} [{pct(self.ci_low)}, {pct(self.ci_high)}]"


def _median_ratio(slow, fast, axis=-1):
    return np.median(slow, axis=axis) / np.median(fast, axis=axis)


def compare(
    name_a: str,
    times_a: Sequence[float],
    name_b: str,
    times_b: Sequence[float],
    seed: int = 0,
    min_effect: float = MIN_EFFECT,
) -> Comparison:
    """Ratio of medians (slower over faster) with a bootstrap confidence interval, and a Mann-Whitney U test."""
    a, b = np.asarray(times_a, dtype=float), np.asarray(times_b, dtype=float)
    if min(a.size, b.size) < MIN_SAMPLES:
        raise ValueError(f"comparing needs at least {MIN_SAMPLES} measured steps per side; got {a.size} and {b.size}")
    (fast_name, fast), (slow_name, slow) = sorted(((name_a, a), (name_b, b)), key=lambda item: np.median(item[1]))
    interval = stats.bootstrap(
        (slow, fast),
        _median_ratio,
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    ).confidence_interval
    p_value = float(stats.mannwhitneyu(slow, fast, alternative="two-sided").pvalue)
    ratio = float(_median_ratio(slow, fast))
    significant = p_value < ALPHA and interval.low > 1.0 + min_effect
    return Comparison(fast_name, slow_name, ratio, float(interval.low), float(interval.high), p_value, significant)
