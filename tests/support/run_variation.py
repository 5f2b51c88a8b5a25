"""A model of how runs really vary, for the statistics' simulations (test_stats.py, test_sequential.py): each run
carries an offset of its own (a process, a moment of the host, a GPU's launch queue) on top of the jitter of its
steps, with the odd slow step (a GC, a page fault) inside it.

The run spreads are the noise regimes measured (docs/verdict.md): GPU-bound configurations whose runs differ by
under 1%, steady CPU runs by about 3% (torch resnet18 infer b2 on 2 cores: per-run medians 15.25, 14.47,
15.21 ms), and launch-bound GPU configurations (resnet50 b1/b4 on an H100, 3.0 to 5.0 ms between runs)
by 12% to 20%.
"""

from __future__ import annotations

import numpy as np

STEPS = 30
# Standard deviation of the log per-run offset: GPU-bound, steady CPU, launch-bound GPU (two levels).
RUN_SPREADS = (0.005, 0.03, 0.12, 0.20)
# Standard deviation of the log step jitter within a run.
STEP_SPREAD = 0.04
# A step is slow with this chance, by a factor drawn uniformly from this range.
SLOW_STEP_CHANCE = 0.05
SLOW_STEP_FACTORS = (1.2, 2.0)


def run_medians(rng, runs: int, median_s: float, run_spread: float, step_spread: float = STEP_SPREAD) -> list[float]:
    """The per-run median step times of `runs` runs: a log-normal offset per run, then log-normal step
    jitter with the odd slow step inside it."""
    medians = []
    for _ in range(runs):
        times = median_s * rng.lognormal(0.0, run_spread) * rng.lognormal(0.0, step_spread, STEPS)
        slow = rng.random(STEPS) < SLOW_STEP_CHANCE
        times[slow] *= rng.uniform(*SLOW_STEP_FACTORS, slow.sum())
        medians.append(float(np.median(times)))
    return medians


def drifting_rounds(
    rng,
    pairs: int,
    rounds: int,
    median_s: float,
    run_spread: float,
    drift_spread: float,
    within_round_spread: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Two runners' per-run medians over `rounds` counterbalanced rounds (A B, B A, ...) on a drifting host, for
    `pairs` comparisons at once (pairs x rounds each): the host's offset walks by `drift_spread` (log) from one round
    to the next and moves both runs of a round alike; the second run of a round sees `within_round_spread` more of it
    than the first; each run has its own offset of `run_spread` besides. Medians only: the steps' jitter is in
    run_medians; here the host's drift is what is modelled."""
    host = np.cumsum(rng.normal(0.0, drift_spread, (pairs, rounds)), axis=1)
    second = rng.normal(0.0, within_round_spread, (pairs, rounds))
    b_second = np.arange(rounds) % 2 == 0  # A B in even rounds, B A in odd ones
    a = host + np.where(b_second, 0.0, second) + rng.normal(0.0, run_spread, (pairs, rounds))
    b = host + np.where(b_second, second, 0.0) + rng.normal(0.0, run_spread, (pairs, rounds))
    return median_s * np.exp(a), median_s * np.exp(b)
