"""Why a sequential design's looks end, read from the comparison rows its looks made (analyse.comparison, judged by
analyse.sequential): for compare's and a sweep's rounds, and for the reports that name what was left unsettled."""

from __future__ import annotations

import numpy as np
import pandas as pd


def stop_reason(rows: pd.DataFrame, runs: int, max_runs: int) -> str:
    """Why a configuration's rounds end after this look ("settled": every verdict against the fastest called a
    difference or equivalence; "run budget"; "futile": at the runs' spread the whole budget would most likely leave a
    verdict unresolved, or could not resolve even a twofold difference), or "" while any verdict would look again."""
    outcomes = set(rows.loc[(rows["status"] == "ok") & (rows["outcome"] != ""), "outcome"])
    if not outcomes or "continue" in outcomes:
        return ""
    if outcomes <= {"different", "equivalent"}:
        return "settled"
    return "run budget" if runs >= max_runs else "futile"


def unsettled(rows: pd.DataFrame) -> pd.DataFrame:
    """The verdicts runs made under a sequential design (max_repetitions) left unsettled, each with why: "stopped"
    (its rounds ended before the rule settled it: a time budget ran out, a runner failed, or the sweep was stopped),
    "run budget" (max_repetitions spent) or "futile" (at its runs' spread the whole budget would most likely not
    settle it). Comparison rows (analyse.comparison), those judged against the fastest."""
    if rows.empty:
        return rows.assign(why=pd.Series(dtype=object))
    mine = rows[
        (rows["status"] == "ok") & (rows["max_repetitions"] > 0) & rows["outcome"].isin(["continue", "unresolved"])
    ]
    why = np.select(
        [mine["outcome"] == "continue", mine["runs"] >= mine["max_repetitions"]], ["stopped", "run budget"], "futile"
    )
    return mine.assign(why=why)
