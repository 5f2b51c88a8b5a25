"""Serving runs become figures and verdicts: for a configuration under a scenario, each runner's per-run latency
percentiles (p50, p90, p99; offline: throughput), the ratio between runners of each with its interval over runs, and
the verdict, by the same statistics as step times (comparison.judged, stats.compare: a run's percentile is its value,
as a run's median step time is).

Under mode generate a query is a prompt and its latency runs to its last token; beside its p50, p90 and p99, each
runner's first token latency (TTFT+queue: from arrival, the wait for its batch included) and time per output token
(TPOT) are compared at each percentile the same way, and the tokens it served per second are shown.

A percentile the run's queries could not support (the runner's order-statistic rule, runner.proto) is empty in the
summary with its reason; a runner with such a run gets no figure for that percentile, and the row says why instead
of a ratio. A latency budget is judged on the p99 of the runs: met where its interval over runs ends under the budget,
missed where it starts above, within the noise where it straddles it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..store.analysis_columns import SERVING_COMPARISON_COLUMNS
from ..store.run_columns import CONFIG_COLUMNS, RUN_COLUMNS, SERVING_PERCENTILES, SERVING_SUMMARY_COLUMNS
from . import stats
from .alike import keyed, labelled
from .comparison import with_status
from .judging import judged

THROUGHPUT = "throughput"  # the figure of an offline run
BUDGET_PERCENTILE = "p99"
GENERATE = "generate"
# Mode generate's figures beside latency's, each percentile of a summary column (store.run_columns.SERVING_FIELDS):
# its label names what it includes, as the generation table's "time to first token" is the prefill alone.
GENERATION_FIGURES = {"TTFT+queue": "first_token_latency", "TPOT": "time_per_output_token"}


def latency_column(percentile: str) -> str:
    """ "p99" -> "p99_latency_s", the summary's column of each run's value."""
    return f"{percentile}_latency_s"


def serving_runs(summary: pd.DataFrame, over=CONFIG_COLUMNS) -> pd.DataFrame:
    """One row per successful run under a scenario: its configuration, runner, repetition and serving figures
    (store.run_columns' SERVING_SUMMARY_COLUMNS); empty where no run had a scenario (or the store predates scenarios).
    Its runner is labelled by what sets its runs apart from others of their `over` group (alike.labelled), and its
    `group` says which block of them it is in: only runs with one label pool."""
    runs = with_status(summary)
    if not runs.empty and "scenario" in runs:
        runs = runs[(runs["status"] == "ok") & runs["scenario"].astype(object).fillna("").astype(str).ne("")]
    if runs.empty or "scenario" not in runs:
        return pd.DataFrame(columns=[*RUN_COLUMNS, "group", *SERVING_SUMMARY_COLUMNS])
    # Labelled among the runs under a scenario alone: what sets apart the runs these tables show.
    ok = labelled(keyed(runs), over)
    ok["runner"] = ok.pop("label")
    ok = ok[[*RUN_COLUMNS, "group", *(c for c in (*SERVING_SUMMARY_COLUMNS, "max_repetitions") if c in ok)]].copy()
    numeric = [c for c in (*SERVING_SUMMARY_COLUMNS, "max_repetitions") if c not in ("scenario", "serving_unavailable")]
    for column in numeric:
        ok[column] = pd.to_numeric(ok[column], errors="coerce") if column in ok else np.nan
    ok["serving_unavailable"] = ok.get("serving_unavailable", pd.Series("", index=ok.index)).fillna("").astype(str)
    return ok.reset_index(drop=True)


def unavailable_reason(runs: pd.DataFrame, column: str) -> str:
    """Why some of these runs have no `column`: the runners' reasons, each once ("needs 299 queries, got 120")."""
    reasons = []
    for text in runs["serving_unavailable"]:
        for part in str(text).split("; "):
            name, _, why = part.partition(": ")
            if name == column and why:
                reasons.append(why)
    return "; ".join(dict.fromkeys(reasons)) or "not reported"


def figure_column(figure: str) -> str:
    """A percentile figure's summary column: "p99" -> "p99_latency_s", "TPOT p90" -> "p90_time_per_output_token_s"."""
    label, _, percentile = figure.rpartition(" ")
    return f"{percentile}_{GENERATION_FIGURES[label]}_s" if label else latency_column(percentile)


def _figures(scenario: str, mode: str) -> tuple[str, ...]:
    if scenario == "offline":
        return (THROUGHPUT,)
    generated = tuple(f"{label} {p}" for label in GENERATION_FIGURES for p in SERVING_PERCENTILES)
    return (*SERVING_PERCENTILES, *(generated if mode == GENERATE else ()))


def _row(config: dict, runner: str, own: pd.DataFrame, figure: str) -> dict:
    """One runner's figure over its runs; _values holds the per-run values that are compared (seconds per query, or
    seconds per sample offline: lower is better either way), empty where a run could not support the figure."""
    row = {
        **config,
        "runner": runner,
        "scenario": own["scenario"].iloc[0],
        "target_qps": own["target_qps"].iloc[0],
        "figure": figure,
        "runs": len(own),
        "queries": int(own["query_count"].sum()),
        "achieved_qps": stats.geometric_mean(own["achieved_qps"]) if (own["achieved_qps"] > 0).all() else math.nan,
        "latency_ms": math.nan,
        "throughput_samples_per_s": math.nan,
        "generated_tokens_per_s": _tokens_per_s(own),
        "verdict": "",
        # The sequential design the runs were made under, if any: its looks' levels judge them (comparison.judged).
        "max_repetitions": int(own["max_repetitions"].fillna(0).max()),
    }
    if figure == THROUGHPUT:
        values = own["serving_throughput_samples_per_s"].to_numpy(dtype=float)
        supported = values[np.isfinite(values) & (values > 0)]
        if supported.size == values.size:
            row["throughput_samples_per_s"] = stats.geometric_mean(supported)
            row["_values"] = 1.0 / supported
        else:
            row["_values"], row["verdict"] = np.array([]), "no throughput reported"
        return row
    column = figure_column(figure)
    values = own[column].to_numpy(dtype=float)
    supported = values[np.isfinite(values) & (values > 0)]
    if supported.size == values.size:
        row["latency_ms"] = stats.geometric_mean(supported) * 1e3
        row["_values"] = supported
    else:
        missing = own[~(np.isfinite(values) & (values > 0))]
        row["_values"] = np.array([])
        row["verdict"] = (
            f"not supported by {len(missing)} of {len(own)} runs ({unavailable_reason(missing, column)}): not compared"
        )
    return row


def _tokens_per_s(own: pd.DataFrame) -> float:
    """Mode generate: the tokens served per second over the runs (their geometric mean); NaN in other modes."""
    values = own["generated_tokens_per_s"].to_numpy(dtype=float)
    return stats.geometric_mean(values) if values.size and (values > 0).all() else math.nan


def _judge(rows: list[dict], min_effect: float) -> None:
    """Ratios and verdicts among one figure's supported runners, in place: the best (lowest latency, highest
    throughput) against each other, with comparison.judged's statistics over runs."""
    for row in rows:
        row.update(
            ratio_to_best=math.nan, ratio_ci_low=math.nan, ratio_ci_high=math.nan, p_value=math.nan, significant=False
        )
    ranked = [r for r in rows if r["_values"].size]
    if not ranked:
        return
    best = min(ranked, key=lambda r: stats.geometric_mean(r["_values"]))
    for row in ranked:
        row["ratio_to_best"] = stats.geometric_mean(row["_values"]) / stats.geometric_mean(best["_values"])
    best["verdict"] = "best" if len(rows) > 1 else "only runner"
    for row in ranked:
        if row is best:
            continue
        # No calibrated floor applies: calibrations measure step times, not percentiles under a load.
        verdict, _, c = judged(
            {**best, "_medians": best["_values"]}, {**row, "_medians": row["_values"]}, min_effect, math.nan
        )
        row.update(
            ratio_ci_low=c.ci_low,
            ratio_ci_high=c.ci_high,
            p_value=c.p_value,
            significant=c.significant,
            verdict=verdict,
        )


def budget_status(p99_s: np.ndarray, budget_ms: float) -> str:
    """Whether the runs' p99 meets the budget, at the interval over runs: "meets" (its interval ends under it),
    "misses" (starts above), "within noise", or why it cannot be told."""
    if p99_s.size == 0:
        return "p99 not supported by the query count: not shown to meet it"
    interval = stats.geometric_interval(p99_s * 1e3)
    if not interval.resolved:
        return f"too few runs to tell ({interval.runs}; need {stats.MIN_REPETITIONS})"
    if interval.high < budget_ms:
        return "meets"
    return "misses" if interval.low > budget_ms else "within noise"


def serving_rows(
    summary: pd.DataFrame, min_effect: float = stats.MIN_EFFECT, latency_budget_ms: float | None = None
) -> pd.DataFrame:
    """One row per configuration under a scenario, runner and figure (p50, p90, p99; offline: throughput), with
    the ratio to the best runner, its interval over runs and the verdict (SERVING_COMPARISON_COLUMNS)."""
    runs = serving_runs(summary)
    rows = []
    # Runners are judged within a block of alike runs (alike.labelled), never across blocks.
    for (*config, _), block in runs.groupby([*CONFIG_COLUMNS, "group"], sort=False):
        config_values = dict(zip(CONFIG_COLUMNS, config))
        for figure in _figures(str(block["scenario"].iloc[0]), str(config_values["mode"])):
            figure_rows = [
                _row(config_values, runner, own, figure) for runner, own in block.groupby("runner", sort=True)
            ]
            _judge(figure_rows, min_effect)
            for row in figure_rows:
                budget_ms = latency_budget_ms if figure == BUDGET_PERCENTILE else None  # judged on p99 alone
                row["latency_budget_ms"] = math.nan if budget_ms is None else budget_ms
                row["budget_status"] = "" if budget_ms is None else budget_status(row["_values"], budget_ms)
            rows += figure_rows
    return pd.DataFrame(rows, columns=list(SERVING_COMPARISON_COLUMNS))


def load_curve(summary: pd.DataFrame) -> pd.DataFrame:
    """The server runs as latency against offered load: per configuration less its load, runner and target_qps, the
    geometric mean over runs of each percentile with its interval (`{p}_latency_low_s`, `_high_s`: stats.
    geometric_interval, none under MIN_REPETITIONS runs; NaN where a run could not support the percentile) and the
    runs."""
    series = [c for c in CONFIG_COLUMNS if c != "serving"]
    runs = serving_runs(summary, over=series)
    runs = runs[runs["scenario"] == "server"]
    columns = [
        *series,
        "runner",
        "target_qps",
        "runs",
        *(f"{latency_column(p)[:-2]}{end}" for p in SERVING_PERCENTILES for end in ("_s", "_low_s", "_high_s")),
    ]
    rows = []
    for key, own in runs.groupby([*series, "runner", "target_qps"], sort=True):
        row = dict(zip([*series, "runner", "target_qps"], key), runs=len(own))
        for percentile in SERVING_PERCENTILES:
            column = latency_column(percentile)
            values = own[column].to_numpy(dtype=float)
            interval = stats.geometric_interval(values) if np.isfinite(values).all() else None
            row[column] = interval.value if interval else math.nan
            row[f"{column[:-2]}_low_s"] = interval.low if interval else math.nan
            row[f"{column[:-2]}_high_s"] = interval.high if interval else math.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)
