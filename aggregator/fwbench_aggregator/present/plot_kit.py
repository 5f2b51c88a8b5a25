"""What every plot shares: matplotlib, loaded when first drawn; the runners' colours and the marks for what did not
run or was not resolved; a configuration's label; the legend; and saving a plot with its data beside it
(present.plots draws the studies' questions with them, present.line_plots lines over devices, time, versions and
load)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..analyse.comparison import is_out_of_memory
from ..store.run_columns import CONFIG_COLUMNS


def pyplot():
    """matplotlib's pyplot, drawing into files only (no display is needed or wanted). Imported when a plot is first
    drawn: it takes half a second, which every command would otherwise pay at start-up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# Okabe and Ito's palette, told apart with any colour vision; its vermilion marks what is missing.
RUNNER_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
MISSING_COLOUR = "#D55E00"
FLOOR_COLOUR = "#BBBBBB"
UNRESOLVED_HATCH = "///"
PLOT_DPI = 100


def failure_label(error: str) -> str:
    """The short mark a failed configuration gets in plots: OOM, or failed."""
    return "OOM" if is_out_of_memory(error) else "failed"


@dataclass
class MissingPoint:
    """A configuration a runner could not run, drawn as a marked point in a plot."""

    runner: str
    config: str
    label: str  # OOM or failed
    error: str


@dataclass
class PlotResult:
    key: str
    title: str
    path: Path | None = None  # None: skipped, see reason
    reason: str = ""
    missing: list[MissingPoint] = field(default_factory=list)


def runner_colours(rows: pd.DataFrame) -> dict[str, str]:
    runners = sorted(set(rows["runner"]))
    return {name: RUNNER_COLOURS[i % len(RUNNER_COLOURS)] for i, name in enumerate(runners)}


def config_label(values: dict, varying: Iterable[str], skip: Iterable[str] = ()) -> str:
    parts = []
    for column in CONFIG_COLUMNS:
        if column in skip or (column != "model" and column not in varying):
            continue
        value = values[column]
        if column == "batch_size":
            parts.append(f"batch {value}")
        elif column in ("world_size", "nodes"):
            parts.append(f"{value} {'devices' if column == 'world_size' else 'runners'}")
        elif value != "":
            parts.append(str(value))
    return " ".join(parts)


def varying_columns(frame: pd.DataFrame, columns=CONFIG_COLUMNS) -> set[str]:
    return {c for c in columns if frame[c].nunique() > 1}


def mark_missing(axes, x: float, label: str, colour: str = MISSING_COLOUR) -> None:
    """An 'x' at the bottom of the axes with its label: a point that should be there and is not."""
    from matplotlib.transforms import blended_transform_factory

    transform = blended_transform_factory(axes.transData, axes.transAxes)
    axes.plot(
        [x],
        [0.0],
        marker="x",
        markersize=11,
        markeredgewidth=2.5,
        color=colour,
        transform=transform,
        clip_on=False,
        zorder=5,
        linestyle="none",
    )
    axes.annotate(
        label,
        (x, 0.0),
        xycoords=transform,
        xytext=(0, 9),
        textcoords="offset points",
        ha="center",
        va="bottom",
        fontsize=8,
        fontweight="bold",
        color=colour,
        zorder=5,
    )


# Marks on a line against batch size: (key, matplotlib marker, legend label).
BATCH_MARKS = (("best", "*", "highest throughput"), ("budget", "D", "largest batch under the latency budget"))


def legend(
    axes,
    colours: dict[str, str],
    runners: list[str],
    with_missing: bool,
    lines: bool = False,
    marks: Iterable[str] = (),
    unresolved: bool = False,
    floor: bool = False,
) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Line2D([], [], color=colours[r], marker="o", label=r) if lines else Patch(color=colours[r], label=r)
        for r in runners
    ]
    handles += [
        Line2D(
            [],
            [],
            marker=marker,
            color="#333333",
            linestyle="none",
            markersize=9,
            label=label,
            markerfacecolor="#333333" if key == "best" else "none",
        )
        for key, marker, label in BATCH_MARKS
        if key in marks
    ]
    if unresolved:
        handles.append(
            Patch(facecolor="white", edgecolor="#333333", hatch=UNRESOLVED_HATCH, label="not resolved by the runs")
        )
    if floor:
        handles.append(Patch(color=FLOOR_COLOUR, alpha=0.35, label="noise floor (calibrated)"))
    if with_missing:
        handles.append(
            Line2D(
                [],
                [],
                marker="x",
                color=MISSING_COLOUR,
                linestyle="none",
                markeredgewidth=2.5,
                label="did not run (OOM / failed)",
            )
        )
    axes.legend(handles=handles, fontsize=8, loc="best")


def save_plot(figure, out_dir: Path, key: str, data: pd.DataFrame) -> Path:
    """The plot as KEY.png and the data it draws as KEY.csv beside it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{key}.png"
    figure.savefig(path, dpi=PLOT_DPI)
    pyplot().close(figure)
    data.to_csv(path.with_suffix(".csv"), index=False)
    return path


def series_grid(n: int, ncols_max: int = 3, panel=(4.6, 3.6)):
    ncols = min(n, ncols_max)
    nrows = math.ceil(n / ncols)
    figure, axes = pyplot().subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows + 0.6), squeeze=False)
    for extra in axes.flat[n:]:
        extra.set_visible(False)
    return figure, list(axes.flat[:n])
