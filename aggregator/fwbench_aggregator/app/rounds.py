"""Repetitions as the evidence needs them (`--repetitions auto`): counterbalanced rounds of one run per runner, a look
after each (analyse.sequential, through the same comparison rows every table reads), and a stop as soon as every
runner's verdict against the fastest is settled, the budget of runs is spent, or the time budget is.

A fixed number of runs is the same loop without the looks."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pandas as pd

from ..analyse import stats
from ..analyse.comparison import comparison_rows
from ..analyse.sequential import block_looks, default_budget
from ..analyse.stopping import stop_reason
from ..base.progress import Progress
from ..run import wire
from ..run.client import RunnerFailure, RunResult
from ..run.connection import Transport
from ..run.execute import run_all
from ..run.gate import Gate
from ..store import records


@dataclass(frozen=True)
class Repetitions:
    """A fixed number of runs (or blocks) per runner, or (fixed None) as many as the verdict needs within the budgets:
    `max_runs`, or where that is None the design's own (in_design)."""

    fixed: int | None = None
    max_runs: int | None = None
    time_budget_s: float | None = None  # the configuration's, over every runner's runs

    def in_design(self, blocks: bool) -> Repetitions:
        """These repetitions with the design's own budget (sequential.default_budget) where none was asked for."""
        if self.max_runs is not None:
            return self
        return replace(self, max_runs=default_budget(blocks))

    @property
    def auto(self) -> bool:
        return self.fixed is None

    @property
    def budget(self) -> int:
        """The most runs per runner (under auto, the budget in_design resolved)."""
        if not self.auto:
            return int(self.fixed)
        if self.max_runs is None:
            raise ValueError("an auto budget depends on the design: resolve it with in_design first")
        return self.max_runs

    def looks(self, blocks: bool) -> tuple[int, ...]:
        """Where the sequential design looks, as every run stores it: in blocks at block_looks of the budget; () in
        rounds (after every round) and for a fixed number, which has no looks."""
        return block_looks(self.budget) if self.auto and blocks else ()


@dataclass
class Rounds:
    results: list[RunResult] = field(default_factory=list)
    failures: list[RunnerFailure] = field(default_factory=list)
    stopped: str = ""  # under auto, why the rounds ended: stop_reason's, "time budget" or "one runner left"


def run_rounds(
    endpoints: dict[str, str],
    requests: dict[str, wire.Request],
    transport: Transport,
    repetitions: Repetitions,
    calibration: pd.DataFrame | None,
    min_effect: float,
    cooldown_s: float = 0.0,
    on_result: Callable[[RunResult], None] = lambda run: None,
    rendezvous_port: int | None = None,
    progress: Progress = Progress(),
    clock: Callable[[], float] = time.monotonic,
    gate: Gate | None = None,
) -> Rounds:
    """The runs of one configuration on every runner: all at once where the number is fixed, else round by round
    until the comparison rows say every verdict is settled, or a budget ends them."""
    rounds = Rounds()
    repetitions = repetitions.in_design(blocks=False)
    if not repetitions.auto or len(endpoints) < 2:
        # Nothing to compare with one runner: the fewest runs a figure over runs needs.
        count = repetitions.budget if not repetitions.auto else stats.MIN_REPETITIONS
        rounds.results, rounds.failures = run_all(
            endpoints, requests, transport, count, cooldown_s, on_result, rendezvous_port, progress, gate=gate
        )
        return rounds
    started = clock()
    alive = dict(endpoints)
    for number in range(repetitions.max_runs):
        runs, failures = run_all(
            alive,
            requests,
            transport,
            1,
            cooldown_s,
            on_result,
            rendezvous_port,
            progress,
            first_repetition=number,
            gate=gate,
        )
        rounds.results += runs
        rounds.failures += failures
        for failure in failures:
            alive.pop(failure.runner, None)
        if len(alive) < 2:
            rounds.stopped = "one runner left"
            return rounds
        summary = records.summary_frame("rounds", rounds.results, [], repetitions.max_runs)
        rows = comparison_rows(summary, records.steps_frame("rounds", rounds.results), calibration, min_effect)
        rounds.stopped = stop_reason(rows, number + 1, repetitions.max_runs)
        if rounds.stopped:
            return rounds
        if repetitions.time_budget_s is not None and clock() - started >= repetitions.time_budget_s:
            rounds.stopped = "time budget"
            return rounds
    rounds.stopped = "run budget"
    return rounds
