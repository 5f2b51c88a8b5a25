"""Where a run executes: the one interface of every place a run can execute (venues.py holds the five, and chooses
among them)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator

from .run_path import RunEvent
from .runs import RunConfig


class Venue(ABC):
    """A place a run executes: the runner's framework thread, or worker processes of one kind. A venue may keep
    something between runs (a worker process, a build) so that its next run starts warm; `release` ends it, so that
    none of it holds memory beside a run elsewhere."""

    @abstractmethod
    def stream(self, config: RunConfig, total: int, cancelled: Callable[[], bool]) -> Iterator[RunEvent]:
        """The run's events as it executes here (`total`: its progress's total). `cancelled`, or a caller that stops
        listening, stops it between steps; it returns or raises only once the run has stopped and its device is
        free."""

    @abstractmethod
    def release(self) -> None:
        """End what this venue keeps for a next run. What a run is using meanwhile is left to it (a worker process),
        or released once that run ends (the framework thread's build)."""
