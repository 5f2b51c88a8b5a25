"""The evidence a verdict rests on, drawn: for each comparison, each runner's units of evidence (its blocks, or its
runs in rounds) as points in the order they ran, a block's windows faint beside it, the runner's time as a line, and
the ratio with its interval in the panel's title, so that a reader sees the spread and the drift the verdict saw."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..analyse import stats
from ..store.run_columns import CONFIG_COLUMNS
from .plot_kit import PlotResult, runner_colours, save_plot, series_grid
from .titles import configuration_title

KEY = "evidence"
TITLE = "The evidence behind each verdict"
# A page draws this many comparisons at most (the first, in the rows' order); the comparison table holds them all.
MAX_PANELS = 6
# Beyond this ratio between a panel's largest and smallest value, its time axis is logarithmic.
LOG_AXIS_SPREAD = 3.0


def _block_number(name: str) -> int:
    """A block's place in its compare ("...-block3" -> 3), so that block 10 follows block 9."""
    found = re.search(r"(\d+)$", name)
    return int(found.group(1)) if found else 0


def evidence_units(runs: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """One row per window or run drawn: its configuration, group and runner (as the comparison rows label them), its
    unit (block number, or run in the order run), whether it is a window, and its value in ms; then one row per
    block, its windows' geometric mean (the block's value, as analyse.comparison.evidence_of takes it)."""
    columns = [*CONFIG_COLUMNS, "group", "runner", "unit", "window", "value_ms"]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    blocks = summary[["run_id", "runner", "repetition", "process_block"]] if "process_block" in summary else None
    drawn = runs.rename(columns={"runner": "label"})
    if blocks is not None:
        blocks = blocks.rename(columns={"runner": "runner_name"}).drop_duplicates(
            ["run_id", "runner_name", "repetition"]
        )
        drawn = drawn.merge(blocks, on=["run_id", "runner_name", "repetition"], how="left")
    else:
        drawn = drawn.assign(process_block="")
    drawn["process_block"] = drawn["process_block"].fillna("").astype(str)
    drawn["value_ms"] = drawn["median_step_time_s"] * 1e3
    windowed = drawn["process_block"] != ""
    drawn["window"] = windowed
    # Numbered from 1, as a reader counts blocks and runs.
    drawn["unit"] = np.where(windowed, drawn["process_block"].map(_block_number), drawn["repetition"]) + 1
    drawn = drawn.rename(columns={"label": "runner"})
    key = [*CONFIG_COLUMNS, "group", "runner", "unit"]
    per_block = (
        drawn[windowed]
        .groupby(key, sort=False)["value_ms"]
        .apply(lambda v: float(np.exp(np.log(v).mean())))
        .reset_index()
        .assign(window=False)
    )
    return pd.concat([drawn[columns], per_block[columns]], ignore_index=True)


def _ratio_line(judged: pd.DataFrame) -> str:
    fastest = judged.loc[judged["verdict"] == "fastest", "runner"]
    parts = [
        f"{r.runner} ÷ {fastest.iloc[0]} {r.ratio_to_fastest:.3f}"
        + ("" if pd.isna(r.ratio_ci_low) else f" [{r.ratio_ci_low:.3f}, {r.ratio_ci_high:.3f}]")
        for r in judged.itertuples()
        if r.verdict not in ("fastest", "only runner") and len(fastest)
    ]
    return "; ".join(parts)


def _panel(axes, rows: pd.DataFrame, units: pd.DataFrame, colours: dict[str, str]) -> None:
    runners = list(rows["runner"])
    for i, runner in enumerate(runners):
        own = units[units["runner"] == runner]
        colour = colours[runner]
        offset = (i - (len(runners) - 1) / 2) * 0.12  # side by side within a unit, never on top of each other
        windows = own[own["window"]]
        axes.scatter(windows["unit"] + offset, windows["value_ms"], s=8, color=colour, alpha=0.3, linewidths=0)
        whole = own[~own["window"]].sort_values("unit")
        axes.plot(whole["unit"] + offset, whole["value_ms"], "o-", color=colour, markersize=6, linewidth=0.8)
        time_ms = rows.loc[rows["runner"] == runner, "median_step_ms"].iloc[0]
        axes.axhline(time_ms, color=colour, linestyle="--", linewidth=1, label=f"{runner} {time_ms:.4g} ms")
    from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, ScalarFormatter  # loaded with pyplot already

    values = units["value_ms"]
    if values.max() > LOG_AXIS_SPREAD * values.min():
        axes.set_yscale("log")
        axes.yaxis.set_major_formatter(ScalarFormatter())
        # Numbers at 1, 2 and 5 of each decade: a few labels however many decades the values span.
        axes.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axes.yaxis.set_minor_formatter(NullFormatter())
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    in_blocks = bool(units["window"].any())
    axes.set_xlabel("block (windows faint)" if in_blocks else "run, in the order run")
    axes.set_ylabel("ms a step")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")


def evidence_plot(rows: pd.DataFrame, runs: pd.DataFrame, summary: pd.DataFrame, out_dir: Path) -> PlotResult:
    """One panel per comparison (a configuration's block of alike runs with two or more runners that ran), up to
    MAX_PANELS; skipped, with why, where there is none."""
    result = PlotResult(KEY, TITLE)
    ran = rows[(rows["status"] == "ok") & rows["median_step_ms"].notna()] if not rows.empty else rows
    comparisons = (
        [frame for _, frame in ran.groupby([*CONFIG_COLUMNS, "group"], sort=False) if len(frame) >= 2]
        if not ran.empty
        else []
    )
    if not comparisons:
        result.reason = "no configuration ran on two or more runners alike"
        return result
    units = evidence_units(runs, summary)
    shown = comparisons[:MAX_PANELS]
    figure, panels = series_grid(len(shown), ncols_max=2, panel=(6.2, 3.8))
    colours = runner_colours(ran)
    drawn = []
    for axes, frame in zip(panels, shown):
        own = units.merge(frame[[*CONFIG_COLUMNS, "group", "runner"]], on=[*CONFIG_COLUMNS, "group", "runner"])
        _panel(axes, frame, own, colours)
        axes.set_title(f"{configuration_title(frame.iloc[0])}\n{_ratio_line(frame)}", fontsize=9)
        drawn.append(own)
    more = f" (the first {MAX_PANELS} of {len(comparisons)})" if len(comparisons) > MAX_PANELS else ""
    figure.suptitle(
        f"Each runner's blocks or runs; dashed: its time; in brackets: the {stats.CONFIDENCE:.0%} interval{more}",
        fontsize=10,
    )
    figure.tight_layout()
    result.path = save_plot(figure, out_dir, KEY, pd.concat(drawn, ignore_index=True))
    return result
