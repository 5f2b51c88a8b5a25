"""The optimal batch size per runner and series (the batch with the highest throughput among those that fit,
and those the runs cannot tell from it), where the batches that fit end, and the largest batch under a latency
budget. Per-run values, as everywhere: the unit of evidence is the run."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..store.analysis_columns import OPTIMAL_COLUMNS, SERIES_KEY
from ..store.run_columns import SERIES_COLUMNS
from ..store.schema import MAX_BATCH_KEY_COLUMNS
from . import stats
from .alike import keyed, labelled
from .comparison import is_out_of_memory, with_status

TOO_FEW_RUNS = f"fewer than {stats.MIN_REPETITIONS} runs per batch"


def batches_text(batches: Sequence[int]) -> str:
    return ", ".join(str(int(b)) for b in sorted(batches))


def _failed_batches(summary: pd.DataFrame) -> dict[tuple, list[int]]:
    """Per series and runner (labelled as per_run labels it), the batches every run of which ran out of memory."""
    summary = with_status(summary)
    if summary.empty:
        return {}
    summary = labelled(keyed(summary), SERIES_COLUMNS)
    summary["runner"] = summary.pop("label")
    failed = summary[(summary["status"] != "ok") & (summary["batch_size"] > 0)]
    ran = set(map(tuple, summary[summary["status"] == "ok"][[*SERIES_KEY, "batch_size"]].itertuples(index=False)))
    out: dict[tuple, list[int]] = {}
    for row in failed.itertuples(index=False):
        values = row._asdict()
        key = tuple(values[c] for c in SERIES_KEY)
        if is_out_of_memory(values.get("error", "")) and (*key, values["batch_size"]) not in ran:
            out.setdefault(key, [])
            if values["batch_size"] not in out[key]:
                out[key].append(int(values["batch_size"]))
    return out


def _largest_fitting(max_batch: pd.DataFrame | None) -> dict[tuple, dict]:
    """max-batch's newest answer per (model, options, mode, shape, precision, device, runner name)."""
    if max_batch is None or max_batch.empty:
        return {}
    columns = MAX_BATCH_KEY_COLUMNS
    frame = max_batch.copy()
    for column in columns:
        frame[column] = frame[column].astype(object).where(frame[column].notna(), "").astype(str)
    frame = frame.sort_values("searched_at_unix_s")
    return {tuple(getattr(r, c) for c in columns): r._asdict() for r in frame.itertuples(index=False)}


def optimal_batches(
    runs: pd.DataFrame,
    summary: pd.DataFrame,
    max_batch: pd.DataFrame | None = None,
    latency_budget_ms: float | None = None,
) -> pd.DataFrame:
    """Per series (a configuration less its batch size) and runner of these runs (comparison.per_run; `summary`
    holds their failures too): the batch with the highest throughput among
    those that ran (so fit), the batches that cannot be told apart from it, what max-batch or out-of-memory
    failures say of the batches that fit beyond the grid, and, with a latency budget, the largest batch whose
    step time stays under it at the stats.CONFIDENCE level."""
    failed = _failed_batches(summary)
    fitting = _largest_fitting(max_batch)
    rows = []
    for key, own in runs.groupby(list(SERIES_KEY), sort=True):
        values = dict(zip(SERIES_KEY, key))
        per_sample = {int(b): g["time_per_sample_s"].to_numpy() for b, g in own.groupby("batch_size")}
        step_ms = {int(b): g["median_step_time_s"].to_numpy() * 1e3 for b, g in own.groupby("batch_size")}
        batches = sorted(per_sample)
        fewest_runs = min(v.size for v in per_sample.values())
        best = min(batches, key=lambda b: stats.geometric_mean(per_sample[b]))
        throughput = stats.geometric_interval(1.0 / per_sample[best])
        tied, status = _ties(best, per_sample)
        row = {
            **values,
            "batches": batches_text(batches),
            "runs_per_batch": fewest_runs,
            "best_batch": best,
            "best_throughput_samples_per_s": throughput.value,
            "best_throughput_low": throughput.low,
            "best_throughput_high": throughput.high,
            "within_noise": batches_text(tied),
            "optimal_status": status,
            "out_of_memory_batches": batches_text(failed.get(key, [])),
        }
        # max-batch searched a runner, not a label.
        row.update(_fit({**values, "runner": own["runner_name"].iloc[0]}, batches, best, failed.get(key, []), fitting))
        row.update(_budget(step_ms, latency_budget_ms))
        rows.append(row)
    return pd.DataFrame(rows, columns=OPTIMAL_COLUMNS)


def _ties(best: int, per_sample: dict[int, np.ndarray]) -> tuple[list[int], str]:
    """The batches whose time per sample the runs cannot tell from the best's, and the optimum's status."""
    if len(per_sample) == 1:
        return [], "one batch size measured: nothing to choose between"
    if min(v.size for v in per_sample.values()) < stats.MIN_REPETITIONS:
        return [], f"not resolved: {TOO_FEW_RUNS} (a verdict needs {stats.MIN_REPETITIONS})"
    tied = [
        b
        for b in per_sample
        if b != best and not stats.compare("best", per_sample[best], str(b), per_sample[b]).significant
    ]
    if tied:
        return tied, f"best, but batch {batches_text(tied)} within the noise (99% confidence)"
    return [], "best of the measured batches (99% confidence)"


def _fit(values: dict, batches: list[int], best: int, out_of_memory: list[int], fitting: dict[tuple, dict]) -> dict:
    """Where the batches that fit end, by max-batch's search or by the grid's own out-of-memory failures."""
    searched = fitting.get(tuple(values[c] for c in MAX_BATCH_KEY_COLUMNS)) if values["world_size"] == 1 else None
    largest = math.nan
    notes = []
    if searched is not None:
        largest = int(searched["largest_batch"])
        bound = "at least " if bool(searched.get("capped")) else ""
        notes.append(f"max-batch: {bound}{largest} fits" if largest > 0 else "max-batch: no batch fits")
    if out_of_memory:
        notes.append(f"out of memory from batch {min(out_of_memory)}")
    edge = best == max(batches)
    if edge and len(batches) > 1:
        beyond = not out_of_memory and (searched is None or largest > max(batches))
        notes.append(
            "best at the grid's largest batch: larger batches that fit may do better"
            if beyond
            else "best at the largest batch that fits"
        )
    return {"largest_fitting_batch": largest, "fit_note": "; ".join(notes)}


def _budget(step_ms: dict[int, np.ndarray], budget_ms: float | None) -> dict:
    """The largest batch whose step time is under the budget with stats.CONFIDENCE: the interval of its runs'
    geometric mean ends below it."""
    if not budget_ms:
        return {"latency_budget_ms": math.nan, "budget_batch": math.nan, "budget_step_ms": math.nan, "budget_note": ""}
    intervals = {b: stats.geometric_interval(v) for b, v in sorted(step_ms.items())}
    unresolved = [b for b, i in intervals.items() if not i.resolved]
    under = [b for b, i in intervals.items() if i.resolved and i.high < budget_ms]
    unsure = [b for b, i in intervals.items() if i.resolved and i.low <= budget_ms <= i.high]
    notes = []
    if unresolved:
        notes.append(f"batch {batches_text(unresolved)}: {TOO_FEW_RUNS}, not judged")
    if unsure:
        notes.append(f"batch {batches_text(unsure)}: within the noise of the budget")
    chosen = max(under) if under else math.nan
    if under and chosen == max(step_ms):
        notes.append("every measured batch up to here is under the budget; larger ones were not measured")
    if not under and not unresolved and not unsure:
        smallest = min(intervals)
        notes.append(f"no batch stays under {budget_ms:g} ms (batch {smallest}: {intervals[smallest].value:.3g} ms)")
    return {
        "latency_budget_ms": float(budget_ms),
        "budget_batch": chosen,
        "budget_step_ms": intervals[max(under)].value if under else math.nan,
        "budget_note": "; ".join(notes),
    }
