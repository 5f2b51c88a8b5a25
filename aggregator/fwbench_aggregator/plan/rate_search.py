"""The highest offered load that meets a latency budget: the same procedure for every runner (serve-capacity), as
batch_search.py is for the largest batch that fits."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class RateSearch:
    """Doubling from `start` until a rate misses the budget (or `limit` is reached), then bisection on a log scale
    between the last rate that met it and the first that missed, until they are within `resolution` of each other
    (0.1: the answer is within 10% of the true edge, below it). `meets(rate)` runs a probe."""

    meets: Callable[[float], bool]
    start: float
    limit: float
    resolution: float = 0.1
    tried: dict[float, bool] = field(default_factory=dict)

    def _meets(self, rate: float) -> bool:
        if rate not in self.tried:
            self.tried[rate] = self.meets(rate)
        return self.tried[rate]

    def highest(self) -> float | None:
        """The highest rate tried that met the budget, or None when even `start` missed it."""
        if not self._meets(self.start):
            return None
        good, bad = self.start, None
        while bad is None:
            candidate = min(good * 2, self.limit)
            if candidate == good:
                return good  # the limit meets the budget: the search stops there, not at the runner's edge
            if self._meets(candidate):
                good = candidate
            else:
                bad = candidate
        while bad / good > 1 + self.resolution:
            # Four significant digits: a load people can read and type again ("server 141.4 qps").
            middle = float(f"{math.sqrt(good * bad):.4g}")
            if not good < middle < bad:
                break
            if self._meets(middle):
                good = middle
            else:
                bad = middle
        return good
