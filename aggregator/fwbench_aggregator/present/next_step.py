"""What to do after a compare that left its verdict unresolved: what the runs can and cannot tell, and the next step
with its cost in this compare's own time (more blocks or runs for a stated resolution, a time budget, a quieter
host)."""

from __future__ import annotations

import math

import pandas as pd

from ..analyse import stats


def _more_units(resolvable: float, units: int, target: float) -> int:
    """About how many more units resolve `target`, where `units` resolve `resolvable`: a half-width shrinks as one over
    the square root of the units (the t quantile's own shrinking left out, so this errs high for few units)."""
    needed = units * (math.log1p(resolvable) / math.log1p(target)) ** 2
    return max(math.ceil(needed) - units, 0)


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def next_step(rows: pd.DataFrame) -> str:
    """One line for the first unresolved row of a compare ("" where every verdict settled): the difference its runs
    resolve, the more blocks (or runs) and time that would tell whether the difference seen is real (or resolve the
    threshold, where the difference seen lies below it), and the options that buy them."""
    ran = rows[
        (rows["status"] == "ok")
        & rows["outcome"].isin(["unresolved", "continue"])
        & ~rows["verdict"].isin(["fastest", "only runner"])  # the fastest is the one each other row is judged against
    ]
    ran = ran[ran["resolvable"].notna() & (ran["resolvable"] > 0)]
    if ran.empty:
        return ""
    r = ran.iloc[0]
    blocks = int(r.get("blocks", 0) or 0)
    unit, units = ("block", blocks) if blocks > 0 else ("run", int(r["runs"]))
    if r["resolvable"] > stats.TOO_NOISY:  # more units at this spread would take hours: the host is what to change
        return (
            f"what these {unit}s tell: not even a twofold difference (they varied {r['run_spread']:.0%}), so more "
            f"{unit}s at this spread would not settle it. Next: rerun on a quiet host, e.g. with --wait-for-quiet 60"
        )
    floor = 0.0 if pd.isna(r["noise_floor"]) else float(r["noise_floor"])
    threshold = max(stats.MIN_EFFECT, floor)
    seen = float(r["ratio_to_fastest"]) - 1.0
    target = seen if seen > threshold else threshold
    more = _more_units(float(r["resolvable"]), units, target)
    told = (
        f"what these {unit}s tell: a difference above {r['resolvable']:.1%} would have been called, a smaller one "
        "cannot be told from this host's noise"
    )
    if more == 0:
        return told
    question = f"whether the {seen:.1%} seen is real" if target == seen else f"a {target:.1%} difference"
    pace_s = float(r["wall_s"]) / units if units and not pd.isna(r["wall_s"]) else math.nan
    cost = f", about {_duration(more * pace_s)} at this pace" if math.isfinite(pace_s) else ""
    budget = f" (or --time-budget-s {math.ceil(more * pace_s)})" if math.isfinite(pace_s) else ""
    return (
        f"{told}. Next: about {more} more {unit}s{cost}, would tell {question}: --max-repetitions {units + more}"
        f"{budget}; on a quieter host (these {unit}s varied {r['run_spread']:.0%}) fewer {unit}s resolve as much"
    )
