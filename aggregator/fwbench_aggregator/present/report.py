"""The comparison report over many runs: one row per configuration and runner, the plots the published
studies drew (relative training and inference time, time per sample and power against batch size), and one
self-contained HTML file that holds them all.

Works from the `summary` and `steps` frames alone (as results.py builds them, concatenated over runs); no
runner is needed. Failed runs (out of memory and the like) are rows of `summary` with status "failed" and no
steps: they appear in the tables with their error and in the plots as marked missing points, never as gaps.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed or wanted

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402
from rich.markup import escape  # noqa: E402

from . import stats, studies  # noqa: E402
from .analysis import (  # noqa: E402
    CONFIG_COLUMNS, SCALING_COLUMNS, SERIES_COLUMNS, comparison_rows, flagged_verdict, has_scaling, is_out_of_memory,
    scaling_rows, strategy_pairs,
)
from .console import Column, out_console, print_table  # noqa: E402

# Runner colours; red is kept for the missing (failed) markers so they cannot be mistaken for a runner.
RUNNER_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")
MISSING_COLOUR = "#e00000"
PLOT_DPI = 100


def failure_label(error: str) -> str:
    """The short mark a failed configuration gets in plots: OOM, or failed."""
    return "OOM" if is_out_of_memory(error) else "failed"


# ------------------------------------------------------------------------------------- table outputs

DISPLAY_COLUMNS = {
    "model": "model", "model_options": "options", "mode": "mode", "batch_size": "batch", "input_shape": "input",
    "precision": "precision", "device": "device", "world_size": "devices", "nodes": "runners", "runner": "runner",
    "framework_version": "version",
    "runs": "runs", "median_step_ms": "median ms", "run_spread": "run spread", "ms_per_sample": "ms/sample",
    "throughput_samples_per_s": "samples/s", "energy_per_sample_j": "J/sample", "mean_power_w": "mean W",
    "ratio_to_fastest": "× fastest", "noise_floor": "noise floor", "straggler_spread": "straggler spread",
    "verdict": "verdict",
}
PERCENT_COLUMNS = ("run_spread", "noise_floor", "straggler_spread", "scaling_efficiency")


def _cell(value, column: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "–"
    if isinstance(value, (float, np.floating)):
        if column in PERCENT_COLUMNS:
            return f"{value:.1%}"
        if column == "ratio_to_fastest":
            return f"{value:.3f}"
        if column in ("energy_per_sample_j",):
            return f"{value:.4g}"
        return f"{value:.2f}" if abs(value) < 1e5 else f"{value:.4g}"
    return str(value)


def display_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows as text, columns renamed for reading: what the terminal, Markdown and HTML tables show.
    A verdict whose runs were not on a quiet device says so."""
    shown = rows[[c for c in DISPLAY_COLUMNS if c in rows]].copy()
    for column in shown:
        shown[column] = [_cell(v, column) for v in shown[column]]
    if "verdict" in shown and "flagged" in rows:
        shown["verdict"] = [flagged_verdict(v, f) for v, f in zip(shown["verdict"], rows["flagged"])]
    return shown.rename(columns=DISPLAY_COLUMNS)


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (no tabulate needed)."""
    def escape(text) -> str:
        return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

    header = "| " + " | ".join(escape(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(escape(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"


# Terminal layout of the displayed columns: figures right-aligned; the configuration and runner name
# each row; the verdict is prose that wraps.
_NUMERIC = ("batch", "devices", "runners", "median ms", "ms/sample", "samples/s", "J/sample", "mean W", "× fastest")
_KEYS = tuple(DISPLAY_COLUMNS[c] for c in (*CONFIG_COLUMNS, "runner"))
VERDICT_WIDTH = 32


def print_rows(rows: pd.DataFrame, console=None, title: str = "fwbench comparison") -> None:
    """The rows as a table on the terminal, one section per configuration, failed runs in red."""
    shown = display_frame(rows)
    columns = [
        Column(c, numeric=c in _NUMERIC, key=c in _KEYS, wrap_at=VERDICT_WIDTH if c == "verdict" else None)
        for c in shown.columns
    ]
    groups = [tuple(r) for r in rows[list(CONFIG_COLUMNS)].itertuples(index=False)] if not rows.empty else []
    styles = ["red" if status != "ok" else None for status in rows["status"]] if not rows.empty else []
    print_table(columns, list(shown.itertuples(index=False)), title, console, styles, groups)


def write_tables(rows: pd.DataFrame, out_dir: Path, stem: str = "comparison") -> list[Path]:
    """comparison.csv (every column, full precision), comparison.md and comparison.html (as displayed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path, html_path = (out_dir / f"{stem}.{ext}" for ext in ("csv", "md", "html"))
    rows.to_csv(csv_path, index=False)
    shown = display_frame(rows)
    md_path.write_text(to_markdown(shown))
    html_path.write_text(_standalone_html("fwbench comparison", _table_html(shown)))
    return [csv_path, md_path, html_path]


# ------------------------------------------------------------------------------------------------ plots


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


PLOT_QUESTIONS = (
    ("train-relative", "Relative training time (× the fastest runner)"),
    ("infer-gpu-relative", "Relative inference time on GPU (× the fastest runner)"),
    ("infer-cpu-relative", "Relative inference time on CPU (× the fastest runner)"),
    ("infer-time-per-sample", "Inference time per sample against batch size"),
    ("power-vs-batch", "Power and energy per sample against batch size"),
)


def _device_kind(device: str) -> str:
    return str(device).split(":", 1)[0].lower()


def _runner_colours(rows: pd.DataFrame) -> dict[str, str]:
    runners = sorted(set(rows["runner"]))
    return {name: RUNNER_COLOURS[i % len(RUNNER_COLOURS)] for i, name in enumerate(runners)}


def _config_label(values: dict, varying: Iterable[str], skip: Iterable[str] = ()) -> str:
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


def _varying(frame: pd.DataFrame, columns=CONFIG_COLUMNS) -> set[str]:
    return {c for c in columns if frame[c].nunique() > 1}


def _mark_missing(axes, x: float, label: str, colour: str = MISSING_COLOUR) -> None:
    """An 'x' at the bottom of the axes with its label: a point that should be there and is not."""
    transform = blended_transform_factory(axes.transData, axes.transAxes)
    axes.plot([x], [0.0], marker="x", markersize=11, markeredgewidth=2.5, color=colour, transform=transform,
              clip_on=False, zorder=5, linestyle="none")
    axes.annotate(label, (x, 0.0), xycoords=transform, xytext=(0, 9), textcoords="offset points", ha="center",
                  va="bottom", fontsize=8, fontweight="bold", color=colour, zorder=5)


def _relative_bars(rows: pd.DataFrame, key: str, title: str, out_dir: Path, colours: dict[str, str]) -> PlotResult:
    result = PlotResult(key, title)
    configs = rows.drop_duplicates(list(CONFIG_COLUMNS))
    varying = _varying(rows)
    labels = [_config_label(dict(zip(CONFIG_COLUMNS, c)), varying) for c in configs[list(CONFIG_COLUMNS)].itertuples(index=False)]
    runners = [r for r in colours if r in set(rows["runner"])]
    width = 0.8 / max(len(runners), 1)
    figure, axes = plt.subplots(figsize=(max(6.0, 0.35 * len(labels) * max(len(runners), 1) + 2.5), 4.8))
    index = {tuple(c): i for i, c in enumerate(configs[list(CONFIG_COLUMNS)].itertuples(index=False))}
    for j, runner in enumerate(runners):
        own = rows[rows["runner"] == runner]
        for row in own.itertuples(index=False):
            x = index[tuple(getattr(row, c) for c in CONFIG_COLUMNS)] + (j - (len(runners) - 1) / 2) * width
            if row.status == "ok" and not math.isnan(row.ratio_to_fastest):
                axes.bar(x, row.ratio_to_fastest, width=width * 0.95, color=colours[runner],
                         label=runner)
            elif row.status != "ok":
                mark = failure_label(row.error)
                _mark_missing(axes, x, mark)
                result.missing.append(MissingPoint(runner, labels[index[tuple(getattr(row, c) for c in CONFIG_COLUMNS)]], mark, row.error))
    axes.axhline(1.0, color="#333333", linewidth=0.8, linestyle="--")
    axes.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=8)
    axes.set_ylabel("median step time ÷ fastest runner's")
    axes.set_ylim(bottom=0)
    axes.set_title(f"{title}\n{studies.verdict_counts(rows).headline()}", fontsize=10)
    _legend(axes, colours, runners, bool(result.missing))
    figure.tight_layout()
    result.path = _save(figure, out_dir, key)
    return result


# Marks on a line against batch size: (key, matplotlib marker, legend label).
BATCH_MARKS = (("best", "*", "highest throughput"), ("budget", "D", "largest batch under the latency budget"))


def _legend(axes, colours: dict[str, str], runners: list[str], with_missing: bool, lines: bool = False,
            marks: Iterable[str] = ()) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], color=colours[r], marker="o", label=r) if lines else Patch(color=colours[r], label=r) for r in runners]
    handles += [Line2D([], [], marker=marker, color="#333333", linestyle="none", markersize=9, label=label,
                       markerfacecolor="#333333" if key == "best" else "none") for key, marker, label in BATCH_MARKS
                if key in marks]
    if with_missing:
        handles.append(Line2D([], [], marker="x", color=MISSING_COLOUR, linestyle="none", markeredgewidth=2.5,
                              label="did not run (OOM / failed)"))
    axes.legend(handles=handles, fontsize=8, loc="best")


def _save(figure, out_dir: Path, key: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{key}.png"
    figure.savefig(path, dpi=PLOT_DPI)
    plt.close(figure)
    return path


def _series_grid(n: int, ncols_max: int = 3, panel=(4.6, 3.6)):
    ncols = min(n, ncols_max)
    nrows = math.ceil(n / ncols)
    figure, axes = plt.subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows + 0.6), squeeze=False)
    for extra in axes.flat[n:]:
        extra.set_visible(False)
    return figure, list(axes.flat[:n])


def batch_marks(optimal: pd.DataFrame) -> dict[tuple, dict[str, int]]:
    """(series..., runner) -> {"best": batch, "budget": batch}: where studies.optimal_batches put the optimum (only
    where the runs resolve it) and the largest batch under the latency budget."""
    marks: dict[tuple, dict[str, int]] = {}
    for row in optimal.itertuples(index=False):
        key = tuple(getattr(row, c) for c in studies.SERIES_KEY)
        own = {}
        if str(row.optimal_status).startswith("best"):
            own["best"] = int(row.best_batch)
        if not pd.isna(row.budget_batch):
            own["budget"] = int(row.budget_batch)
        if own:
            marks[key] = own
    return marks


def _against_batch(rows: pd.DataFrame, key: str, title: str, out_dir: Path, colours: dict[str, str],
                   panels: list[tuple[str, str]], marks: dict[tuple, dict[str, int]] | None = None) -> PlotResult:
    """One panel per (series, quantity): a line per runner over batch size (a log-2 axis), missing points marked,
    and `marks` (batch_marks) drawn on the runners' lines."""
    marks = marks or {}
    result = PlotResult(key, title)
    series = list(rows.groupby(list(SERIES_COLUMNS), sort=True))
    varying = _varying(rows, SERIES_COLUMNS)
    figure, axes_list = _series_grid(len(series) * len(panels), ncols_max=3 if len(panels) == 1 else len(panels))
    runners = [r for r in colours if r in set(rows["runner"])]
    for s, (values, frame) in enumerate(series):
        label = _config_label(dict(zip(SERIES_COLUMNS, values)), varying, skip=("batch_size",))
        for p, (column, ylabel) in enumerate(panels):
            axes = axes_list[s * len(panels) + p]
            for runner in runners:
                own = frame[frame["runner"] == runner].sort_values("batch_size")
                ran = own[(own["status"] == "ok") & own[column].notna()]
                if len(ran):
                    axes.plot(ran["batch_size"], ran[column], marker="o", color=colours[runner], label=runner)
                for mark, batch in marks.get((*values, runner), {}).items():
                    point = ran[ran["batch_size"] == batch]
                    marker = dict((k, m) for k, m, _ in BATCH_MARKS)[mark]
                    # The budget's diamond is hollow and larger, so a star on the same batch shows through.
                    best = mark == "best"
                    axes.plot(point["batch_size"], point[column], marker=marker, markersize=15 if best else 17,
                              color=colours[runner], markerfacecolor=colours[runner] if best else "none",
                              markeredgecolor="#222222", markeredgewidth=1.0 if best else 2.0, linestyle="none", zorder=4)
                for row in own[own["status"] != "ok"].itertuples(index=False):
                    mark = failure_label(row.error)
                    _mark_missing(axes, row.batch_size, mark)
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
            _legend(axes, colours, runners, bool((frame["status"] != "ok").any()), lines=True, marks=shown)
    figure.suptitle(title)
    figure.tight_layout()
    result.path = _save(figure, out_dir, key)
    return result


def make_plots(rows: pd.DataFrame, out_dir: Path, optimal: pd.DataFrame | None = None) -> list[PlotResult]:
    """The five plots, in PLOT_QUESTIONS order; a question with no data is skipped with its reason. `optimal`
    (studies.optimal_batches) marks the optimal and within-budget batches on the inference plot."""
    titles = dict(PLOT_QUESTIONS)
    results = []
    if rows.empty:
        return [PlotResult(key, title, reason="no runs in these results") for key, title in PLOT_QUESTIONS]
    colours = _runner_colours(rows)
    rows = rows[rows["batch_size"] > 0]  # a failure that left no configuration cannot be placed in a plot
    kinds = rows["device"].map(_device_kind)

    def relative(key: str, subset: pd.DataFrame, empty_reason: str) -> PlotResult:
        if subset.empty:
            return PlotResult(key, titles[key], reason=empty_reason)
        if not (subset["status"] == "ok").any():
            return PlotResult(key, titles[key], reason=f"{empty_reason.replace('no ', 'no successful ', 1)}: every one failed")
        return _relative_bars(subset, key, titles[key], out_dir, colours)

    results.append(relative("train-relative", rows[rows["mode"] == "train"], "no training runs in these results"))
    results.append(relative("infer-gpu-relative", rows[(rows["mode"] == "infer") & (kinds == "gpu")],
                            "no GPU inference runs in these results"))
    results.append(relative("infer-cpu-relative", rows[(rows["mode"] == "infer") & (kinds == "cpu")],
                            "no CPU inference runs in these results"))

    key = "infer-time-per-sample"
    infer = rows[rows["mode"] == "infer"]
    if infer.empty or not (infer["status"] == "ok").any():
        results.append(PlotResult(key, titles[key], reason="no successful inference runs in these results"))
    else:
        marks = batch_marks(optimal) if optimal is not None else {}
        results.append(_against_batch(infer, key, titles[key], out_dir, colours, [("ms_per_sample", "median ms per sample")],
                                      marks))

    key = "power-vs-batch"
    has_power = rows.groupby(list(SERIES_COLUMNS), sort=False)["mean_power_w"].transform(lambda v: v.notna().any())
    powered = rows[has_power.astype(bool)]
    if powered.empty:
        results.append(PlotResult(key, titles[key], reason="no power readings in these results (telemetry off or unreadable)"))
    else:
        results.append(_against_batch(powered, key, titles[key], out_dir, colours,
                                      [("mean_power_w", "mean power (W)"), ("energy_per_sample_j", "energy per sample (J)")]))
    return results


# ---------------------------------------------------------------------------------------------- scaling

SCALING_DISPLAY = {
    **{c: DISPLAY_COLUMNS[c] for c in SCALING_COLUMNS}, "runner": "runner", "world_size": "devices", "nodes": "runners",
    "runs": "runs", "throughput_samples_per_s": "samples/s", "baseline_throughput_samples_per_s": "samples/s on 1",
    "scaling_efficiency": "efficiency", "straggler_spread": "straggler spread", "efficiency_note": "note",
}
# The studies' head-to-head tables: (key, title, first strategy, second strategy).
STRATEGY_TABLES = (
    ("dp-vs-ddp", "DataParallel vs DistributedDataParallel", "dp", "ddp"),
    ("ddp-vs-mirrored", "DistributedDataParallel vs MirroredStrategy", "ddp", "mirrored"),
)


def scaling_display(scaling: pd.DataFrame) -> pd.DataFrame:
    shown = scaling[list(SCALING_DISPLAY)].copy()
    for column in shown:
        shown[column] = [_cell(v, column) for v in shown[column]]
    return shown.rename(columns=SCALING_DISPLAY)


def pairs_display(pairs: pd.DataFrame, first: str, second: str) -> pd.DataFrame:
    shown = pd.DataFrame({
        **{DISPLAY_COLUMNS[c]: pairs[c].astype(str) for c in CONFIG_COLUMNS},
        first: pairs["runner_a"], f"{first} samples/s": [_cell(v) for v in pairs["throughput_a"]],
        second: pairs["runner_b"], f"{second} samples/s": [_cell(v) for v in pairs["throughput_b"]],
        "ratio": [_cell(v, "ratio_to_fastest") for v in pairs["ratio_b_to_a"]],
    })
    return shown


def print_scaling(scaling: pd.DataFrame, console=None) -> None:
    """Throughput against devices and the scaling efficiency; the configuration columns that vary only."""
    scaling = scaling.sort_values([*SCALING_COLUMNS, "runner_name", "world_size", "nodes", "strategy"], kind="stable")
    same = [c for c in SCALING_COLUMNS if scaling[c].nunique() <= 1]
    title = "scaling: throughput against devices"
    if same and len(scaling):
        first = scaling.iloc[0]
        title += " (" + ", ".join(f"batch {first[c]} per device" if c == "batch_size" else str(first[c])
                                  for c in same if first[c] != "") + ")"
    shown = scaling_display(scaling).drop(columns=[SCALING_DISPLAY[c] for c in same])
    if not (scaling["efficiency_note"] != "").any():
        shown = shown.drop(columns="note")
    columns = [Column(c, numeric=c in _NUMERIC or c in ("efficiency", "samples/s on 1", "straggler spread"),
                      key=c in _KEYS, wrap_at=VERDICT_WIDTH if c == "note" else None) for c in shown.columns]
    groups = [tuple(r) for r in scaling[list(SCALING_COLUMNS)].itertuples(index=False)]
    print_table(columns, list(shown.itertuples(index=False)), title, console, groups=groups)


def scaling_plot(scaling: pd.DataFrame, out_dir: Path, key: str = "scaling") -> PlotResult:
    """Per configuration: throughput and scaling efficiency against devices, one line per runner and strategy."""
    title = "Throughput and scaling efficiency against devices"
    if not has_scaling(scaling):
        return PlotResult(key, title, reason="no configuration ran at more than one number of devices")
    colours = _runner_colours(scaling)
    series = [(values, frame) for values, frame in scaling.groupby(list(SCALING_COLUMNS), sort=True)
              if frame["world_size"].nunique() > 1]
    panels = (("throughput_samples_per_s", "samples/s (job)"), ("scaling_efficiency", "efficiency (÷ N × one device)"))
    figure, axes_list = _series_grid(len(series) * len(panels), ncols_max=len(panels))
    for s, (values, frame) in enumerate(series):
        config = dict(zip(SCALING_COLUMNS, values))
        label = " ".join(f"batch {v}/device" if c == "batch_size" else str(v)
                         for c, v in config.items() if v != "" and c != "model_options")
        # Each strategy's line starts at its one-device baseline; a baseline that has such lines is not drawn alone.
        spread = set(frame.loc[frame["world_size"] > 1, "runner_name"])
        lines = frame[~((frame["strategy"] == "single") & frame["runner_name"].isin(spread))]
        for p, (column, ylabel) in enumerate(panels):
            axes = axes_list[s * len(panels) + p]
            for runner, own in lines.groupby("runner", sort=True):
                points = own.dropna(subset=[column]).groupby("world_size")[column].mean()
                baseline = own["baseline_throughput_samples_per_s"].dropna()
                if 1 not in points.index and len(baseline):
                    one = baseline.iloc[0] if column == "throughput_samples_per_s" else 1.0
                    points = pd.concat([pd.Series([one], index=[1]), points])
                if len(points):
                    axes.plot(points.index, points.values, marker="o", color=colours[runner], label=runner)
            sizes = sorted({1, *frame["world_size"]})
            axes.set_xticks(sizes, [str(n) for n in sizes])
            axes.set_xlabel("devices (world size)")
            axes.set_ylabel(ylabel)
            if column == "scaling_efficiency":
                axes.axhline(1.0, color="#333333", linewidth=0.8, linestyle="--")
            axes.set_ylim(bottom=0)
            axes.set_title(label, fontsize=9)
            axes.grid(True, alpha=0.3)
            axes.legend(fontsize=8, loc="best")
    figure.suptitle(title)
    figure.tight_layout()
    return PlotResult(key, title, _save(figure, out_dir, key))


def scaling_tables(rows: pd.DataFrame, scaling: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(key, title, displayed table) of the studies' tables that have data: DP vs DDP, DDP vs MirroredStrategy,
    and efficiency against devices."""
    tables = []
    for key, title, first, second in STRATEGY_TABLES:
        pairs = strategy_pairs(rows, first, second)
        if not pairs.empty:
            tables.append((key, f"{title} ({second} samples/s ÷ {first})", pairs_display(pairs, first, second)))
    if has_scaling(scaling):
        tables.append(("efficiency", "Scaling efficiency against devices", scaling_display(scaling)))
    return tables


def write_scaling(rows: pd.DataFrame, scaling: pd.DataFrame, out_dir: Path) -> tuple[list[tuple[str, str, pd.DataFrame]], list[Path]]:
    """scaling.csv (every column) and scaling.md (the studies' tables), where any has data."""
    tables = scaling_tables(rows, scaling)
    if not tables:
        return tables, []
    csv_path, md_path = out_dir / "scaling.csv", out_dir / "scaling.md"
    scaling.to_csv(csv_path, index=False)
    md_path.write_text("".join(f"## {title}\n\n{to_markdown(shown)}\n" for _, title, shown in tables)
                       + ("![scaling](plots/scaling.png)\n" if has_scaling(scaling) else ""))
    return tables, [csv_path, md_path]


# ---------------------------------------------------------------------------------------------- studies

_SERIES_DISPLAY = {c: DISPLAY_COLUMNS[c] for c in (*studies.SERIES_KEY,)}


def _figure(value, digits: int = 3) -> str:
    return "–" if value is None or pd.isna(value) else f"{value:.{digits}g}"


def optimal_display(optimal: pd.DataFrame) -> pd.DataFrame:
    """The optimal-batch table as shown: the optimum only where the runs resolve it, else what is missing."""
    budget = optimal["latency_budget_ms"].notna().any() if len(optimal) else False
    rows = []
    for r in optimal.itertuples(index=False):
        resolved = str(r.optimal_status).startswith("best")
        batch = f"{r.best_batch}" + (f" (≈ {r.within_noise})" if r.within_noise else "") if resolved else "–"
        interval = f" [{_figure(r.best_throughput_low)}, {_figure(r.best_throughput_high)}]" if resolved else ""
        row = {**{DISPLAY_COLUMNS[c]: str(getattr(r, c)) for c in studies.SERIES_KEY},
               "batches": r.batches, "runs/batch": str(r.runs_per_batch), "optimal batch": batch,
               "samples/s": _figure(r.best_throughput_samples_per_s, 4) + interval if resolved else "–",
               "status": r.optimal_status, "fit": r.fit_note or "–"}
        if budget:
            under = "–" if pd.isna(r.budget_batch) else f"{int(r.budget_batch)} ({_figure(r.budget_step_ms)} ms)"
            row.update({f"≤ {r.latency_budget_ms:g} ms": under, "budget note": r.budget_note or "–"})
        rows.append(row)
    return pd.DataFrame(rows)


def trend_display(trends: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([
        {**{DISPLAY_COLUMNS[c]: str(getattr(r, c)) for c in studies.SERIES_KEY}, "batches": r.batches, "runs": str(r.runs),
         "trend": r.trend, "Spearman ρ": _figure(r.spearman_rho, 2), "p": _figure(r.spearman_p, 2),
         "× per doubling": _figure(r.ratio_per_doubling), "flattens past": "–" if pd.isna(r.flattens_at_batch) else str(int(r.flattens_at_batch)),
         "note": r.flatten_note if isinstance(r.flatten_note, str) and r.flatten_note else "–"}
        for r in trends.itertuples(index=False)
    ])


def efficiency_display(efficiency: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([
        {**{DISPLAY_COLUMNS[c]: str(getattr(r, c)) for c in (*CONFIG_COLUMNS, "runner")},
         "GFLOP/sample": _figure(r.forward_flops / 1e9, 4), "achieved TFLOP/s": _figure(r.achieved_flops_per_s / 1e12),
         "device name": r.device_name or "–", "peak TFLOP/s": _figure(r.peak_flops_per_s / 1e12),
         "MFU": "–" if pd.isna(r.mfu) else f"{r.mfu:.1%}", "note": r.efficiency_note or "–"}
        for r in efficiency.itertuples(index=False)
    ])


@dataclass
class Studies:
    """What studies.py answers for one report: its tables, and one finding per question."""
    optimal: pd.DataFrame
    trends: pd.DataFrame
    efficiency: pd.DataFrame
    findings: list[studies.Finding]

    def tables(self) -> list[tuple[str, str, str, pd.DataFrame]]:
        """(file stem, title, explanation, displayed table) of each study table that has rows."""
        explained = (
            ("optimal_batch", "Optimal batch size", self.optimal, optimal_display,
             "Per runner and series: the batch with the highest throughput among those that ran (so fit), with its "
             f"{stats.CONFIDENCE:.0%} interval over runs; ≈ lists batches the runs cannot tell from it. 'fit' says where "
             "the batches that fit end (fwbench max-batch, or out-of-memory runs). With --latency-budget-ms: the largest "
             "batch whose step time's interval ends under the budget."),
            ("batch_trend", "Batch size and time per sample", self.trends, trend_display,
             f"Does time per sample fall as the batch grows? Spearman's rank correlation over every run (significant at "
             f"p < {stats.ALPHA:g}), the log-log slope as the factor per doubling, and the batch past which each doubling "
             f"gains less than {studies.FLATTEN_GAIN:.0%}."),
            ("hardware_efficiency", "Hardware efficiency", self.efficiency, efficiency_display,
             f"Achieved FLOP/s: forward FLOPs per sample (as the runner counted them) × the job's samples per step "
             f"(× {studies.TRAIN_FLOPS_FACTOR:g} for training) over the median step time. MFU: that over the device's "
             "published dense peak for the precision (fwbench_aggregator/peaks.py), where it is known."),
        )
        return [(stem, title, text, show(frame)) for stem, title, frame, show, text in explained if len(frame)]


def study_results(summary: pd.DataFrame, steps: pd.DataFrame, rows: pd.DataFrame, scaling: pd.DataFrame,
                  max_batch: pd.DataFrame | None = None, model_facts: pd.DataFrame | None = None,
                  latency_budget_ms: float | None = None) -> Studies:
    trends = studies.batch_trends(summary, steps)
    return Studies(
        optimal=studies.optimal_batches(summary, steps, max_batch, latency_budget_ms),
        trends=trends,
        efficiency=studies.hardware_efficiency(rows, summary, model_facts),
        findings=studies.findings(rows, summary, steps, trends, scaling),
    )


def _finding_text(finding: studies.Finding) -> str:
    return f"{finding.question}: {finding.sentence}" + (f" [FLAGGED: {finding.flagged}]" if finding.flagged else "")


def write_studies(results: Studies, out_dir: Path) -> list[Path]:
    """findings.md (the findings, then each study table) and one CSV per study table, every column."""
    written = []
    for stem, frame in (("optimal_batch", results.optimal), ("batch_trend", results.trends),
                        ("hardware_efficiency", results.efficiency)):
        if len(frame):
            frame.to_csv(out_dir / f"{stem}.csv", index=False)
            written.append(out_dir / f"{stem}.csv")
    text = "# Findings\n\n" + "".join(f"- {_finding_text(f)}\n" for f in results.findings)
    text += "".join(f"\n## {title}\n\n{explanation}\n\n{to_markdown(shown)}" for _, title, explanation, shown in results.tables())
    (out_dir / "findings.md").write_text(text)
    return [*written, out_dir / "findings.md"]


def print_findings(findings: list[studies.Finding], console=None) -> None:
    """The findings as the terminal shows them after the comparison table."""
    console = console or out_console
    console.print("[bold]findings[/]")
    for finding in findings:
        flag = f" [bold yellow]FLAGGED: {escape(finding.flagged)}[/]" if finding.flagged else ""
        console.print(f"- [bold]{escape(finding.question)}[/]: {escape(finding.sentence)}{flag}", highlight=False)


# ------------------------------------------------------------------------------------------- the report

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.82em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
tr.failed td { color: #a00000; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.4em 0; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 0.8em; }
.skipped { color: #666; }
ul.findings li { margin: 0.3em 0; }
.flagged { color: #a00000; font-weight: bold; }
"""

_NUMERIC = {"batch", "devices", "runners", "efficiency", "samples/s on 1", "ratio", "runs", "median ms", "run spread", "ms/sample", "samples/s", "J/sample", "mean W", "× fastest", "noise floor"}


def _table_html(shown: pd.DataFrame, failed: Iterable[bool] | None = None) -> str:
    e = html.escape
    failed = list(failed) if failed is not None else [False] * len(shown)
    head = "".join(f"<th>{e(str(c))}</th>" for c in shown.columns)
    body = []
    for is_failed, values in zip(failed, shown.itertuples(index=False)):
        cells = "".join(
            f'<td class="num">{e(str(v))}</td>' if c in _NUMERIC else f"<td>{e(str(v))}</td>"
            for c, v in zip(shown.columns, values)
        )
        body.append(f'<tr class="failed">{cells}</tr>' if is_failed else f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _standalone_html(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def _png_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


VERSION_COLUMNS = ("runner", "framework", "framework_version", "runner_version", "python_version", "cuda_version",
                   "cudnn_version", "device", "device_name", "compilation", "runner_options")


def _versions_html(summary: pd.DataFrame) -> str:
    present = [c for c in VERSION_COLUMNS if c in summary]
    if "status" in summary:
        summary = summary[summary["status"] == "ok"]
    if not present or summary.empty:
        return "<p>No successful runs to describe.</p>"
    versions = summary[present].astype(object).where(summary[present].notna(), "").astype(str).drop_duplicates()
    return _table_html(versions.sort_values(present).reset_index(drop=True))


def verdict_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: its fastest runner and every other runner's verdict against it."""
    table = []
    for config, frame in rows.groupby(list(CONFIG_COLUMNS), sort=False):
        fastest = frame[frame["verdict"].isin(["fastest", "only runner"])]["runner"].tolist()
        others = [f"{r.runner}: {flagged_verdict(r.verdict, r.flagged)}" for r in frame.itertuples(index=False)
                  if r.runner not in fastest]
        table.append({**dict(zip(CONFIG_COLUMNS, config)), "fastest": ", ".join(fastest) or "–",
                      "verdicts": "; ".join(others) or "–"})
    return pd.DataFrame(table).rename(columns=DISPLAY_COLUMNS)


def _findings_html(findings: list[studies.Finding]) -> str:
    e = html.escape
    items = "".join(
        f"<li><b>{e(f.question)}.</b> {e(f.sentence)}"
        + (f' <span class="flagged">FLAGGED: {e(f.flagged)}</span>' if f.flagged else "") + "</li>"
        for f in findings
    )
    return f'<h2>Findings</h2><ul class="findings">{items}</ul>'


def render_html(
    summary: pd.DataFrame, rows: pd.DataFrame, plots: list[PlotResult], manifest: dict | None,
    tables: list[tuple[str, str, pd.DataFrame]] = (), study: Studies | None = None,
) -> str:
    e = html.escape
    status = summary["status"] if "status" in summary else pd.Series(["ok"] * len(summary))
    n_ok, n_failed = int((status == "ok").sum()), int((status != "ok").sum())
    parts = [
        "<h1>fwbench comparison report</h1>",
        f"<p>Generated {e(datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC'))} from {n_ok + n_failed} runs "
        f"({n_ok} ok, {n_failed} failed); {rows[list(CONFIG_COLUMNS)].drop_duplicates().shape[0] if not rows.empty else 0} configurations, "
        f"runners: {e(', '.join(sorted(set(rows['runner']))) if not rows.empty else 'none')}.</p>",
        "<p>The unit of evidence is the run: each run's median step time is one value, a runner's time is the "
        "geometric mean of its runs' values, and a verdict compares the fastest runner of a configuration with each "
        f"other one by Welch's t-test on the log run values ({stats.CONFIDENCE:.0%} interval, at least "
        f"{stats.MIN_REPETITIONS} runs a side). A difference is called only where the interval excludes none and the "
        f"ratio reaches {stats.MIN_EFFECT:.0%} and the configuration's noise floor (the far end of an A/A comparison "
        "measured by <code>fwbench calibrate</code>; – where not measured). Verdicts marked FLAGGED had a run on a "
        "device that was not quiet (another process, throttled clocks, a busy host).</p>",
        *([_findings_html(study.findings)] if study else []),
        "<h2>Plots</h2>",
    ]
    for plot in plots:
        if plot.path is None:
            continue
        parts.append(f"<h3>{e(plot.title)}</h3>")
        parts.append(f'<img src="{_png_data_uri(plot.path)}" alt="{e(plot.title)}">')
        if plot.missing:
            marks = "; ".join(f"{m.runner} {m.config}: {m.label}" for m in plot.missing)
            parts.append(f"<p class=\"skipped\">Marked ✕ (did not run): {e(marks)}</p>")
    skipped = [p for p in plots if p.path is None]
    if skipped:
        parts.append("<h3>Plots not drawn</h3><ul class=\"skipped\">"
                     + "".join(f"<li>{e(p.title)}: {e(p.reason)}</li>" for p in skipped) + "</ul>")
    for _, title, explanation, shown in study.tables() if study else ():
        parts.append(f"<h2>{e(title)}</h2><p>{e(explanation)}</p>")
        parts.append(_table_html(shown))
    if tables:
        parts.append("<h2>Strategies and scaling</h2>")
        parts.append("<p>Batch sizes are per device; throughput counts the job's samples (the per-device batch on every "
                     "device of every runner) over the slowest rank's step time. Efficiency is the throughput on N "
                     "devices over N times the same runner's on one device, at the same per-device batch.</p>")
        for _, title, shown in tables:
            parts.append(f"<h3>{e(title)}</h3>")
            parts.append(_table_html(shown))
    parts.append("<h2>Verdicts</h2>")
    parts.append(_table_html(verdict_table(rows).astype(str)) if not rows.empty else "<p>No runs.</p>")
    parts.append("<h2>Comparison</h2>")
    parts.append(_table_html(display_frame(rows), rows["status"] != "ok") if not rows.empty else "<p>No runs.</p>")
    failed = rows[rows["status"] != "ok"] if not rows.empty else rows
    if not failed.empty:
        parts.append("<h2>Failed runs</h2>")
        parts.append(_table_html(failed[[*CONFIG_COLUMNS, "runner", "failed_runs", "error"]].astype(str), [True] * len(failed)))
    parts.append("<h2>Runners</h2>")
    parts.append(_versions_html(summary))
    parts.append("<h2>Manifest</h2>")
    if manifest:
        parts.append(f"<pre>{e(json.dumps(manifest, indent=2, sort_keys=True, default=str))}</pre>")
    else:
        parts.append("<p>No manifest given.</p>")
    return _standalone_html("fwbench comparison report", "\n".join(parts))


def write_report(
    summary: pd.DataFrame, steps: pd.DataFrame, manifest: dict | None, out_dir: Path, calibration: pd.DataFrame | None = None,
    max_batch: pd.DataFrame | None = None, model_facts: pd.DataFrame | None = None, latency_budget_ms: float | None = None,
) -> tuple[Path, Studies]:
    """report.html in out_dir: one self-contained file (plots inline as base64 PNG, CSS inline, no scripts, no
    external references), the findings at its top. Beside it: comparison.csv/.md/.html, findings.md and the study
    tables' CSVs, and the plots as PNG files under plots/. Returns its path and the study results."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summary if summary is not None else pd.DataFrame()
    rows = comparison_rows(summary, steps, calibration)
    write_tables(rows, out_dir)
    scaling = scaling_rows(summary)
    study = study_results(summary, steps, rows, scaling, max_batch, model_facts, latency_budget_ms)
    write_studies(study, out_dir)
    plots = make_plots(rows, out_dir / "plots", study.optimal)
    plots.append(scaling_plot(scaling, out_dir / "plots"))
    tables, _ = write_scaling(rows, scaling, out_dir)
    path = out_dir / "report.html"
    path.write_text(render_html(summary, rows, plots, manifest, tables, study), encoding="utf-8")
    return path, study


def write_store_report(results_store, out_dir: Path, latency_budget_ms: float | None = None) -> tuple[pd.DataFrame, Path, Studies]:
    """The report over everything a results store holds (runs, noise floors, max-batch searches, FLOP counts):
    its rows and study results (to print) and report.html's path."""
    summary, steps = results_store.load("summary"), results_store.load("steps")
    calibration = results_store.load("calibration")
    manifests = {key: results_store.manifest(key) for key in sorted(results_store.keys())}
    path, study = write_report(summary, steps, manifests, out_dir, calibration, results_store.load("max_batch"),
                               results_store.load("model_facts"), latency_budget_ms)
    return comparison_rows(summary, steps, calibration), path, study
