"""Every plot fwbench draws (matplotlib, written as PNG files): the studies' questions (relative training and
inference time, time per sample and power against batch size), scaling against devices, and a run's power over
time. Failed configurations are drawn as marked missing points, never as gaps."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..analyse.comparison import is_out_of_memory
from ..analyse.findings import verdict_counts
from ..analyse.scaling import has_scaling
from ..base.paths import safe_component
from ..store.schema import CONFIG_COLUMNS, SCALING_KEY_COLUMNS, SERIES_COLUMNS, SERIES_KEY


def pyplot():
    """matplotlib's pyplot, drawing into files only (no display is needed or wanted). Imported when a plot is first
    drawn: it takes half a second, which every command would otherwise pay at start-up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

RUNNER_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")
MISSING_COLOUR = "#e00000"
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
    from matplotlib.transforms import blended_transform_factory

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
    figure, axes = pyplot().subplots(figsize=(max(6.0, 0.35 * len(labels) * max(len(runners), 1) + 2.5), 4.8))
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
    axes.set_title(f"{title}\n{verdict_counts(rows).headline()}", fontsize=10)
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
    pyplot().close(figure)
    return path


def _series_grid(n: int, ncols_max: int = 3, panel=(4.6, 3.6)):
    ncols = min(n, ncols_max)
    nrows = math.ceil(n / ncols)
    figure, axes = pyplot().subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows + 0.6), squeeze=False)
    for extra in axes.flat[n:]:
        extra.set_visible(False)
    return figure, list(axes.flat[:n])


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


def scaling_plot(scaling: pd.DataFrame, out_dir: Path, key: str = "scaling") -> PlotResult:
    """Per configuration: throughput and scaling efficiency against devices, one line per runner and strategy."""
    title = "Throughput and scaling efficiency against devices"
    if not has_scaling(scaling):
        return PlotResult(key, title, reason="no configuration ran at more than one number of devices")
    colours = _runner_colours(scaling)
    series = [(values, frame) for values, frame in scaling.groupby(list(SCALING_KEY_COLUMNS), sort=True)
              if frame["world_size"].nunique() > 1]
    panels = (("throughput_samples_per_s", "samples/s (job)"), ("scaling_efficiency", "efficiency (÷ N × one device)"))
    figure, axes_list = _series_grid(len(series) * len(panels), ncols_max=len(panels))
    for s, (values, frame) in enumerate(series):
        config = dict(zip(SCALING_KEY_COLUMNS, values))
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


PHASE_COLOURS = {"idle": "#d9d9d9", "warmup": "#fde0b6", "measure": "#cde5c8", "after": "#d9d9d9"}


def power_timeline(power: pd.DataFrame, out_dir: Path) -> list[Path]:
    """One plot per runner and repetition: power over the run's time, its phases shaded."""
    written = []
    readable = power.dropna(subset=["power_w"])
    for (runner, repetition), run in readable.groupby(["runner", "repetition"]):
        run = run.sort_values("time_s")
        start = run["time_s"].iloc[0]
        figure, axes = pyplot().subplots(figsize=(9, 3.5))
        # Shade each phase from its first sample to the next phase's first sample.
        boundaries = run.loc[run["phase"] != run["phase"].shift(), ["time_s", "phase"]].values.tolist()
        ends = [t for t, _ in boundaries[1:]] + [run["time_s"].iloc[-1]]
        for (begin, phase), end in zip(boundaries, ends):
            axes.axvspan(begin - start, end - start, color=PHASE_COLOURS.get(phase, "#eeeeee"), label=phase)
        axes.plot(run["time_s"] - start, run["power_w"], color="#1f4e79", linewidth=1.2)
        handles, labels = axes.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        axes.legend(unique.values(), unique.keys(), loc="upper right", fontsize=8)
        axes.set_xlabel("time since the idle baseline began (s)")
        axes.set_ylabel("power (W)")
        source = ", ".join(sorted(set(run["power_source"])))
        axes.set_title(f"{runner} #{repetition + 1}: {run['model'].iloc[0]} {run['mode'].iloc[0]}, batch {run['batch_size'].iloc[0]} ({source})")
        figure.tight_layout()
        path = out_dir / f"power-{runner}-{repetition + 1}.png"
        figure.savefig(path, dpi=110)
        pyplot().close(figure)
        written.append(path)
    return written


def version_plot(versions: list[str], series: dict, model: str, out_dir: Path) -> PlotResult:
    """A model's step time against framework version, one line per configuration (analyse.versions.plot_series: each
    version's position among `versions`, in release order; ms with the interval over runs as error bars)."""
    key, title = f"versions-{safe_component(model)}", f"{model}: step time against framework version"
    if not series:
        return PlotResult(key, title, reason="no configuration of this model ran on several versions")
    figure, axes = pyplot().subplots(figsize=(7.5, 4.2))
    for index, (label, (positions, ms, low, high)) in enumerate(series.items()):
        axes.errorbar(positions, ms, yerr=None if pd.isna(low).all() else [ms - low, high - ms], marker="o", capsize=3,
                      label=label, color=RUNNER_COLOURS[index % len(RUNNER_COLOURS)])
    axes.set_xticks(range(len(versions)), versions)
    axes.set(xlabel="framework version (release order)", ylabel="median step time (ms), geometric mean over runs")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    axes.set_title(title, fontsize=10)
    figure.tight_layout()
    return PlotResult(key, title, _save(figure, out_dir, key))


def latency_load_plot(curve: pd.DataFrame, out_dir: Path, key: str = "serving-latency-vs-load") -> PlotResult:
    """Per configuration less its load: each runner's p50 (solid), p90 (dashed) and p99 (dotted) against the offered
    load (analyse.serving.load_curve); a percentile a load's runs could not support is left out of its line."""
    title = "Serving: latency percentiles against offered load"
    if curve.empty:
        return PlotResult(key, title, reason="no runs under the server scenario in these results")
    colours, keys = _runner_colours(curve), [c for c in SERIES_COLUMNS if c != "serving"]
    series = list(curve.groupby(keys))
    figure, axes_list = _series_grid(len(series))
    for axes, (_, frame) in zip(axes_list, series):
        for runner, own in frame.groupby("runner"):
            for percentile, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
                points = own.dropna(subset=[f"{percentile}_latency_s"])
                axes.plot(points["target_qps"], points[f"{percentile}_latency_s"] * 1e3, linestyle=style, marker="o",
                          color=colours[runner], label=f"{runner} {percentile}")
        axes.set(xlabel="offered load (queries/s)", ylabel="latency (ms)", ylim=(0, None),
                 title=_config_label(frame.iloc[0].to_dict(), _varying(curve, keys)))
        axes.legend(fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    return PlotResult(key, title, _save(figure, out_dir, key))
