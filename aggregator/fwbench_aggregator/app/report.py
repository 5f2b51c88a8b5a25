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
from .errors import UsageError


@dataclass(frozen=True)
class ReportResult:
    analysis: Analysis
    path: Path  # report.html
    left_out: list[Damage] = field(default_factory=list)  # the store's unreadable files: their entries are left out


def store_report(results_store: ResultStore, out: Path, latency_budget_ms: Optional[float] = None,
                 not_run: Sequence[str] = ()) -> ReportResult:
    """The analysis of everything readable the store holds (runs, noise floors, max-batch searches, FLOP counts),
    computed once, and the report written from it into `out`, naming the unreadable files it left out and the points
    a sweep's time budget left without runs (`not_run`: the store cannot know them)."""
    left_out = [d for d in results_store.damaged() if d.key]  # a damaged store.json leaves nothing out
    summary = results_store.load("summary")
    analysis = analysed(summary, results_store.load("steps"), results_store.load("calibration"),
                        results_store.load("max_batch"), results_store.load("model_facts"), latency_budget_ms,
                        parity=results_store.load(PARITY_FRAME), capacities=results_store.load(SERVE_CAPACITY_FRAME))
    manifests = {key: results_store.manifest(key) for key in sorted(results_store.keys())}
    return ReportResult(analysis, write_report(analysis, summary, manifests, out, left_out, not_run), left_out)


def report(store: Path, out: Optional[Path] = None, latency_budget_ms: Optional[float] = None) -> ReportResult:
    results_store = ResultStore(store)
    if not results_store.run_keys():
        damaged = results_store.damaged()
        unreadable = f"; {len(damaged)} of its files are damaged (fwbench store check lists them)" if damaged else ""
        raise UsageError(f"{store} holds no readable runs{unreadable}", "--store")
    return store_report(results_store, out or store / "report", latency_budget_ms)
