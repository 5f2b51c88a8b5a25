"""Warm-up by evidence, for process blocks: how many steps a fresh process of this configuration needed before its
steps ran at the pace the block's later windows kept, and whether a later block warmed up enough.

A block's first window warms its fresh build up until stable (the runner's default rule, at most 50 steps). On a
2-core VM torch's resnet18 inference never met the rule (5 steps within 5%) and warmed up its cap, 50 steps, 7 s of a
20 s block, where its steps ran at their settled pace after a few. What the first block shows sets the later blocks'
warm-up: the step from which its warm-up kept within SETTLED_TOLERANCE of its later windows' pace, doubled, plus
WARMUP_MARGIN_STEPS; each later block checks it, its first window measured within SETTLED_TOLERANCE of its later
windows' median or within their spread, and a block that fails the check returns its runner to the default rule for
the blocks after it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

# A step runs at the settled pace within this much of it; a first window that measured slower than its block's later
# windows by more did not warm up enough. One under-warmed window of 8 moves its block's value (their geometric
# mean) by at most about an eighth of this, 1.2%.
SETTLED_TOLERANCE = 0.10
# Consecutive steps whose median is compared with the pace: one slow step (a scheduler's hiccup) is not unsettled.
SETTLE_RUN = 3
WARMUP_MARGIN_STEPS = 3
# The runner's default rule's cap (fwbench_core.measurement_settings.DEFAULT_WARMUP_CAP_STEPS): the most a learned
# count may be, since more would cost more than the rule.
MAX_LEARNED_STEPS = 50


def settled_after(warmup_s: Sequence[float], pace_s: float, tolerance: float = SETTLED_TOLERANCE) -> int | None:
    """The first warm-up step from which every SETTLE_RUN consecutive steps' median is within `tolerance` of
    `pace_s` (0 where the first steps already were); None where the warm-up ended slower than that."""
    limit = pace_s * (1 + tolerance)
    settled = None
    for start in range(len(warmup_s) - 1, -1, -1):
        if statistics.median(warmup_s[start : start + SETTLE_RUN]) > limit:
            break
        settled = start
    return settled


def learned_warmup_steps(warmup_s: Sequence[float], later_window_medians_s: Sequence[float]) -> tuple[int, int] | None:
    """From a first window's warm-up step times and the medians of its block's later windows (the settled pace): the
    step it settled at (settled_after) and the warm-up steps later blocks' first windows run; None where they show no
    settling (the runner's rule stays)."""
    if not warmup_s or not later_window_medians_s:
        return None
    settled = settled_after(warmup_s, statistics.median(later_window_medians_s))
    if settled is None:
        return None
    return settled, min(MAX_LEARNED_STEPS, 2 * settled + WARMUP_MARGIN_STEPS)


def warmed_enough(first_window_median_s: float, later_window_medians_s: Sequence[float]) -> bool:
    """Whether a block's first window, after its learned warm-up, measured at its later windows' pace: within
    SETTLED_TOLERANCE of their median, or no slower than the slowest of them. A block's windows spread by about the
    tolerance on a 2-core VM (9-10% in the demo), and a first window inside that spread is what the block's own noise
    makes: judged by the median alone, the check sent both runners of a demo back to the rule on noise."""
    if not later_window_medians_s:
        return True
    pace_limit_s = statistics.median(later_window_medians_s) * (1 + SETTLED_TOLERANCE)
    return first_window_median_s <= max(pace_limit_s, max(later_window_medians_s))
