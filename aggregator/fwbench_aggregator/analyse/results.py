"""Everything the analysis says about a set of runs, computed once: the comparison rows, scaling, the studies'
tables and the findings. Reports, terminal tables and plots all read one Analysis."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from . import stats
from .comparison import comparison_rows, per_run
from .efficiency import hardware_efficiency
from .findings import Finding, findings
from .generation import generation_rows
from .object_text import text_as_objects
from .optimal import optimal_batches
from .scaling import scaling_rows
from .searches import best_searches, split_searches
from .serving import load_curve, serving_rows
from .trends import batch_trends


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
    summary = text_as_objects(summary)
    searches = best_searches(summary, steps)
    (summary, _), (steps, _) = split_searches(summary), split_searches(steps)
    rows = comparison_rows(summary, steps, calibration, min_effect, parity)
    scaling = scaling_rows(summary)
    runs = per_run(summary, steps)
    trends = batch_trends(runs)
    return Analysis(
        rows=rows,
        scaling=scaling,
        optimal=optimal_batches(runs, summary, max_batch, latency_budget_ms),
        trends=trends,
        efficiency=hardware_efficiency(rows, model_facts),
        findings=findings(rows, runs, trends, scaling),
        searches=searches,
        serving=serving_rows(summary, min_effect, latency_budget_ms),
        load_curve=load_curve(summary),
        capacities=pd.DataFrame() if capacities is None else capacities,
        runs=runs,
        generation=generation_rows(summary, steps, min_effect),
    )
