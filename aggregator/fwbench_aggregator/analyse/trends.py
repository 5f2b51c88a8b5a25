"""Does time per sample fall as the batch grows? A rank correlation over every run, the log-log slope as the
factor per doubling, and the batch past which doubling stops paying."""

from __future__ import annotations

import math

import pandas as pd

from ..store.analysis_columns import SERIES_KEY, TREND_COLUMNS
from . import stats
from .optimal import TOO_FEW_RUNS, batches_text

# Doubling the batch gains less than this in time per sample: the trend has flattened.
FLATTEN_GAIN = 0.05


def batch_trends(runs: pd.DataFrame) -> pd.DataFrame:
    """Per series and runner of these runs (comparison.per_run): does time per sample fall as the batch grows?
    Spearman's rank correlation over every run (p-value at stats.ALPHA), the log-log slope as the ratio per doubling,
    and where the fall flattens: the batch past which each doubling gains less than FLATTEN_GAIN (geometric means
    over runs)."""
    rows = []
    for key, own in runs.groupby(list(SERIES_KEY), sort=True):
        batches = sorted(int(b) for b in own["batch_size"].unique())
        row = {**dict(zip(SERIES_KEY, key)), "batches": batches_text(batches), "runs": len(own)}
        if len(batches) < 3:
            rows.append({**row, "trend": f"not tested: {len(batches)} batch size(s), a trend needs 3"})
            continue
        fewest_runs = int(own.groupby("batch_size").size().min())
        if fewest_runs < stats.MIN_REPETITIONS:
            # One run per batch is one observation per batch: a rank correlation over so few says nothing.
            rows.append({**row, "trend": f"not tested: {TOO_FEW_RUNS} (a trend needs {stats.MIN_REPETITIONS})"})
            continue
        fit = stats.trend(own["batch_size"], own["time_per_sample_s"])
        means = [stats.geometric_mean(own.loc[own["batch_size"] == b, "time_per_sample_s"]) for b in batches]
        row.update(
            spearman_rho=fit.spearman_rho,
            spearman_p=fit.spearman_p,
            ratio_per_doubling=fit.ratio_per_doubling,
            slope_p=fit.slope_p,
            trend=fit.direction,
        )
        row.update(_flattening(batches, means))
        rows.append(row)
    return pd.DataFrame(rows, columns=TREND_COLUMNS)


def _flattening(batches: list[int], means: list[float]) -> dict:
    """The smallest batch from which every further doubling gains less than FLATTEN_GAIN in time per sample."""
    # Gain per doubling between neighbours, so that a grid of 1, 4, 16 reads like one of 1, 2, 4.
    gains = [
        1.0 - (means[i + 1] / means[i]) ** (1.0 / math.log2(batches[i + 1] / batches[i]))
        for i in range(len(batches) - 1)
    ]
    if gains[-1] >= FLATTEN_GAIN:
        return {
            "flattens_at_batch": math.nan,
            "flatten_note": f"still gaining {gains[-1]:.0%} per doubling at batch {batches[-1]}",
        }
    start = len(gains)
    while start > 0 and gains[start - 1] < FLATTEN_GAIN:
        start -= 1
    note = (
        "flat from the smallest batch"
        if start == 0
        else f"each doubling past batch {batches[start]} gains < {FLATTEN_GAIN:.0%}"
    )
    return {"flattens_at_batch": batches[start], "flatten_note": note}
