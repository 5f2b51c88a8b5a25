"""Every plot fwbench draws (matplotlib, written as PNG files, each with the data it draws in a CSV file beside
it): the studies' questions (relative training and inference time, time per sample and power against batch
size), scaling against devices, and a run's power over time. Failed configurations are drawn as marked missing
points, never as gaps. A ratio is drawn with its interval over runs, and one the runs could not resolve is drawn
hatched and says so: a reader who looks rather than reads must not take it for a result."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..analyse.findings import verdict_counts
from ..store.analysis_columns import SERIES_KEY
from ..store.run_columns import CONFIG_COLUMNS, SERIES_COLUMNS
from .plot_kit import (
    BATCH_MARKS,
    FLOOR_COLOUR,
    UNRESOLVED_HATCH,
    MissingPoint,
    PlotResult,
    config_label,
    failure_label,
    legend,
    mark_missing,
    pyplot,
    runner_colours,
    save_plot,
    series_grid,
    varying_columns,
)

PLOT_QUESTIONS = (
    ("train-relative", "Relative training time (× the fastest runner)"),
    ("infer-gpu-relative", "Relative inference time on GPU (× the fastest runner)"),
    ("infer-cpu-relative", "Relative inference time on CPU (× the fastest runner)"),
    ("infer-time-per-sample", "Inference time per sample against batch size"),
    ("power-vs-batch", "Power and energy per sample against batch size"),
)


def _device_kind(device: str) -> str:
    return str(device).split(":", 1)[0].lower()


def _relative_bars(rows: pd.DataFrame, key: str, title: str, out_dir: Path, colours: dict[str, str]) -> PlotResult:
    """A bar per runner and configuration (and block of alike runs): its median step time over the fastest's, with
    the interval over runs; hatched and labelled where the runs could not resolve the difference; the noise
    floor, where one applies, as a band above 1."""
    result = PlotResult(key, title)
    position = [*CONFIG_COLUMNS, "group"]
    configs = rows.drop_duplicates(position)
    varying = varying_columns(rows)
    labels = [
        config_label(dict(zip(CONFIG_COLUMNS, c)), varying) + (f" [{c[-1]}]" if c[-1] else "")
        for c in configs[position].itertuples(index=False)
    ]
    runners = [r for r in colours if r in set(rows["runner"])]
    width = 0.8 / max(len(runners), 1)
    figure, axes = pyplot().subplots(figsize=(max(6.0, 0.35 * len(labels) * max(len(runners), 1) + 2.5), 4.8))
    index = {tuple(c): i for i, c in enumerate(configs[position].itertuples(index=False))}
    drawn = []
    for j, runner in enumerate(runners):
        for row in rows[rows["runner"] == runner].itertuples(index=False):
            at = index[tuple(getattr(row, c) for c in position)]
            x = at + (j - (len(runners) - 1) / 2) * width
            if row.status == "ok" and not math.isnan(row.ratio_to_fastest):
                unresolved = _unresolved(row)
                axes.bar(
                    x,
                    row.ratio_to_fastest,
                    width=width * 0.95,
                    color=colours[runner],
                    label=runner,
                    hatch=UNRESOLVED_HATCH if unresolved else None,
                    alpha=0.45 if unresolved else 1.0,
                    edgecolor="#333333" if unresolved else colours[runner],
                )
                if not math.isnan(row.ratio_ci_low):
                    axes.errorbar(
                        x,
                        row.ratio_to_fastest,
                        yerr=[[row.ratio_to_fastest - row.ratio_ci_low], [row.ratio_ci_high - row.ratio_to_fastest]],
                        color="#333333",
                        capsize=3,
                        linewidth=1.0,
                    )
                if unresolved:
                    # Inside the bar from its foot: clear of the interval, whose top may run off the axes.
                    axes.annotate(
                        unresolved,
                        (x, 0.0),
                        xytext=(0, 4),
                        textcoords="offset points",
                        rotation=90,
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"},
                    )
                drawn.append(_bar_data(row, labels[at], unresolved))
            elif row.status != "ok":
                mark = failure_label(row.error)
                mark_missing(axes, x, mark)
                result.missing.append(MissingPoint(runner, labels[at], mark, row.error))
    floors = rows["noise_floor"].dropna() if "noise_floor" in rows else pd.Series(dtype=float)
    if len(floors):
        axes.axhspan(
            1.0, 1.0 + float(floors.max()), color=FLOOR_COLOUR, alpha=0.35, zorder=0, label="noise floor (calibrated)"
        )
    axes.axhline(1.0, color="#333333", linewidth=0.8, linestyle="--")
    axes.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=8)
    axes.set_ylabel("median step time ÷ fastest runner's\n(99% interval over runs)")
    # An interval that says only "too noisy" would squash every bar: it runs off the top instead.
    axes.set_ylim(0, max(2.0, 1.3 * max((d["ratio_to_fastest"] for d in drawn), default=1.0)))
    axes.set_title(f"{title}\n{verdict_counts(rows).headline()}", fontsize=10)
    legend(
        axes,
        colours,
        runners,
        bool(result.missing),
        unresolved=any(d["unresolved"] for d in drawn),
        floor=bool(len(floors)),
    )
    figure.tight_layout()
    result.path = save_plot(figure, out_dir, key, pd.DataFrame(drawn))
    return result


def _unresolved(row) -> str:
    """What a bar's label says where its runs could not tell the runner from the fastest ("" where they could)."""
    if row.verdict in ("fastest", "only runner") or bool(row.significant) or row.outcome == "equivalent":
        return ""
    return f"not resolved: resolves {row.resolvable:.0%}" if not math.isnan(row.resolvable) else "not resolved"


def _bar_data(row, configuration: str, unresolved: str) -> dict:
    return {
        "configuration": configuration,
        "runner": row.runner,
        "ratio_to_fastest": row.ratio_to_fastest,
        "ratio_ci_low": row.ratio_ci_low,
        "ratio_ci_high": row.ratio_ci_high,
        "runs": row.runs,
        "verdict": row.verdict,
        "unresolved": unresolved,
        "noise_floor": row.noise_floor,
    }


def batch_marks(optimal: pd.DataFrame) -> dict[tuple, dict[str, int]]:
    """(series..., runner) -> {"best": batch, "budget": batch}: where studies.optimal_batches put the optimum (only
    where the runs resolve it) and the largest batch under the latency budget."""
    marks: dict[tuple, dict[str, int]] = {}
    for row in optimal.itertuples(index=False):
        key = tuple(getattr(row, c) for c in SERIES_KEY)
        own = {}
        if str(row.optimal_status).startswith("best"):
            own["best"] = int(row.best_batch)
        if not pd.isna(row.budget_batch):
            own["budget"] = int(row.budget_batch)
        if own:
            marks[key] = own
    return marks


def _run_points(runs: pd.DataFrame | None, quantities: dict[str, tuple[str, float]]) -> pd.DataFrame:
    """Each run's value of each plotted quantity (column: (per_run's column, scale)), to draw beside the lines."""
    if runs is None or runs.empty:
        return pd.DataFrame()
    return runs.assign(**{column: runs[source] * scale for column, (source, scale) in quantities.items()})


def _series_points(points: pd.DataFrame | None, series: tuple, runner: str, column: str) -> pd.DataFrame:
    """The runs of one series and runner that have `column`."""
    if points is None or points.empty or column not in points:
        return pd.DataFrame()
    own = points[(points["runner"] == runner) & points[column].notna()]
    for name, value in zip(SERIES_COLUMNS, series):
        own = own[own[name] == value]
    return own


def _against_batch(
    rows: pd.DataFrame,
    key: str,
    title: str,
    out_dir: Path,
    colours: dict[str, str],
    panels: list[tuple[str, str]],
    marks: dict[tuple, dict[str, int]] | None = None,
    points: pd.DataFrame | None = None,
) -> PlotResult:
    """One panel per (series, quantity): a line per runner over batch size (a log-2 axis) through the geometric
    means, each run's value (`points`) as a dot beside it, missing points marked, and `marks` (batch_marks) drawn
    on the runners' lines."""
    marks = marks or {}
    result = PlotResult(key, title)
    series = list(rows.groupby(list(SERIES_COLUMNS), sort=True))
    varying = varying_columns(rows, SERIES_COLUMNS)
    figure, axes_list = series_grid(len(series) * len(panels), ncols_max=3 if len(panels) == 1 else len(panels))
    runners = [r for r in colours if r in set(rows["runner"])]
    for s, (values, frame) in enumerate(series):
        label = config_label(dict(zip(SERIES_COLUMNS, values)), varying, skip=("batch_size",))
        for p, (column, ylabel) in enumerate(panels):
            axes = axes_list[s * len(panels) + p]
            for runner in runners:
                own = frame[frame["runner"] == runner].sort_values("batch_size")
                ran = own[(own["status"] == "ok") & own[column].notna()]
                if len(ran):
                    axes.plot(ran["batch_size"], ran[column], marker="o", color=colours[runner], label=runner)
                own_points = _series_points(points, values, runner, column)
                if len(own_points):
                    axes.scatter(
                        own_points["batch_size"],
                        own_points[column],
                        s=10,
                        color=colours[runner],
                        alpha=0.5,
                        zorder=3,
                        linewidths=0,
                    )
                for mark, batch in marks.get((*values, runner), {}).items():
                    point = ran[ran["batch_size"] == batch]
                    marker = dict((k, m) for k, m, _ in BATCH_MARKS)[mark]
                    # The budget's diamond is hollow and larger, so a star on the same batch shows through.
                    best = mark == "best"
                    axes.plot(
                        point["batch_size"],
                        point[column],
                        marker=marker,
                        markersize=15 if best else 17,
                        color=colours[runner],
                        markerfacecolor=colours[runner] if best else "none",
                        markeredgecolor="#222222",
                        markeredgewidth=1.0 if best else 2.0,
                        linestyle="none",
                        zorder=4,
                    )
                for row in own[own["status"] != "ok"].itertuples(index=False):
                    mark = failure_label(row.error)
                    mark_missing(axes, row.batch_size, mark)
                    if p == 0:
                        result.missing.append(MissingPoint(runner, f"{label} batch {row.batch_size}", mark, row.error))
            batches = sorted(set(frame["batch_size"]))
            axes.set_xscale("log", base=2)
            axes.set_xticks(batches, [str(b) for b in batches])
            axes.minorticks_off()
            axes.set_xlim(min(batches) / 1.4, max(batches) * 1.4)
            axes.set_ylim(bottom=0)
            axes.set_xlabel("batch size")
            axes.set_ylabel(ylabel)
            axes.set_title(label, fontsize=9)
            axes.grid(True, alpha=0.3)
            shown = {m for runner in runners for m in marks.get((*values, runner), {})}
            legend(axes, colours, runners, bool((frame["status"] != "ok").any()), lines=True, marks=shown)
    figure.suptitle(title)
    figure.tight_layout()
    drawn = [
        c for c in (*SERIES_COLUMNS, "batch_size", "runner", "status", "runs", *(c for c, _ in panels)) if c in rows
    ]
    data = rows[drawn].assign(value_of="the runs' geometric mean")
    if points is not None and len(points):
        shown = [c for c in (*SERIES_COLUMNS, "batch_size", "runner", "run_id", *(c for c, _ in panels)) if c in points]
        data = pd.concat([data, points[shown].assign(value_of="one run")], ignore_index=True)
    result.path = save_plot(figure, out_dir, key, data)
    return result


ONE_BATCH = "every series ran at one batch size: a line against batch size needs two (the relative plots show it)"


def _several_batches(rows: pd.DataFrame) -> bool:
    """Whether some series (a configuration less its batch size) ran at two batch sizes or more."""
    return bool((rows.groupby(list(SERIES_COLUMNS), sort=False)["batch_size"].nunique() > 1).any())


def make_plots(
    rows: pd.DataFrame, out_dir: Path, optimal: pd.DataFrame | None = None, runs: pd.DataFrame | None = None
) -> list[PlotResult]:
    """The five plots, in PLOT_QUESTIONS order; a question with no data is skipped with its reason. `optimal`
    (studies.optimal_batches) marks the optimal and within-budget batches on the inference plot; `runs`
    (comparison.per_run) draws each run's value beside the lines against batch size."""
    titles = dict(PLOT_QUESTIONS)
    results = []
    if rows.empty:
        return [PlotResult(key, title, reason="no runs in these results") for key, title in PLOT_QUESTIONS]
    colours = runner_colours(rows)
    rows = rows[rows["batch_size"] > 0]  # a failure that left no configuration cannot be placed in a plot
    kinds = rows["device"].map(_device_kind)

    def relative(key: str, subset: pd.DataFrame, empty_reason: str) -> PlotResult:
        if subset.empty:
            return PlotResult(key, titles[key], reason=empty_reason)
        if not (subset["status"] == "ok").any():
            return PlotResult(
                key, titles[key], reason=f"{empty_reason.replace('no ', 'no successful ', 1)}: every one failed"
            )
        return _relative_bars(subset, key, titles[key], out_dir, colours)

    results.append(relative("train-relative", rows[rows["mode"] == "train"], "no training runs in these results"))
    results.append(
        relative(
            "infer-gpu-relative",
            rows[(rows["mode"] == "infer") & (kinds == "gpu")],
            "no GPU inference runs in these results",
        )
    )
    results.append(
        relative(
            "infer-cpu-relative",
            rows[(rows["mode"] == "infer") & (kinds == "cpu")],
            "no CPU inference runs in these results",
        )
    )

    key = "infer-time-per-sample"
    infer = rows[rows["mode"] == "infer"]
    if infer.empty or not (infer["status"] == "ok").any():
        results.append(PlotResult(key, titles[key], reason="no successful inference runs in these results"))
    elif not _several_batches(infer):
        results.append(PlotResult(key, titles[key], reason=ONE_BATCH))
    else:
        marks = batch_marks(optimal) if optimal is not None else {}
        results.append(
            _against_batch(
                infer,
                key,
                titles[key],
                out_dir,
                colours,
                [("ms_per_sample", "median ms per sample")],
                marks,
                _run_points(runs, {"ms_per_sample": ("time_per_sample_s", 1e3)}),
            )
        )

    key = "power-vs-batch"
    has_power = rows.groupby(list(SERIES_COLUMNS), sort=False)["mean_power_w"].transform(lambda v: v.notna().any())
    powered = rows[has_power.astype(bool)]
    if powered.empty:
        results.append(
            PlotResult(key, titles[key], reason="no power readings in these results (telemetry off or unreadable)")
        )
    elif not _several_batches(powered):
        results.append(PlotResult(key, titles[key], reason=ONE_BATCH))
    else:
        results.append(
            _against_batch(
                powered,
                key,
                titles[key],
                out_dir,
                colours,
                [("mean_power_w", "mean power (W)"), ("energy_per_sample_j", "energy per sample (J)")],
                points=_run_points(runs, {"energy_per_sample_j": ("energy_per_sample_j", 1.0)}),
            )
        )
    return results
