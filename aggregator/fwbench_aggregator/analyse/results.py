"""Everything the analysis says about a set of runs, computed once: the comparison rows, scaling, the studies'
tables and the findings. Reports, terminal tables and plots all read one Analysis.

The analysis is computed one part of the runs at a time (PART_COLUMNS), and only the findings look across parts: a
report over a large store holds one part's steps at a time (analysed_by_part), and a small analysis in memory is the
same computation (analysed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from ..base.progress import Progress
from . import stats
from .comparison import comparison_rows, in_reading_order, per_run
from .efficiency import hardware_efficiency
from .findings import Finding, findings
from .generation import generation_rows
from .object_text import text_as_objects
from .optimal import optimal_batches
from .run_values import normalised, run_values
from .scaling import scaling_rows
from .searches import best_searches, split_searches
from .serving import load_curve, serving_rows
from .trends import batch_trends

# The columns no table but the findings looks across: rows and searches are per configuration, scaling per
# configuration less its world size, the series (optimal batches, trends) less its batch size, the load curve less
# its load (serving), the best profile's searches less the profile. So a part is one value of each of these.
PART_COLUMNS = ("model", "model_options", "mode", "input_shape", "precision", "device")


@dataclass(frozen=True)
class Analysis:
    rows: pd.DataFrame  # one per configuration and runner (comparison_rows)
    scaling: pd.DataFrame
    optimal: pd.DataFrame
    trends: pd.DataFrame
    efficiency: pd.DataFrame
    findings: list[Finding]
    searches: pd.DataFrame = field(default_factory=pd.DataFrame)  # best profile's searches (analyse.searches)
    serving: pd.DataFrame = field(default_factory=pd.DataFrame)  # runs under a scenario (analyse.serving)
    load_curve: pd.DataFrame = field(default_factory=pd.DataFrame)  # server runs: latency against offered load
    capacities: pd.DataFrame = field(default_factory=pd.DataFrame)  # serve-capacity's searches, as stored
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)  # one per successful run (comparison.per_run)
    generation: pd.DataFrame = field(default_factory=pd.DataFrame)  # mode generate's figures (analyse.generation)
    # One per successful run, the searches' too: its run columns and median step time (analyse.run_values), what
    # the version tables read instead of the steps.
    run_medians: pd.DataFrame = field(default_factory=pd.DataFrame)


# A part's steps, given its summary rows: read from a store (app.report), or selected from a frame in memory.
StepsOf = Callable[[pd.DataFrame], pd.DataFrame]

# The tables computed per part, concatenated in the order of the parts' keys.
PART_TABLES = (
    "run_medians",
    "searches",
    "rows",
    "scaling",
    "runs",
    "trends",
    "optimal",
    "serving",
    "load_curve",
    "generation",
)


def part_keys(frame: pd.DataFrame) -> list[tuple]:
    """Each row's part: its values of PART_COLUMNS as the analysis compares them (run_values.normalised)."""
    columns = normalised(frame[[c for c in PART_COLUMNS if c in frame]])
    return list(zip(*(columns[c].tolist() for c in PART_COLUMNS)))


def positions_by_part(frame: pd.DataFrame) -> dict[tuple, list[int]]:
    """The positions of each part's rows in `frame`, in the frame's order, the parts in the order of their keys."""
    by: dict[tuple, list[int]] = {}
    for position, key in enumerate(part_keys(frame)):
        by.setdefault(key, []).append(position)
    return {key: by[key] for key in sorted(by)}


def analysed(
    summary: pd.DataFrame,
    steps: pd.DataFrame,
    calibration: pd.DataFrame | None = None,
    max_batch: pd.DataFrame | None = None,
    model_facts: pd.DataFrame | None = None,
    latency_budget_ms: float | None = None,
    min_effect: float = stats.MIN_EFFECT,
    parity: pd.DataFrame | None = None,
    capacities: pd.DataFrame | None = None,
) -> Analysis:
    """The analysis of runs whose steps are all in memory."""
    steps = pd.DataFrame() if steps is None else steps
    steps_at = positions_by_part(steps) if not steps.empty else {}

    def steps_of(part: pd.DataFrame) -> pd.DataFrame:
        key = part_keys(part.iloc[:1])
        return steps.iloc[steps_at[key[0]]] if key and key[0] in steps_at else steps.iloc[0:0]

    return analysed_by_part(
        summary, steps_of, calibration, max_batch, model_facts, latency_budget_ms, min_effect, parity, capacities
    )


def analysed_by_part(
    summary: pd.DataFrame,
    steps_of: StepsOf,
    calibration: pd.DataFrame | None = None,
    max_batch: pd.DataFrame | None = None,
    model_facts: pd.DataFrame | None = None,
    latency_budget_ms: float | None = None,
    min_effect: float = stats.MIN_EFFECT,
    parity: pd.DataFrame | None = None,
    capacities: pd.DataFrame | None = None,
    progress: Progress = Progress(),
) -> Analysis:
    """The analysis of the runs of `summary`, one part (PART_COLUMNS) at a time: each part's steps fetched by
    `steps_of` and let go before the next part's; `progress` counts the parts."""
    parts = positions_by_part(summary) if not summary.empty else {(): []}  # no runs: one empty part
    task = progress.add_task(f"analysing {len(summary)} runs", total=len(parts))
    tables: dict[str, list[pd.DataFrame]] = {name: [] for name in PART_TABLES}
    try:
        for positions in parts.values():
            part = text_as_objects(summary.iloc[positions])  # one part's text as objects at a time: they are large
            for name, table in _part_tables(
                part, steps_of(part), calibration, max_batch, latency_budget_ms, min_effect, parity
            ).items():
                tables[name].append(table)
            progress.advance(task)
    finally:
        progress.remove_task(task)
    whole = {name: _concatenated(found) for name, found in tables.items()}
    rows = in_reading_order(whole["rows"]) if not whole["rows"].empty else whole["rows"]
    return Analysis(
        rows=rows,
        scaling=whole["scaling"],
        optimal=whole["optimal"],
        trends=whole["trends"],
        efficiency=hardware_efficiency(rows, model_facts),
        findings=findings(rows, whole["runs"], whole["trends"], whole["scaling"]),
        searches=whole["searches"],
        serving=whole["serving"],
        load_curve=whole["load_curve"],
        capacities=pd.DataFrame() if capacities is None else capacities,
        runs=whole["runs"],
        generation=whole["generation"],
        run_medians=whole["run_medians"],
    )


def _part_tables(
    summary: pd.DataFrame,
    steps: pd.DataFrame,
    calibration: pd.DataFrame | None,
    max_batch: pd.DataFrame | None,
    latency_budget_ms: float | None,
    min_effect: float,
    parity: pd.DataFrame | None,
) -> dict[str, pd.DataFrame]:
    """PART_TABLES of one part's runs."""
    run_medians = run_values(summary, steps)
    searches = best_searches(summary, steps)
    (summary, _), (steps, _) = split_searches(summary), split_searches(steps)
    runs = per_run(summary, steps)
    trends = batch_trends(runs)
    return {
        "run_medians": run_medians,
        "searches": searches,
        "rows": comparison_rows(summary, steps, calibration, min_effect, parity),
        "scaling": scaling_rows(summary),
        "runs": runs,
        "trends": trends,
        "optimal": optimal_batches(runs, summary, max_batch, latency_budget_ms),
        "serving": serving_rows(summary, min_effect, latency_budget_ms),
        "load_curve": load_curve(summary),
        "generation": generation_rows(summary, steps, min_effect),
    }


def _concatenated(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """The parts' tables one after the other; the first part's (its columns) where every one is empty."""
    found = [table for table in tables if not table.empty]
    if not found:
        return tables[0] if tables else pd.DataFrame()
    return found[0].reset_index(drop=True) if len(found) == 1 else pd.concat(found, ignore_index=True)
