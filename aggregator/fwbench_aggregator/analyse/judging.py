"""Verdicts: each runner of a configuration against its fastest, on its runs or, for windows of process blocks, on
the blocks both ran in (the paired test), under the noise floor that applies and the design the runs were made under
(a fixed number of runs: stats.compare; a sequential design's looks: analyse.sequential)."""

from __future__ import annotations

import math

import numpy as np

from ..base.frameworks import native_of
from ..store.run_columns import looks_of
from . import stats
from .floors import Floor, busy_floor_note, config_floor
from .sequential import look, plan_for


def judge_configuration(config_rows: list[dict], floors: dict[tuple, Floor], config: tuple, min_effect: float) -> None:
    """Ratios and verdicts within one configuration, in place; a verdict judged with a flagged noise floor says so
    (analyse.floors)."""
    ran = [r for r in config_rows if r["status"] == "ok" and not math.isnan(r["median_step_ms"])]
    applied = config_floor(floors, config, [(r["framework"], r["_alike"]) for r in ran])
    floor = applied.value
    for row in config_rows:
        row.update(
            ratio_to_fastest=math.nan,
            ratio_ci_low=math.nan,
            ratio_ci_high=math.nan,
            p_value=math.nan,
            resolvable=math.nan,
            noise_floor=floor,
            noise_floor_source=applied.source,
            noise_floor_flagged=applied.flagged,
            significant=False,
            outcome="",
        )
    if not ran:
        return
    fastest = min(ran, key=lambda r: r["median_step_ms"])
    for row in ran:
        row["ratio_to_fastest"] = row["median_step_ms"] / fastest["median_step_ms"]
    fastest["verdict"] = "fastest" if len(config_rows) > 1 else "only runner"
    for row in ran:
        if row is fastest:
            continue
        verdict, outcome, c = judged(fastest, row, min_effect, floor)
        row.update(
            ratio_ci_low=c.ci_low,
            ratio_ci_high=c.ci_high,
            p_value=c.p_value,
            resolvable=c.resolvable,
            verdict=verdict + busy_floor_note(applied),
            significant=c.significant,
            outcome=outcome,
        )


def judge_against_native(config_rows: list[dict], min_effect: float) -> None:
    """Each row of a runner on another framework (base.frameworks.native_of: a Keras runner on its backend) judged
    against that framework's own runner in the same block, in place: what it costs to run the framework that way.
    Judged as every other pair (judged), by runs or by blocks in common, under the floor judge_configuration applied;
    other rows keep the columns empty."""
    for row in config_rows:
        row.update(native_runner="", native_ratio=math.nan, native_ratio_ci_low=math.nan, native_ratio_ci_high=math.nan)
        row["native_verdict"] = ""
    ran = [r for r in config_rows if r["status"] == "ok" and not math.isnan(r["median_step_ms"])]
    for row in ran:
        native = [r for r in ran if native_of(row["framework"]) and r["framework"] == native_of(row["framework"])]
        if len(native) != 1:
            continue  # none in this block, or several (versions, keys): no one pair to judge
        verdict, _, c = judged(native[0], row, min_effect, row["noise_floor"])
        # The comparison runs faster against slower: the ratio and interval turned to this row's over the native one's.
        slower = c.slower == row["runner"]
        row.update(
            native_runner=native[0]["runner"],
            native_ratio=c.ratio if slower else 1 / c.ratio,
            native_ratio_ci_low=c.ci_low if slower else 1 / c.ci_high,
            native_ratio_ci_high=c.ci_high if slower else 1 / c.ci_low,
            native_verdict=verdict,
        )


# Windows of process blocks are judged block by block (_evidence_pair); two rows that ran in no block together, such as
# two framework versions each compared in a compare of its own, have nothing to pair, and get this instead of a verdict.
NO_BLOCKS_IN_COMMON = "not judged: no blocks in common (these runs come from different compares)"


def judged(fastest: dict, row: dict, min_effect: float, floor: float) -> tuple[str, str, stats.Comparison]:
    """One runner against the fastest: the verdict, its outcome ("different", "equivalent", "unresolved", or
    "continue" while a sequential design would look again) and the comparison. Runs made under a sequential design
    (max_repetitions) are judged by its looks' levels (analyse.sequential), so that stopping early is paid for;
    a fixed number of runs by stats.compare."""
    budget = max(fastest["max_repetitions"], row["max_repetitions"])
    fast, slow, paired = _evidence_pair(fastest, row)
    unit = "block" if paired else "run"
    if paired and not fast.size:
        return (
            NO_BLOCKS_IN_COMMON,
            "unresolved",
            stats.Comparison(
                fastest["runner"],
                row["runner"],
                0,
                0,
                row["median_step_ms"] / fastest["median_step_ms"],
                paired=True,
                unit=unit,
            ),
        )
    if budget:
        # The looks the runs were made under, as stored; a side that names none (versions') is judged by today's rule.
        made_under = row if row["max_repetitions"] == budget else fastest
        looks = looks_of(made_under["looks"]) if "looks" in made_under else None
        plan = plan_for(budget, paired, min_effect, floor, looks)
        decision = look(plan, fast, slow, fastest["runner"], row["runner"], paired=paired, unit=unit)
        return decision.verdict, decision.outcome, decision.comparison
    c = stats.compare(
        fastest["runner"], fast, row["runner"], slow, min_effect=min_effect, noise_floor=floor, paired=paired, unit=unit
    )
    inside = c.enough_runs and 1 / (1 + c.threshold) < c.ci_low and c.ci_high < 1 + c.threshold
    return c.verdict, "different" if c.significant else "equivalent" if inside else "unresolved", c


def _evidence_pair(fastest: dict, row: dict) -> tuple[np.ndarray, np.ndarray, bool]:
    """What two rows are judged on: their runs, or where both are windows of process blocks the blocks both ran
    in, block by block (the paired test: a block's drift and its processes' draw are common to its windows)."""
    if not (fastest.get("_units") and row.get("_units")):
        return fastest["_medians"], row["_medians"], False
    theirs = dict(zip(row["_units"], row["_medians"]))
    common = [(value, theirs[block]) for block, value in zip(fastest["_units"], fastest["_medians"]) if block in theirs]
    fast, slow = (np.array(values, dtype=float) for values in zip(*common)) if common else (np.array([]),) * 2
    return fast, slow, True
