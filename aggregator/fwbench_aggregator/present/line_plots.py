"""The plots drawn as lines over something other than batch size: throughput and scaling efficiency against
devices, a run's power over time, step time against framework version, and serving latency against offered load.
Each is written as a PNG with the data it draws in a CSV beside it (plots.save_plot)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..analyse import stats
from ..analyse.scaling import has_scaling
from ..base.paths import safe_component
from ..store.run_columns import SCALING_KEY_COLUMNS, SERIES_COLUMNS
from .plot_kit import (
    RUNNER_COLOURS,
    PlotResult,
    config_label,
    pyplot,
    runner_colours,
    save_plot,
    series_grid,
    varying_columns,
)


def _scaling_runs(runs: pd.DataFrame | None, config: dict, runner_name: str, strategy: str) -> pd.DataFrame:
    """The runs (comparison.per_run) a line of the scaling plot pools: its configuration, its runner, its strategy and
    the one-device single runs its baseline comes from."""
    if runs is None or runs.empty:
        return pd.DataFrame(columns=["world_size", "throughput_samples_per_s"])
    own = runs[(runs["runner_name"] == runner_name) & runs["strategy"].isin([strategy, "single"])]
    for column, value in config.items():
        own = own[own[column].astype(str) == str(value)]
    return own


def scaling_plot(
    scaling: pd.DataFrame, out_dir: Path, key: str = "scaling", runs: pd.DataFrame | None = None
) -> PlotResult:
    """Per configuration: throughput and scaling efficiency against devices, one line per runner and strategy through
    the geometric means, each run's throughput (`runs`: comparison.per_run) a dot beside it."""
    title = "Throughput and scaling efficiency against devices"
    if not has_scaling(scaling):
        return PlotResult(key, title, reason="no configuration ran at more than one number of devices")
    colours = runner_colours(scaling)
    series = [
        (values, frame)
        for values, frame in scaling.groupby(list(SCALING_KEY_COLUMNS), sort=True)
        if frame["world_size"].nunique() > 1
    ]
    panels = (("throughput_samples_per_s", "samples/s (job)"), ("scaling_efficiency", "efficiency (÷ N × one device)"))
    figure, axes_list = series_grid(len(series) * len(panels), ncols_max=len(panels))
    drawn_runs: list[pd.DataFrame] = []
    for s, (values, frame) in enumerate(series):
        config = dict(zip(SCALING_KEY_COLUMNS, values))
        label = " ".join(
            f"batch {v}/device" if c == "batch_size" else str(v)
            for c, v in config.items()
            if v != "" and c != "model_options"
        )
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
                if column == "throughput_samples_per_s":
                    dots = _scaling_runs(runs, config, own["runner_name"].iloc[0], own["strategy"].iloc[0])
                    axes.scatter(
                        dots["world_size"],
                        dots["throughput_samples_per_s"],
                        s=10,
                        color=colours[runner],
                        alpha=0.5,
                        zorder=3,
                        linewidths=0,
                    )
                    drawn_runs.append(dots.assign(line=runner))
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
    data = pd.concat([frame for _, frame in series]).assign(value_of="the runs' geometric mean")
    shown = (*SCALING_KEY_COLUMNS, "line", "run_id", "world_size", "throughput_samples_per_s")
    dots = [d[[c for c in shown if c in d]] for d in drawn_runs if len(d)]
    if dots:
        data = pd.concat([data, *(d.assign(value_of="one run") for d in dots)], ignore_index=True)
    return PlotResult(key, title, save_plot(figure, out_dir, key, data))


PHASE_COLOURS = {"idle": "#d9d9d9", "warmup": "#fde0b6", "measure": "#cde5c8", "after": "#d9d9d9"}


def power_timeline(power: pd.DataFrame, out_dir: Path) -> list[Path]:
    """One plot per runner and repetition: power over the run's time, its phases shaded (its samples in a CSV beside
    it)."""
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
        axes.set_title(
            f"{runner} #{repetition + 1}: {run['model'].iloc[0]} {run['mode'].iloc[0]}, batch {run['batch_size'].iloc[0]} ({source})"
        )
        figure.tight_layout()
        path = out_dir / f"power-{runner}-{repetition + 1}.png"
        figure.savefig(path, dpi=110)
        pyplot().close(figure)
        run[["time_s", "phase", "power_w", "power_source"]].to_csv(path.with_suffix(".csv"), index=False)
        written.append(path)
    return written


def version_plot(versions: list[str], series: dict, model: str, out_dir: Path) -> PlotResult:
    """A model's step time against framework version, one line per configuration (analyse.versions.plot_series: each
    version's position among `versions`, in release order; ms with the interval over runs as error bars)."""
    key, title = f"versions-{safe_component(model)}", f"{model}: step time against framework version"
    if not series:
        return PlotResult(key, title, reason="no configuration of this model ran on several versions")
    figure, axes = pyplot().subplots(figsize=(7.5, 4.2))
    drawn = []
    for index, (label, (positions, ms, low, high)) in enumerate(series.items()):
        drawn += [
            {"configuration": label, "version": versions[int(p)], "median_step_ms": m, "ms_low": lo, "ms_high": hi}
            for p, m, lo, hi in zip(positions, ms, low, high)
        ]
        axes.errorbar(
            positions,
            ms,
            yerr=None if pd.isna(low).all() else [ms - low, high - ms],
            marker="o",
            capsize=3,
            label=label,
            color=RUNNER_COLOURS[index % len(RUNNER_COLOURS)],
        )
    axes.set_xticks(range(len(versions)), versions)
    axes.set(xlabel="framework version (release order)", ylabel="median step time (ms), geometric mean over runs")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    axes.set_title(title, fontsize=10)
    figure.tight_layout()
    return PlotResult(key, title, save_plot(figure, out_dir, key, pd.DataFrame(drawn)))


def latency_load_plot(curve: pd.DataFrame, out_dir: Path, key: str = "serving-latency-vs-load") -> PlotResult:
    """Per configuration less its load: each runner's p50 (solid), p90 (dashed) and p99 (dotted) against the offered
    load (analyse.serving.load_curve), each in a band of its interval over runs where there were enough; a percentile
    a load's runs could not support is left out of its line."""
    title = "Serving: latency percentiles against offered load"
    if curve.empty:
        return PlotResult(key, title, reason="no runs under the server scenario in these results")
    colours, keys = runner_colours(curve), [c for c in SERIES_COLUMNS if c != "serving"]
    series = list(curve.groupby(keys))
    figure, axes_list = series_grid(len(series))
    for axes, (_, frame) in zip(axes_list, series):
        for runner, own in frame.groupby("runner"):
            for percentile, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
                points = own.dropna(subset=[f"{percentile}_latency_s"])
                axes.plot(
                    points["target_qps"],
                    points[f"{percentile}_latency_s"] * 1e3,
                    linestyle=style,
                    marker="o",
                    color=colours[runner],
                    label=f"{runner} {percentile}",
                )
                banded = points.dropna(subset=[f"{percentile}_latency_low_s", f"{percentile}_latency_high_s"])
                low_ms, high_ms = (
                    banded[f"{percentile}_latency_low_s"] * 1e3,
                    banded[f"{percentile}_latency_high_s"] * 1e3,
                )
                if len(banded) > 1:
                    axes.fill_between(
                        banded["target_qps"], low_ms, high_ms, color=colours[runner], alpha=0.12, linewidth=0
                    )
                elif len(banded):  # one load: a band has no width, a bar shows the interval
                    middle_ms = banded[f"{percentile}_latency_s"] * 1e3
                    axes.errorbar(
                        banded["target_qps"],
                        middle_ms,
                        yerr=[middle_ms - low_ms, high_ms - middle_ms],
                        fmt="none",
                        ecolor=colours[runner],
                        capsize=4,
                    )
        axes.set(
            xlabel="offered load (queries/s)",
            ylabel="latency (ms)",
            ylim=(0, None),
            title=config_label(frame.iloc[0].to_dict(), varying_columns(curve, keys)),
        )
        axes.legend(fontsize=7)
    interval = f"\n(the {stats.CONFIDENCE:.0%} interval over runs, shaded or as bars)"
    figure.suptitle(title + interval if _banded(curve) else title, fontsize=11)
    figure.tight_layout()
    return PlotResult(key, title, save_plot(figure, out_dir, key, curve))


def _banded(curve: pd.DataFrame) -> bool:
    return any(curve[f"{p}_latency_low_s"].notna().any() for p in ("p50", "p90", "p99"))
