"""The largest batch that fits in device memory: the same procedure for every runner."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class BatchSearch:
    """Doubling from `start` until a batch does not fit (or `limit` is reached), then bisection
    between the last batch that fit and the first that did not. `fits(batch)` runs one step."""

    fits: Callable[[int], bool]
    start: int = 1
    limit: int = 65536
    tried: dict[int, bool] = field(default_factory=dict)

    def _fits(self, batch: int) -> bool:
        if batch not in self.tried:
            self.tried[batch] = self.fits(batch)
        return self.tried[batch]

    def largest(self) -> int | None:
        """The largest batch that fits, or None when even `start` does not."""
        if not self._fits(self.start):
            return None
        good, bad = self.start, None
        while bad is None:
            candidate = min(good * 2, self.limit)
            if candidate == good:
                return good  # the limit fits: the search stops there, not at the device's edge
            if self._fits(candidate):
                good = candidate
            else:
                bad = candidate
        while bad - good > 1:
            middle = (good + bad) // 2
            if self._fits(middle):
                good = middle
            else:
                bad = middle
        return good
