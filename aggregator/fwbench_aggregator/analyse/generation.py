"""Generation runs (mode generate) become figures and verdicts: each request's time to first token (its prefill) and
its decode time per token, each judged as step times are. comparison.comparison_rows runs on the figure in place of
the whole request, so that the same design judges it (rounds, or process blocks where the runs are windows of them),
only alike runs pool, and a verdict comes with its interval or says what the runs could not resolve. No calibrated
noise floor applies: calibrations measure whole steps. Beside each figure: decode tokens per second (the job's
prompts over the per-token time), the per-token latency percentiles the runners measured, and whether the runner
generated the tokens the fastest one did (the last request's, by their SHA-256)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..store.analysis_columns import GENERATION_COMPARISON_COLUMNS
from ..store.run_columns import CONFIG_COLUMNS, RUN_COLUMNS
from .alike import keyed, labelled
from .comparison import comparison_rows, with_status

GENERATE = "generate"
TIME_TO_FIRST_TOKEN = "time to first token"
DECODE_PER_TOKEN = "decode, per token"


def _generation_runs(summary: pd.DataFrame, steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The summary rows and steps of mode generate runs, the steps with each request's per-token decode time."""
    if summary.empty or "mode" not in summary:
        return summary.iloc[0:0], steps.iloc[0:0]
    runs = summary[summary["mode"].astype(str) == GENERATE].copy()
    if runs.empty or steps.empty or "decode_time_s" not in steps:
        return runs, steps.iloc[0:0]
    tokens = runs[[*RUN_COLUMNS, "new_tokens"]].drop_duplicates(list(RUN_COLUMNS))
    own = steps.merge(tokens, on=list(RUN_COLUMNS))
    decoded = pd.to_numeric(own["new_tokens"], errors="coerce") - 1
    own["token_time_s"] = pd.to_numeric(own["decode_time_s"], errors="coerce") / decoded.where(decoded > 0)
    return runs, own


def _figure_rows(runs: pd.DataFrame, steps: pd.DataFrame, figure: str, min_effect: float) -> pd.DataFrame:
    """comparison_rows judged on one figure: each step's time is the request's part, each run's median its median."""
    step_column, run_column = (
        ("time_to_first_token_s", "median_time_to_first_token_s")
        if figure == TIME_TO_FIRST_TOKEN
        else ("token_time_s", "median_token_latency_s")
    )
    as_steps = steps.assign(step_time_s=pd.to_numeric(steps[step_column], errors="coerce")).dropna(
        subset=["step_time_s"]
    )
    as_runs = runs.assign(median_step_time_s=pd.to_numeric(runs[run_column], errors="coerce"))
    rows = comparison_rows(as_runs, as_steps, None, min_effect)
    return rows.assign(figure=figure)


def _by_row(runs: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    """The runs of each comparison row, by its configuration, block and runner label (as comparison_rows groups)."""
    labelled_runs = labelled(keyed(with_status(runs)), CONFIG_COLUMNS)
    return {
        key: own for key, own in labelled_runs.groupby([*CONFIG_COLUMNS, "group", "label"], sort=False, dropna=False)
    }


def _row_key(row: pd.Series) -> tuple:
    return (*(row[c] for c in CONFIG_COLUMNS), row["group"], row["runner"])


def _mean_ms(own: pd.DataFrame | None, column: str) -> float:
    values = pd.to_numeric(own[column], errors="coerce").dropna() if own is not None and column in own else []
    return float(np.mean(values)) * 1e3 if len(values) else math.nan


def _shas(own: pd.DataFrame | None) -> set[str]:
    if own is None or "tokens_sha256" not in own:
        return set()
    return {sha for sha in own["tokens_sha256"] if isinstance(sha, str) and sha}


def _same_tokens(rows: pd.DataFrame, by_row: dict[tuple, pd.DataFrame]) -> list[str]:
    """Per row: "yes" where its runner generated the fastest runner's tokens in every run, "no" where it did not, ""
    where either is unknown or the two are other frameworks: each framework starts from its own random weights, so
    their tokens differ by design (fwbench parity compares tokens from shared weights). Between versions or builds of
    one framework, or in an A/A comparison, the tokens should be the same."""
    fastest = {
        (row["figure"], *(row[c] for c in CONFIG_COLUMNS), row["group"]): row
        for _, row in rows.iterrows()
        if row["verdict"] == "fastest"
    }
    answers = []
    for _, row in rows.iterrows():
        best = fastest.get((row["figure"], *(row[c] for c in CONFIG_COLUMNS), row["group"]))
        if best is None or best["framework"] != row["framework"]:
            answers.append("")
            continue
        mine, theirs = _shas(by_row.get(_row_key(row))), _shas(by_row.get(_row_key(best)))
        answers.append("" if not mine or not theirs else "yes" if mine == theirs and len(mine) == 1 else "no")
    return answers


def generation_rows(summary: pd.DataFrame, steps: pd.DataFrame, min_effect: float) -> pd.DataFrame:
    """One row per configuration in mode generate, runner and figure; empty where no run generated."""
    runs, own_steps = _generation_runs(summary, steps)
    if runs.empty or own_steps.empty:
        return pd.DataFrame(columns=GENERATION_COMPARISON_COLUMNS)
    rows = pd.concat(
        [_figure_rows(runs, own_steps, figure, min_effect) for figure in (TIME_TO_FIRST_TOKEN, DECODE_PER_TOKEN)],
        ignore_index=True,
    ).rename(columns={"median_step_ms": "value_ms"})
    by_row = _by_row(runs)
    own = [by_row.get(_row_key(row)) for _, row in rows.iterrows()]
    decode = rows["figure"] == DECODE_PER_TOKEN
    rows["decode_tokens_per_s"] = np.where(decode, rows["global_batch_size"] / (rows["value_ms"] / 1e3), math.nan)
    for percentile in ("p90", "p99"):
        column = f"{percentile}_token_latency_s"
        rows[f"{percentile}_token_latency_ms"] = [
            _mean_ms(runs_of_row, column) if is_decode else math.nan for runs_of_row, is_decode in zip(own, decode)
        ]
    rows["new_tokens"] = [_mean_ms(runs_of_row, "new_tokens") / 1e3 for runs_of_row in own]
    rows["same_tokens"] = _same_tokens(rows, by_row)
    return rows[list(GENERATION_COMPARISON_COLUMNS)]
