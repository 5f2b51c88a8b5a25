"""What the progress line says while blocks run: which block of how many, and where the comparison stands, each
runner's time over the fastest's with the interval its blocks give so far (a terminal shows it; nothing else does)."""

from __future__ import annotations

import math

import pandas as pd


def standing(rows: pd.DataFrame) -> str:
    """One configuration's comparison rows as "tensorflow 1.37x torch [1.20, 1.58]" per runner slower than the
    fastest, "; "-joined; the interval left out before there are blocks enough for one; "" before two runners have
    a time."""
    if rows.empty or "ratio_to_fastest" not in rows:
        return ""
    ran = rows[rows["ratio_to_fastest"].notna()]
    if len(ran) < 2:
        return ""
    fastest = ran.loc[ran["ratio_to_fastest"].idxmin(), "runner"]
    parts = []
    for row in ran[ran["runner"] != fastest].itertuples():
        text = f"{row.runner} {row.ratio_to_fastest:.2f}x {fastest}"
        if not (math.isnan(row.ratio_ci_low) or math.isnan(row.ratio_ci_high)):
            text += f" [{row.ratio_ci_low:.2f}, {row.ratio_ci_high:.2f}]"
        parts.append(text)
    return "; ".join(parts)


def block_progress(block: int, budget: int, rows: pd.DataFrame | None = None) -> str:
    """ "block 3 of 8" (1-based), and where the comparison stood after the block before, where rows are given."""
    where = standing(rows) if rows is not None else ""
    return f"block {block} of {budget}" + (f": {where}" if where else "")
