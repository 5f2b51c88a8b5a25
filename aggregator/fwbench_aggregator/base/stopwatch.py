"""Where a command's time went: its phases, each the seconds since the previous one ended, in the order they ran."""

from __future__ import annotations

import time
from collections.abc import Callable


class Stopwatch:
    """Laps named as they end: lap("runners started") holds the seconds since the previous lap (or the start). A name
    lapped again adds to its seconds, keeping its first place."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = clock()
        self.laps_s: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = self._clock()
        self.laps_s[name] = self.laps_s.get(name, 0.0) + now - self._last
        self._last = now

    @property
    def total_s(self) -> float:
        return sum(self.laps_s.values())
