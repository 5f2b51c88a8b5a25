"""Report: tables, plots, verdicts and the manifest from a results store alone; no runner is needed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..analyse.results import Analysis, StepsOf, analysed_by_part, positions_by_part
from ..analyse.run_values import run_values
from ..analyse.versions import (
    VersionTables,
    changes_between_versions,
    confirmed,
    several_versions,
    version_changes,
    version_points,
    versioned,
)
from ..base.progress import Progress
from ..present.report import write_report
from ..store.health import Damage
from ..store.results_store import ResultStore
from ..store.schema import PARITY_FRAME, SERVE_CAPACITY_FRAME
from ..store.selection import RUN_FRAMES, Selection, SelectionError
from .errors import UsageError


@dataclass(frozen=True)
class ReportResult:
    analysis: Analysis
    path: Path  # report.html
    left_out: list[Damage] = field(default_factory=list)  # the store's unreadable files: their entries are left out
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)  # the runs analysed, as selected from the store


def selection_of(compare: str | None, where: Sequence[str]) -> Selection:
    """--compare and --where as a Selection; a UsageError naming the option where one is malformed."""
    try:
        return Selection.parse(compare or "", where)
    except SelectionError as exc:
        raise UsageError(str(exc), exc.option) from None


def selected_frames(
    results_store: ResultStore, names: Sequence[str], selection: Selection, progress: Progress = Progress()
) -> dict:
    """The store's frames `names`, its runs' frames less the runs `selection` leaves out: only the selected runs are
    read (the store's catalog chooses them), `progress` counting them."""
    try:
        keys = selection.keys_in(results_store)
    except SelectionError as exc:
        raise UsageError(str(exc), exc.option) from None
    return {name: results_store.load(name, keys if name in RUN_FRAMES else None, progress) for name in names}


REPORT_FOLDER = "report"  # beside a store (or in a compare's results folder): report.html and its files

# A confirmation round's runs (app.versions): a store of their own inside the study's, so that they are judged on
# their own and never pooled with the first round's.
CONFIRMATION_FOLDER = "confirmation"


def version_tables(
    results_store: ResultStore, summary: pd.DataFrame, run_medians: pd.DataFrame
) -> VersionTables | None:
    """Each version against the previous one over these runs (`run_medians`: their Analysis's), a confirmation
    round's verdicts (the store's confirmation folder) beside its regressions; None where the runs hold no two
    versions of a configuration."""
    runs = versioned(summary, run_medians)
    points = version_points(runs)
    if not several_versions(points):
        return None
    calibration = results_store.load("calibration")
    rounds = None
    second = ResultStore(results_store.root / CONFIRMATION_FOLDER)
    if second.run_keys():
        rounds = version_changes(second.load("summary"), second.load("steps"), calibration)
    return VersionTables(confirmed(changes_between_versions(runs, calibration), rounds), points)


def stored_steps(results_store: ResultStore, progress: Progress = Progress()) -> StepsOf:
    """A part's steps (analyse.results.StepsOf), read from the store by its summary rows' run keys."""
    return lambda part: results_store.load("steps", set(part.get("run_key", ())), progress)


def stored_run_medians(results_store: ResultStore, summary: pd.DataFrame) -> pd.DataFrame:
    """analyse.run_values of the store's runs in `summary`, their steps read one part of the analysis at a time."""
    steps_of = stored_steps(results_store)
    parts = [summary.iloc[positions] for positions in positions_by_part(summary).values()]
    medians = [run_values(part, steps_of(part)) for part in parts]
    return pd.concat(medians, ignore_index=True) if medians else run_values(summary, pd.DataFrame())


def store_report(
    results_store: ResultStore,
    out: Path,
    latency_budget_ms: float | None = None,
    not_run: Sequence[str] = (),
    selection: Selection = Selection(),
    progress: Progress = Progress(),
) -> ReportResult:
    """The analysis of everything readable the store holds (runs, noise floors, max-batch searches, FLOP counts), or
    of the runs `selection` chooses, computed once, and the report written from it into `out`, naming the unreadable
    files it left out and the points a sweep's time budget left without runs (`not_run`: the store cannot know them);
    `progress` shows the runs read and the parts analysed. The steps, most of a store, are read one part of the
    analysis at a time (analyse.results.PART_COLUMNS), so that memory holds one part's."""
    frames = selected_frames(
        results_store,
        ("summary", "calibration", "max_batch", "model_facts", PARITY_FRAME, SERVE_CAPACITY_FRAME),
        selection,
        progress,
    )
    summary = frames["summary"]
    analysis = analysed_by_part(
        summary,
        stored_steps(results_store, progress),
        frames["calibration"],
        frames["max_batch"],
        frames["model_facts"],
        latency_budget_ms,
        parity=frames[PARITY_FRAME],
        capacities=frames[SERVE_CAPACITY_FRAME],
        progress=progress,
    )
    left_out = results_store.known_damage()  # after the reads: what they found damaged too
    task = progress.add_task("writing the report")
    # The manifests of the runs reported and of the entries beside them (a selection's own runs only).
    shown = results_store.keys()
    if not selection.everything:
        shown = set(summary.get("run_key", ())) | (shown - results_store.run_keys())
    manifests = results_store.manifests(sorted(shown))
    versions = version_tables(results_store, summary, analysis.run_medians)
    path = write_report(
        analysis, summary, manifests, out, left_out, not_run, versions=versions, parity=frames[PARITY_FRAME]
    )
    progress.remove_task(task)
    return ReportResult(analysis, path, left_out, summary)


def report(
    store: Path,
    out: Path | None = None,
    latency_budget_ms: float | None = None,
    selection: Selection = Selection(),
    progress: Progress = Progress(),
) -> ReportResult:
    results_store = ResultStore(store)
    if not results_store.run_keys():
        damaged = results_store.damaged()
        unreadable = f"; {len(damaged)} of its files are damaged (fwbench store check lists them)" if damaged else ""
        raise UsageError(f"{store} holds no readable runs{unreadable}", "--store")
    return store_report(
        results_store, out or store / REPORT_FOLDER, latency_budget_ms, selection=selection, progress=progress
    )
