"""A search run on each runner in turn (max-batch, serve-capacity): the runners started or reached, each checked
first, then searched one after the other (they may share a device), a runner's failure named and the others'
searches kept."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..base.progress import Progress
from ..plan.spec import StartupSettings
from ..run import wire
from ..run.client import RunnerFailure
from ..run.connection import Transport
from . import preflight
from .runners import RunnerChoice, runners_for

Found = TypeVar("Found")
# search(runner name, address, transport, progress task) -> what the search found on that runner
Search = Callable[[str, str, Transport, object], Found]


@dataclass
class Searched(Generic[Found]):
    found: list[Found] = field(default_factory=list)  # each searched runner's, in the runners' order
    failures: list[RunnerFailure] = field(default_factory=list)


def search_each_runner(
    runners: RunnerChoice,
    first: wire.Request,
    search: Search,
    progress: Progress = Progress(),
    settings: StartupSettings = StartupSettings(),
) -> Searched:
    """`search` on every runner that is reached and accepts `first` (the search's first request), under a progress
    task of its own; a RunnerFailure it raises ends that runner's search only."""
    searched = Searched()
    with runners_for(runners, progress, settings) as found:
        searched.failures += found.failures
        _, refused = preflight.checked(
            found.endpoints, found.transport, {name: first for name in found.endpoints}, "the search"
        )
        searched.failures += refused
        for name, address in found.endpoints.items():
            if name in {f.runner for f in refused}:
                continue
            task = progress.add_task(f"{name}: searching")
            try:
                searched.found.append(search(name, address, found.transport, task))
            except RunnerFailure as failure:
                searched.failures.append(failure)
            finally:
                progress.remove_task(task)
    return searched
