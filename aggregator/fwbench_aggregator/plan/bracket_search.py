"""The highest value that passes a probe, by one procedure for every runner: the largest batch that fits in device
memory (max-batch) and the highest offered load that meets a latency budget (serve-capacity)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

Value = TypeVar("Value", int, float)


def highest_passing(
    passes: Callable[[Value], bool],
    start: Value,
    limit: Value,
    between: Callable[[Value, Value], Value | None],
    tried: dict[Value, bool],
) -> Value | None:
    """Doubling from `start` until a value fails (or `limit` is reached), then bisection at `between(good, bad)`, the
    last value that passed and the first that failed, until it gives None or a value not strictly between them.
    Every probe's answer lands in `tried`, and no value is probed twice. None when even `start` fails."""

    def probe(value: Value) -> bool:
        if value not in tried:
            tried[value] = passes(value)
        return tried[value]

    if not probe(start):
        return None
    good, bad = start, None
    while bad is None:
        candidate = min(good * 2, limit)
        if candidate == good:
            return good  # the limit passes: the search stops there, not at the device's or the runner's edge
        if probe(candidate):
            good = candidate
        else:
            bad = candidate
    while (candidate := between(good, bad)) is not None and good < candidate < bad:
        if probe(candidate):
            good = candidate
        else:
            bad = candidate
    return good


@dataclass
class BatchSearch:
    """The largest batch that fits, exactly: bisection down to neighbouring batches. `fits(batch)` runs one step."""

    fits: Callable[[int], bool]
    start: int = 1
    limit: int = 65536
    tried: dict[int, bool] = field(default_factory=dict)

    def largest(self) -> int | None:
        """The largest batch that fits, or None when even `start` does not."""
        return highest_passing(self.fits, self.start, self.limit, lambda good, bad: (good + bad) // 2, self.tried)


@dataclass
class RateSearch:
    """The highest rate that meets the budget, bisected on a log scale until the last rate that met it and the first
    that missed are within `resolution` of each other (0.1: the answer is within 10% of the true edge, below it).
    `meets(rate)` runs a probe."""

    meets: Callable[[float], bool]
    start: float
    limit: float
    resolution: float = 0.1
    tried: dict[float, bool] = field(default_factory=dict)

    def _between(self, good: float, bad: float) -> float | None:
        if bad / good <= 1 + self.resolution:
            return None
        # Four significant digits: a load people can read and type again ("server 141.4 qps").
        return float(f"{math.sqrt(good * bad):.4g}")

    def highest(self) -> float | None:
        """The highest rate tried that met the budget, or None when even `start` missed it."""
        return highest_passing(self.meets, self.start, self.limit, self._between, self.tried)
