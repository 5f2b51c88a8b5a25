"""Noise floors: what `fwbench calibrate` stores for a configuration and framework, and which floor a comparison of
that configuration applies.

A calibration remembers whether its runs were on a quiet device (`flagged`: why not, from the runs' device_flags,
"" when they were). The rule, per configuration and framework: a floor calibrated on a quiet device is applied, the
largest where there are several, and a flagged one beside it is not; a flagged floor is applied only where no quiet
one exists, and then every verdict it judged says so. Why apply it at all: load between an A/A pair's runs widens
its interval, so a busy host's floor is mostly the larger one, and applying it errs towards "no significant
difference", the safe side for a verdict; dropping it would call differences this host was never shown to resolve.
Over a configuration's frameworks the largest applied floor counts (a difference must clear every runner's noise).
Each comparison row says which floor it applied (noise_floor_source) and why that one was flagged.

A floor applies only to runs of its calibration's key (comparability_columns.FLOOR_KEY_COLUMNS: the framework's version, image,
settings, the device model and the protocol): noise measured on one version or machine says nothing of another's.
A calibration from before the key was recorded is unknown for it, and applies only to runs unknown for it too.
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..store.comparability_columns import FLOOR_KEY_COLUMNS
from ..store.run_columns import CONFIG_COLUMNS
from ..store.schema import CALIBRATION_COLUMNS
from . import stats
from .alike import key_texts


class Floor(NamedTuple):
    value: float  # NaN where none applies
    source: str  # which calibration: "calibrated 2026-11-26 on torch, 6 runs per instance", or "none"
    flagged: str  # why the applied calibration's runs were not quiet; "" for a quiet one, or none


NO_FLOOR = Floor(math.nan, "none", "")


def calibration_row(
    config: dict,
    framework: str,
    comparison: stats.Comparison,
    flagged: str = "",
    calibrated_at_unix_s: float = math.nan,
) -> dict:
    """What `fwbench calibrate` stores for one configuration and framework (schema.CALIBRATION_COLUMNS): with why
    its runs were not quiet (comparison.flag_summary), and when it ran."""
    row = {
        **{c: config[c] for c in CONFIG_COLUMNS},
        **{c: config.get(c, "") for c in FLOOR_KEY_COLUMNS},
        "framework": framework,
        "runs": min(comparison.runs_faster, comparison.runs_slower),
        "aa_ratio": comparison.ratio,
        "aa_ci_low": comparison.ci_low,
        "aa_ci_high": comparison.ci_high,
        "noise_floor": stats.noise_floor(comparison),
        "flagged": flagged,
        "calibrated_at_unix_s": calibrated_at_unix_s,
    }
    return {column: row[column] for column in CALIBRATION_COLUMNS}


def _source(row: pd.Series) -> str:
    at = pd.to_numeric(row.get("calibrated_at_unix_s"), errors="coerce")
    when = time.strftime("%Y-%m-%d", time.gmtime(float(at))) if pd.notna(at) else "(date not recorded)"
    runs = pd.to_numeric(row.get("runs"), errors="coerce")
    return f"calibrated {when} on {row['framework']}" + (f", {int(runs)} runs per instance" if pd.notna(runs) else "")


def noise_floors(calibration: pd.DataFrame) -> dict[tuple, Floor]:
    """(configuration..., framework, key...) -> the floor a comparison applies to runs of that key (FLOOR_KEY_COLUMNS,
    as text), by the rule above. `calibration` is normalised (run_values.normalised); rows from before calibrations
    were flagged count as quiet."""
    if calibration.empty or "noise_floor" not in calibration:
        return {}
    frame = (
        key_texts(calibration, FLOOR_KEY_COLUMNS)
        .assign(
            noise_floor=pd.to_numeric(calibration["noise_floor"], errors="coerce"),
            flagged=calibration["flagged"].fillna("").astype(str) if "flagged" in calibration else "",
        )
        .dropna(subset=["noise_floor"])
        .reset_index(drop=True)
    )
    floors = {}
    for key, group in frame.groupby([*CONFIG_COLUMNS, "framework", *FLOOR_KEY_COLUMNS], sort=False):
        quiet, busy = group[group["flagged"] == ""], group[group["flagged"] != ""]
        if len(quiet):
            chosen = quiet.loc[quiet["noise_floor"].idxmax()]
            aside = f"; not applied: {len(busy)} calibration(s) on a busy host" if len(busy) else ""
            floors[key] = Floor(float(chosen["noise_floor"]), _source(chosen) + aside, "")
        else:
            chosen = busy.loc[busy["noise_floor"].idxmax()]
            floors[key] = Floor(
                float(chosen["noise_floor"]),
                f"{_source(chosen)}, on a busy host ({chosen['flagged']}): applied, as no quiet calibration exists",
                chosen["flagged"],
            )
    return floors


def config_floor(floors: dict[tuple, Floor], config: tuple, runs) -> Floor:
    """The floor a configuration's verdicts apply: the largest of the floors of its runs' keys. `runs`: for each row
    judged, (framework, {column: key text}) over the FLOOR_KEY_COLUMNS the caller knows; a floor applies where its
    key agrees on every one of them."""
    width = len(CONFIG_COLUMNS)
    known = []
    for calibrated, floor in floors.items():
        key = dict(zip(FLOOR_KEY_COLUMNS, calibrated[width + 1 :]))
        if calibrated[:width] == tuple(config) and any(
            calibrated[width] == framework and all(key.get(c) == v for c, v in alike.items())
            for framework, alike in runs
        ):
            known.append(floor)
    return max(known, key=lambda floor: floor.value) if known else NO_FLOOR


def busy_floor_note(floor: Floor) -> str:
    """What a verdict judged with a flagged floor adds; "" for a quiet floor or none."""
    return f"; noise floor calibrated on a busy host ({floor.flagged})" if floor.flagged else ""


class FloorPrecision(NamedTuple):
    """How precisely A/A runs pin their noise floor (stats.noise_floor): the floor, the ends of its interval, and its
    half-width over the floor (0.2: the floor is known within +-20% of itself)."""

    floor: float
    low: float
    high: float

    @property
    def relative(self) -> float:
        return (self.high - self.low) / 2 / self.floor if self.floor > 0 else math.inf


def floor_precision(run_medians_a: stats.Values, run_medians_b: stats.Values) -> FloorPrecision:
    """The noise floor of two instances' runs (stats.compare's: the far end of the Welch interval on their log ratio,
    the instances' offset plus t times the runs' spread over their number) and its own interval at stats.CONFIDENCE.

    The floor's uncertainty is that of the runs' spread, the host's fact more runs pin down: the chi-square interval
    of the pooled variance of the log run medians (scipy.stats.chi2, n_a + n_b - 2 degrees of freedom), carried
    through the floor's formula with its offset and t held. (The floor's offset and t shrink as runs are added, at the
    rate its whole sampling spread does, so an interval of the whole floor would never narrow relative to it.)"""
    from scipy import stats as scipy_stats

    a, b = np.asarray(run_medians_a, dtype=float), np.asarray(run_medians_b, dtype=float)
    c = stats.compare("a", a, "b", b)
    if not c.enough_runs:
        raise ValueError(f"a floor needs {stats.MIN_REPETITIONS} runs per instance; got {a.size} and {b.size}")
    floor = stats.noise_floor(c)
    df = a.size + b.size - 2
    spread = c.spread
    if not spread > 0:
        return FloorPrecision(floor, floor, floor)  # nothing varies: the floor is the offset alone
    offset = math.log(c.ratio)
    term = math.log1p(floor) - offset  # t times the spread over the runs: the part the spread scales
    low, high = (term * math.sqrt(df / scipy_stats.chi2.ppf(q, df)) for q in (1 - stats.ALPHA / 2, stats.ALPHA / 2))
    return FloorPrecision(floor, math.expm1(offset + low), math.expm1(offset + high))
