"""A best profile's searches, as the store holds them: each runner's candidate settings with their runs and step time,
and which was chosen. The search runs are stored under their own profile label (BEST_SEARCH_PROFILE), so that no
comparison pools them with the runs at the chosen settings; every other analysis leaves them out."""

from __future__ import annotations

import pandas as pd

from ..store.run_columns import BEST_SEARCH_PROFILE, CONFIG_COLUMNS, RUN_COLUMNS
from . import stats
from .run_values import normalised, run_values

SEARCH_SETTINGS = ("layout", "compilation", "cudnn_autotune")
SEARCH_KEY = tuple(c for c in CONFIG_COLUMNS if c != "profile")


def candidate_entry(runner: str, values: tuple[str, ...]) -> str:
    """The name a search's run goes by in the store: 'torch (channels_first, eager, off)'."""
    return f"{runner} ({', '.join(values)})"


def candidate_runner(entry: str) -> str:
    """The runner whose candidate `entry` is."""
    return entry.rsplit(" (", 1)[0]


def split_searches(frame: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every run but the searches', the searches' runs) of a summary or steps frame."""
    if frame is None or frame.empty or "profile" not in frame:
        return (frame if frame is not None else pd.DataFrame()), pd.DataFrame()
    searching = frame["profile"].astype(str) == BEST_SEARCH_PROFILE
    return frame[~searching], frame[searching]


def best_searches(summary: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per candidate of each search: the configuration, the framework, the candidate's settings, its runs and
    median step time (the geometric mean of its runs' medians), and whether it was the fastest of its runner's."""
    _, summary = split_searches(summary)
    if summary.empty:
        return pd.DataFrame()
    _, steps = split_searches(steps)
    runs = run_values(summary, steps)
    settings = normalised(summary)[[*RUN_COLUMNS, "framework", *SEARCH_SETTINGS]]
    runs = runs.merge(settings, on=list(RUN_COLUMNS), how="left")
    rows = []
    for key, own in runs.groupby([*SEARCH_KEY, "framework", "runner"], sort=False):
        rows.append(
            {
                **dict(zip((*SEARCH_KEY, "framework", "candidate"), key)),
                **{s: own[s].iloc[0] for s in SEARCH_SETTINGS},
                "runs": len(own),
                "median_step_ms": stats.geometric_mean(own["median_step_time_s"]) * 1e3,
            }
        )
    table = pd.DataFrame(rows)
    table.insert(len(SEARCH_KEY), "runner", table["candidate"].map(candidate_runner))
    fastest = table.groupby([*SEARCH_KEY, "runner"], sort=False)["median_step_ms"].transform("min")
    return table.assign(chosen=table["median_step_ms"] == fastest)
