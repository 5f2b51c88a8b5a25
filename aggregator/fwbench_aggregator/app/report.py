"""Report: tables, plots, verdicts and the manifest from a results store alone; no runner is needed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..analyse.results import Analysis, analysed
from ..present.report import write_report
from ..store.health import Damage
from ..store.results_store import ResultStore
from ..store.schema import PARITY_FRAME, SERVE_CAPACITY_FRAME
from ..store.selection import Selection, SelectionError
from .errors import UsageError


@dataclass(frozen=True)
class ReportResult:
    analysis: Analysis
    path: Path  # report.html
    left_out: list[Damage] = field(default_factory=list)  # the store's unreadable files: their entries are left out


def selection_of(compare: Optional[str], where: Sequence[str]) -> Selection:
    """--compare and --where as a Selection; a UsageError naming the option where one is malformed."""
    try:
        return Selection.parse(compare or "", where)
    except SelectionError as exc:
        raise UsageError(str(exc), exc.option) from None


def selected_frames(results_store: ResultStore, names: Sequence[str], selection: Selection) -> dict:
    """The store's frames `names`, its runs' frames less the runs `selection` leaves out."""
    frames = {name: results_store.load(name) for name in names}
    try:
        return selection.frames(frames, results_store.configs() if selection.compare else None)
    except SelectionError as exc:
        raise UsageError(str(exc), exc.option) from None


def store_report(results_store: ResultStore, out: Path, latency_budget_ms: Optional[float] = None,
                 not_run: Sequence[str] = (), selection: Selection = Selection()) -> ReportResult:
    """The analysis of everything readable the store holds (runs, noise floors, max-batch searches, FLOP counts), or
    of the runs `selection` chooses, computed once, and the report written from it into `out`, naming the unreadable
    files it left out and the points a sweep's time budget left without runs (`not_run`: the store cannot know them)."""
    left_out = [d for d in results_store.damaged() if d.key]  # a damaged store.json leaves nothing out
    frames = selected_frames(results_store, ("summary", "steps", "calibration", "max_batch", "model_facts", PARITY_FRAME,
                                             SERVE_CAPACITY_FRAME), selection)
    summary = frames["summary"]
    analysis = analysed(summary, frames["steps"], frames["calibration"], frames["max_batch"], frames["model_facts"],
                        latency_budget_ms, parity=frames[PARITY_FRAME], capacities=frames[SERVE_CAPACITY_FRAME])
    manifests = {key: results_store.manifest(key) for key in sorted(results_store.keys())}
    return ReportResult(analysis, write_report(analysis, summary, manifests, out, left_out, not_run), left_out)


def report(store: Path, out: Optional[Path] = None, latency_budget_ms: Optional[float] = None,
           selection: Selection = Selection()) -> ReportResult:
    results_store = ResultStore(store)
    if not results_store.run_keys():
        damaged = results_store.damaged()
        unreadable = f"; {len(damaged)} of its files are damaged (fwbench store check lists them)" if damaged else ""
        raise UsageError(f"{store} holds no readable runs{unreadable}", "--store")
    return store_report(results_store, out or store / "report", latency_budget_ms, selection=selection)
