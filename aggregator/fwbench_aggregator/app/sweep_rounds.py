"""A sweep under repetitions auto: each point (plan.study.Configuration.point, the runners compared at one
configuration) runs in counterbalanced rounds, and before its next round the point is looked at by compare's rule
(app.rounds.stop_reason over the same comparison rows every report reads, judged by analyse.sequential): once its
verdict is settled, or the budget makes more runs pointless, the rest of its planned runs are left out.

The grid plans max_repetitions of every point; run.study asks `wanted` before each run. A round is atomic: the
decision for a point's round r is made once, from every run of the point known then (those stored before this sweep
included, so a resumed sweep continues its looks where the stored runs left them), and holds for every runner.

The time budget (time_budget_s, the sweep's wall-clock seconds) is spread over the points: each gets, when it
starts, an equal share of what is left of the budget among the points of its lane (the runs that share a device
and run one after the other) not finished yet, times the lane's parallel workers, so points that finish early leave
their time to the rest. A point whose runs have used its share is stopped ("time budget") before its next round;
one that would start with nothing left is not started. Every run measured stays in the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from ..analyse import stats
from ..analyse.comparison import comparison_rows
from ..analyse.stopping import stop_reason
from ..plan.study import Configuration, Sweep
from ..run.client import RunResult
from ..store import records
from ..store.results_store import ResultStore

Pending = Sequence[tuple[str, Configuration]]


@dataclass
class Point:
    """One point's runs and where its rounds stand."""

    label: str
    runners: set[str]  # those the grid compares here
    pending: int = 0  # planned runs of this sweep not yet run or left out
    lane: Hashable = ""
    stored: list[pd.DataFrame] = field(default_factory=list)  # [summary, steps] of the runs stored before
    results: list[RunResult] = field(default_factory=list)  # this sweep's
    failed: set[str] = field(default_factory=set)  # runners that failed here: left out of its later rounds
    decided: dict[int, bool] = field(default_factory=dict)  # round -> whether it runs
    share_s: float | None = None  # of the time budget, set when it starts
    used_s: float = 0.0
    stopped: str = ""  # why its rounds ended early ("settled", "time budget", ...), "" while going


@dataclass(frozen=True)
class PointOutcome:
    """A point this sweep left unresolved, and why: "time budget", "run budget", "futile" or "one runner left"."""

    label: str
    runs: int  # per runner, the smaller side's (0: not started)
    reason: str
    verdicts: tuple[str, ...]  # each runner's against the fastest at its last look
    share_s: float | None = None


def point_label(c: Configuration) -> str:
    parts = [
        c.model,
        *(f"{k}={v}" for k, v in c.model_options),
        c.mode.value,
        f"b{c.batch_size}",
        c.shape or "",
        c.precision.value,
        c.devices or c.device or "",
        f"{c.nodes} nodes" if c.nodes > 1 else "",
        f"{c.profile.value} profile" if c.profile else "",
    ]
    return " ".join(p for p in parts if p)


class SweepLooks:
    """The looks of one sweep's points (run.study.Looks): thread-safe, since a sweep's lanes run at once."""

    def __init__(
        self,
        sweep: Sweep,
        pending: Pending,
        done_before: Pending,
        results_store: ResultStore,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_runs, self.time_budget_s, self.clock = sweep.max_repetitions, sweep.time_budget_s, clock
        self.lock = threading.Lock()
        self.points: dict[Configuration, Point] = {}
        self.started = clock()
        self.parallel: Mapping[Hashable, int] = {}
        for _key, c in [*done_before, *pending]:
            self.points.setdefault(c.point(), Point(point_label(c), set())).runners.add(c.runner)
        for _, c in pending:
            self.points[c.point()].pending += 1
        self.calibration = results_store.load("calibration")
        self._load_stored(done_before, results_store)

    def _load_stored(self, done_before: Pending, results_store: ResultStore) -> None:
        if not done_before:
            return
        point_of = {key: c.point() for key, c in done_before}
        for index, name in enumerate(("summary", "steps")):
            frame = results_store.load(name, point_of)  # these runs only: the store's catalog finds them
            if frame.empty:
                continue
            for key, own in frame.groupby("run_key", sort=False):
                point = self.points[point_of[key]]
                while len(point.stored) <= index:
                    point.stored.append(pd.DataFrame())
                point.stored[index] = pd.concat([point.stored[index], own], ignore_index=True)
        for key, c in done_before:
            point = self.points[c.point()]
            summary = point.stored[0] if point.stored else pd.DataFrame()
            mine = summary[summary["run_key"] == key] if not summary.empty else summary
            if len(mine) and (mine["status"] != "ok").any():
                point.failed.add(c.runner)  # ran out of memory there: a fact a later round would only repeat

    def start(self, lanes: Mapping[str, Hashable], parallel: Mapping[Hashable, int], pending: Pending) -> None:
        """The lanes the scheduler put each pending run in, and how many workers each lane has; the budget's clock
        starts here."""
        with self.lock:
            self.started, self.parallel = self.clock(), parallel
            for key, c in pending:
                self.points[c.point()].lane = lanes.get(key, "")

    def wanted(self, key: str, c: Configuration) -> bool:
        """Whether this run is still wanted: its point's round c.repetition runs (decided once per round)."""
        with self.lock:
            point = self.points[c.point()]
            if point.stopped or c.runner in point.failed:
                return False
            if c.repetition not in point.decided:
                self._decide(point)
                point.decided[c.repetition] = not point.stopped
            return point.decided[c.repetition]

    def finished(self, key: str, c: Configuration, seconds: float, result: RunResult | None, failed: bool) -> None:
        """A run ran (its result, or failed) or was left out (seconds 0, no result)."""
        with self.lock:
            point = self.points[c.point()]
            point.pending -= 1
            point.used_s += seconds
            if result is not None:
                point.results.append(result)
            if failed:
                point.failed.add(c.runner)

    def _decide(self, point: Point) -> None:
        if self.time_budget_s is not None:
            if point.share_s is None:
                left = [p for p in self.points.values() if p.lane == point.lane and p.pending > 0 and not p.stopped]
                remaining = self.time_budget_s - (self.clock() - self.started)
                point.share_s = max(remaining, 0.0) * self.parallel.get(point.lane, 1) / max(len(left), 1)
            if point.used_s >= point.share_s:
                point.stopped = "time budget"
                return
        alive = point.runners - point.failed
        if len(point.runners) > 1 and len(alive) < 2:
            point.stopped = "one runner left"
            return
        runs = self._runs(point, alive)
        if len(point.runners) == 1:
            # Nothing to compare: the fewest runs a figure over runs needs, as compare takes.
            point.stopped = "settled" if runs >= stats.MIN_REPETITIONS else ""
        elif runs >= stats.MIN_REPETITIONS:
            point.stopped = stop_reason(self._rows(point), runs, self.max_runs)

    @staticmethod
    def _runs(point: Point, runners: set[str]) -> int:
        counts = {runner: 0 for runner in runners}
        for result in point.results:
            counts[result.runner] = counts.get(result.runner, 0) + 1
        if point.stored:
            ok = point.stored[0][point.stored[0]["status"] == "ok"]
            for runner, n in ok["runner"].value_counts().items():
                counts[runner] = counts.get(runner, 0) + int(n)
        return min((counts[runner] for runner in runners), default=0)

    def _rows(self, point: Point) -> pd.DataFrame:
        summary = records.summary_frame("sweep", point.results, [], self.max_runs)
        steps = records.steps_frame("sweep", point.results)
        if point.stored:
            summary = pd.concat([point.stored[0], summary], ignore_index=True)
        if len(point.stored) > 1:
            steps = pd.concat([point.stored[1], steps], ignore_index=True)
        return comparison_rows(summary, steps, self.calibration, stats.MIN_EFFECT)

    def unresolved(self) -> list[PointOutcome]:
        """The points this sweep ran (or meant to) whose verdict it left unsettled, each with why and its last look."""
        out = []
        with self.lock:
            for point in self.points.values():
                if not point.decided and not point.results:
                    continue  # done before this sweep, or never reached (an interrupted sweep)
                alive = point.runners - point.failed
                runs = self._runs(point, alive or point.runners)
                rows = self._rows(point) if point.results or point.stored else pd.DataFrame()
                reason = point.stopped
                if reason in ("", "settled") and len(point.runners) > 1 and len(alive) > 1:
                    reason = stop_reason(rows, runs, self.max_runs) or "run budget"
                if reason in ("", "settled"):
                    continue
                judged = rows[rows["outcome"] != ""] if len(rows) else rows
                verdicts = tuple(f"{r.runner}: {r.verdict}" for r in judged.itertuples())
                out.append(PointOutcome(point.label, runs, reason, verdicts, point.share_s))
        return out


def looks_for(
    sweep: Sweep,
    pending: Pending,
    done_before: Pending,
    results_store: ResultStore,
    runners: Sequence[str] | None = None,
) -> SweepLooks | None:
    """The looks of a sweep under repetitions auto, over the runs of `runners` (default: all); None for a fixed
    number of repetitions."""
    if not sweep.auto:
        return None
    mine = (
        (lambda runs: list(runs))
        if runners is None
        else (lambda runs: [(k, c) for k, c in runs if c.runner in runners])
    )
    return SweepLooks(sweep, mine(pending), mine(done_before), results_store)


def budget_text(outcome: PointOutcome) -> str:
    """Why a point was left unresolved, in words."""
    if outcome.reason == "time budget":
        share = f" (its share, {outcome.share_s:.3g} s)" if outcome.share_s is not None else ""
        return (
            "not started: the time budget was spent"
            if outcome.runs == 0
            else f"stopped after {outcome.runs} run{'s' if outcome.runs != 1 else ''} per runner: the time "
            f"budget{share} was spent"
        )
    return {
        "run budget": f"the run budget (max_repetitions, {outcome.runs} runs per runner) was spent",
        "futile": "at these runs' spread the whole run budget would most likely leave it unresolved",
        "one runner left": "only one runner was left (the others failed here)",
    }.get(outcome.reason, outcome.reason)
