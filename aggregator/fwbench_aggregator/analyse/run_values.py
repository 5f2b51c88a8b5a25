"""A run's identity as the analysis compares it (its configuration columns normalised) and its value: the median of its
measured step times."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..store.run_columns import CONFIG_COLUMNS, DEFAULT_PROFILE, INTEGER_COLUMNS, RUN_COLUMNS


def entry_label(runner: str, strategy: str) -> str:
    """A row's identity: the runner, and its strategy where it spreads over several devices ("torch ddp")."""
    return runner if strategy in ("", "single") else f"{runner} {strategy}"


def normalised(frame: pd.DataFrame | None) -> pd.DataFrame:
    """Configuration columns present and comparable: missing strings become "", counts integers (a run
    before distributed runs existed: one device, one runner). `runner` becomes the row's identity, runner and
    strategy (entry_label); `runner_name` keeps the runner alone."""
    frame = pd.DataFrame() if frame is None else frame.copy()
    for column in (*CONFIG_COLUMNS, "runner", "strategy"):
        if column not in frame:
            frame[column] = pd.NA
    for column in (*CONFIG_COLUMNS, "runner", "strategy"):
        if column not in INTEGER_COLUMNS:
            frame[column] = frame[column].astype(object).where(frame[column].notna(), "").astype(str)
    frame["batch_size"] = pd.to_numeric(frame["batch_size"], errors="coerce").fillna(0).astype(int)
    for column in ("world_size", "nodes"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").fillna(1).astype(int)
    frame["strategy"] = frame["strategy"].replace("", "single")
    frame["profile"] = frame["profile"].replace("", DEFAULT_PROFILE)
    if "runner_name" not in frame:
        frame["runner_name"] = frame["runner"]
    frame["runner"] = [entry_label(r, s) for r, s in zip(frame["runner_name"], frame["strategy"])]
    frame["repetition"] = (
        pd.to_numeric(frame["repetition"], errors="coerce").fillna(0).astype(int) if "repetition" in frame else 0
    )
    frame["run_id"] = (
        frame["run_id"].astype(object).where(frame["run_id"].notna(), "").astype(str) if "run_id" in frame else ""
    )
    return frame


def run_values(summary: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per successful run: its configuration, runner, repetition and median step time (from
    its measured steps; from the summary where the steps were not kept)."""
    summary = normalised(_narrowed(summary, ("status", "median_step_time_s")))
    steps = normalised(_narrowed(steps, ("warmup", "step_time_s")))
    ok = summary[summary.get("status", pd.Series("ok", index=summary.index)).fillna("failed") == "ok"]
    runs = ok[[*RUN_COLUMNS, *(c for c in ("median_step_time_s",) if c in ok)]].copy()
    if not steps.empty and "step_time_s" in steps:
        measured = steps[~steps.get("warmup", pd.Series(False, index=steps.index)).astype(bool)]
        medians = measured.groupby(list(RUN_COLUMNS), sort=False)["step_time_s"].median().rename("from_steps")
        runs = runs.merge(medians.reset_index(), on=list(RUN_COLUMNS), how="left")
        fallback = runs["median_step_time_s"] if "median_step_time_s" in runs else np.nan
        runs["median_step_time_s"] = runs["from_steps"].fillna(fallback)
        runs = runs.drop(columns="from_steps")
    return runs.dropna(subset=["median_step_time_s"]) if "median_step_time_s" in runs else runs.iloc[0:0]


def _narrowed(frame: pd.DataFrame | None, read: tuple[str, ...]) -> pd.DataFrame | None:
    """`frame`'s columns that name a run (normalised reads them) and `read`: normalising every column of a wide
    summary was most of run_values' time."""
    if frame is None:
        return None
    names = (*CONFIG_COLUMNS, "runner", "runner_name", "strategy", "run_id", "repetition", *read)
    return frame[[column for column in frame.columns if column in names]]
