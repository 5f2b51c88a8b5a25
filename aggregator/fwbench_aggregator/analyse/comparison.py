"""The one place where runs become figures and verdicts: every table, file, report and plot reads these rows.

Input: the `summary` and `steps` frames (one row per run, one row per step; results.py builds them, the
store concatenates them) and, where `fwbench calibrate` measured it, the `calibration` frame (one noise
floor per configuration and framework). Output: one row per configuration and runner.

Figures are per run first, then over runs (stats.py says why): a run's median step time is its value,
median_step_ms is the geometric mean of those values, and verdicts compare runners on them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import stats

# world_size and nodes belong to a configuration: a run on two devices is never pooled with one on one device, nor
# two devices of one runner with one device on each of two runners. batch_size is per device.
CONFIG_COLUMNS = ("model", "model_options", "mode", "batch_size", "input_shape", "precision", "device", "world_size", "nodes")
INTEGER_COLUMNS = ("batch_size", "world_size", "nodes")
# The configuration less its batch size: one line per runner across batch sizes.
SERIES_COLUMNS = tuple(c for c in CONFIG_COLUMNS if c != "batch_size")
RUN_COLUMNS = (*CONFIG_COLUMNS, "runner", "repetition")

ROW_COLUMNS = (
    *CONFIG_COLUMNS, "runner", "runner_name", "strategy", "global_batch_size", "straggler_spread", "framework", "framework_version", "container_image", "status", "runs", "failed_runs", "steps",
    "median_step_ms", "p5_step_ms", "p95_step_ms", "run_spread", "ms_per_sample", "throughput_samples_per_s",
    "energy_per_sample_j", "mean_power_w", "energy_runs", "energy_status",
    "ratio_to_fastest", "ratio_ci_low", "ratio_ci_high", "p_value", "resolvable", "noise_floor",
    "verdict", "significant", "flagged", "error",
)


def is_out_of_memory(error: str) -> bool:
    text = str(error or "").lower()
    # Not every RESOURCE_EXHAUSTED: a busy runner's refusal is one too.
    return "out of memory" in text or "oom" in text.split()


def failure_verdict(error: str) -> str:
    if is_out_of_memory(error):
        return "out of memory"
    text = " ".join(str(error or "unknown error").split())
    return f"failed: {text[:200]}{'…' if len(text) > 200 else ''}"


def entry_label(runner: str, strategy: str) -> str:
    """A row's identity: the runner, and its strategy where it spreads over several devices ("torch ddp")."""
    return runner if strategy in ("", "single") else f"{runner} {strategy}"


def normalised(frame: pd.DataFrame | None) -> pd.DataFrame:
    """Configuration columns present and comparable: missing strings become "", counts integers (a run
    before distributed runs existed: one device, one runner). `runner` becomes the row's identity, runner and
    strategy (entry_label); `runner_name` keeps the runner alone."""
    frame = pd.DataFrame() if frame is None else frame.copy()
    for column in (*CONFIG_COLUMNS, "runner", "strategy"):
        if column not in frame:
            frame[column] = pd.NA
    for column in (*CONFIG_COLUMNS, "runner", "strategy"):
        if column not in INTEGER_COLUMNS:
            frame[column] = frame[column].astype(object).where(frame[column].notna(), "").astype(str)
    frame["batch_size"] = pd.to_numeric(frame["batch_size"], errors="coerce").fillna(0).astype(int)
    for column in ("world_size", "nodes"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").fillna(1).astype(int)
    frame["strategy"] = frame["strategy"].replace("", "single")
    if "runner_name" not in frame:
        frame["runner_name"] = frame["runner"]
    frame["runner"] = [entry_label(r, s) for r, s in zip(frame["runner_name"], frame["strategy"])]
    if "repetition" in frame:
        frame["repetition"] = pd.to_numeric(frame["repetition"], errors="coerce").fillna(0).astype(int)
    return frame


def _first(values: pd.Series, default=""):
    values = values.dropna()
    values = values[values.astype(str) != ""]
    return values.iloc[0] if len(values) else default


def _numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(frame[column], errors="coerce").dropna() if column in frame else pd.Series(dtype=float)


def _joined(values) -> str:
    return " | ".join(dict.fromkeys(str(v) for v in values if isinstance(v, str) and v))


def _straggler_spread(runs: pd.DataFrame) -> float:
    """The median of the runs' straggler spreads; none with one rank, where there is no straggler."""
    spread = _numbers(runs[runs["world_size"] > 1], "straggler_spread")
    return float(spread.median()) if len(spread) else math.nan


def run_values(summary: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per successful run: its configuration, runner, repetition and median step time (from
    its measured steps; from the summary where the steps were not kept)."""
    summary, steps = normalised(summary), normalised(steps)
    ok = summary[summary.get("status", pd.Series("ok", index=summary.index)).fillna("failed") == "ok"]
    if "repetition" not in ok:
        ok = ok.assign(repetition=0)
    runs = ok[[*RUN_COLUMNS, *(c for c in ("median_step_time_s",) if c in ok)]].copy()
    if not steps.empty and "step_time_s" in steps:
        if "repetition" not in steps:
            steps = steps.assign(repetition=0)
        measured = steps[~steps.get("warmup", pd.Series(False, index=steps.index)).astype(bool)]
        medians = measured.groupby(list(RUN_COLUMNS), sort=False)["step_time_s"].median().rename("from_steps")
        runs = runs.merge(medians.reset_index(), on=list(RUN_COLUMNS), how="left")
        fallback = runs["median_step_time_s"] if "median_step_time_s" in runs else np.nan
        runs["median_step_time_s"] = runs["from_steps"].fillna(fallback)
        runs = runs.drop(columns="from_steps")
    return runs.dropna(subset=["median_step_time_s"]) if "median_step_time_s" in runs else runs.iloc[0:0]


def noise_floors(calibration: pd.DataFrame | None) -> dict[tuple, float]:
    """(configuration..., framework) -> the largest noise floor calibrated for it."""
    if calibration is None or calibration.empty:
        return {}
    calibration = normalised(calibration)
    grouped = calibration.groupby([*CONFIG_COLUMNS, "framework"], sort=False)["noise_floor"].max()
    return {key: float(value) for key, value in grouped.items() if not pd.isna(value)}


def comparison_rows(
    summary: pd.DataFrame,
    steps: pd.DataFrame,
    calibration: pd.DataFrame | None = None,
    min_effect: float = stats.MIN_EFFECT,
) -> pd.DataFrame:
    """One row per configuration and runner, over all that runner's runs of it.

    median_step_ms is the geometric mean of the runs' median step times; p5/p95 are over the pooled
    measured steps (the spread inside runs), run_spread the spread between runs (about a fraction).
    Energy per sample and mean power are means over the runs that could measure them; energy_status
    says why the others could not. ratio_to_fastest divides by the fastest runner's median_step_ms.
    verdict: "fastest" for the fastest, stats.compare's verdict (fastest against this one, over runs)
    for the others, "out of memory" / "failed: ..." for a runner whose every run failed, "only runner"
    where no other runner ran the configuration; significant: whether that verdict called this runner
    slower. flagged: why a run of this row was not on a quiet device.
    """
    summary = normalised(summary)
    if "status" not in summary:
        summary["status"] = "ok"
    summary["status"] = summary["status"].fillna("failed").astype(str)
    steps = normalised(steps)
    measured = steps[~steps["warmup"].astype(bool)] if "warmup" in steps else steps
    step_times = (
        {key: group["step_time_s"].to_numpy(dtype=float) for key, group in measured.groupby([*CONFIG_COLUMNS, "runner"], sort=False)}
        if "step_time_s" in measured else {}
    )
    per_run = run_values(summary, steps)
    run_medians = {key: group["median_step_time_s"].to_numpy(dtype=float)
                   for key, group in per_run.groupby([*CONFIG_COLUMNS, "runner"], sort=False)}
    floors = noise_floors(calibration)

    rows = []
    for config, runs in summary.groupby(list(CONFIG_COLUMNS), sort=False):
        config_values = dict(zip(CONFIG_COLUMNS, config))
        # Throughput counts the job's samples: the per-device batch on every device of every runner.
        batch_size = int(config_values["batch_size"]) * int(config_values["world_size"])
        config_rows = []
        for runner, own in runs.groupby("runner", sort=False):
            ok, failed = own[own["status"] == "ok"], own[own["status"] != "ok"]
            times = step_times.get((*config, runner), np.array([]))
            medians = run_medians.get((*config, runner), np.array([]))
            energy, power = _numbers(ok, "energy_per_sample_j"), _numbers(ok, "mean_power_w")
            row = {
                **config_values,
                "runner": runner,
                "runner_name": _first(own["runner_name"]),
                "strategy": _first(own["strategy"]),
                "global_batch_size": batch_size,
                "straggler_spread": _straggler_spread(ok),
                "framework": _first(own.get("framework", pd.Series(dtype=object))),
                "framework_version": _first(own.get("framework_version", pd.Series(dtype=object))),
                "container_image": _first(own.get("container_image", pd.Series(dtype=object))),
                "runs": int(len(ok)),
                "failed_runs": int(len(failed)),
                "steps": int(times.size),
                "energy_per_sample_j": float(energy.mean()) if len(energy) else math.nan,
                "mean_power_w": float(power.mean()) if len(power) else math.nan,
                "energy_runs": int(len(energy)),
                "energy_status": _joined(s for s in ok.get("energy_status", pd.Series(dtype=object)) if s != "ok"),
                "flagged": _joined(ok.get("device_flags", pd.Series(dtype=object))),
                "error": _joined(failed.get("error", pd.Series(dtype=object)).fillna("")),
                "_medians": medians,
            }
            if len(ok) and medians.size:
                median_s = stats.geometric_mean(medians)
                row.update(
                    status="ok", median_step_ms=median_s * 1e3,
                    p5_step_ms=float(np.percentile(times, 5)) * 1e3 if times.size else math.nan,
                    p95_step_ms=float(np.percentile(times, 95)) * 1e3 if times.size else math.nan,
                    run_spread=stats.run_spread(medians), throughput_samples_per_s=batch_size / median_s,
                )
            elif len(ok):
                row.update(status="ok", median_step_ms=math.nan, verdict="no measured steps")
            else:
                row.update(status="failed", median_step_ms=math.nan, verdict=failure_verdict(row["error"]))
            row["ms_per_sample"] = row["median_step_ms"] / batch_size if batch_size else math.nan
            config_rows.append(row)
        _judge(config_rows, floors, config, min_effect)
        rows += config_rows

    table = pd.DataFrame(rows, columns=[*ROW_COLUMNS, "_medians"]).drop(columns="_medians")
    if table.empty:
        return table
    table["_failed"] = table["status"] != "ok"
    table = table.sort_values(
        ["model", "model_options", "mode", "device", "precision", "input_shape", "batch_size", "world_size", "nodes", "_failed",
         "ratio_to_fastest", "runner"],
        kind="stable",
    ).drop(columns="_failed")
    return table.reset_index(drop=True)


def _judge(config_rows: list[dict], floors: dict[tuple, float], config: tuple, min_effect: float) -> None:
    """Ratios and verdicts within one configuration, in place."""
    ran = [r for r in config_rows if r["status"] == "ok" and not math.isnan(r["median_step_ms"])]
    frameworks = {r["framework"] for r in ran}
    known = [floors[(*config, f)] for f in frameworks if (*config, f) in floors]
    floor = max(known) if known else math.nan
    for row in config_rows:
        row.update(ratio_to_fastest=math.nan, ratio_ci_low=math.nan, ratio_ci_high=math.nan, p_value=math.nan,
                   resolvable=math.nan, noise_floor=floor, significant=False)
    if not ran:
        return
    fastest = min(ran, key=lambda r: r["median_step_ms"])
    for row in ran:
        row["ratio_to_fastest"] = row["median_step_ms"] / fastest["median_step_ms"]
    fastest["verdict"] = "fastest" if len(config_rows) > 1 else "only runner"
    for row in ran:
        if row is fastest:
            continue
        c = stats.compare(fastest["runner"], fastest["_medians"], row["runner"], row["_medians"],
                          min_effect=min_effect, noise_floor=floor)
        row.update(ratio_ci_low=c.ci_low, ratio_ci_high=c.ci_high, p_value=c.p_value, resolvable=c.resolvable,
                   verdict=c.verdict, significant=c.significant)


def flagged_verdict(verdict: str, flagged: object) -> str:
    """The verdict as every table shows it: marked where a run was not on a quiet device."""
    return f"{verdict} [FLAGGED: {flagged}]" if isinstance(flagged, str) and flagged else str(verdict)


def calibration_row(config: dict, framework: str, comparison: stats.Comparison) -> dict:
    """What `fwbench calibrate` stores for one configuration and framework."""
    return {
        **{c: config[c] for c in CONFIG_COLUMNS}, "framework": framework,
        "runs": min(comparison.runs_faster, comparison.runs_slower), "aa_ratio": comparison.ratio,
        "aa_ci_low": comparison.ci_low, "aa_ci_high": comparison.ci_high, "noise_floor": stats.noise_floor(comparison),
    }


# Scaling: a configuration less its world size (and runner count), one line per runner and strategy.
SCALING_COLUMNS = tuple(c for c in CONFIG_COLUMNS if c not in ("world_size", "nodes"))
SCALING_ROW_COLUMNS = (
    *SCALING_COLUMNS, "runner", "runner_name", "strategy", "world_size", "nodes", "runs", "throughput_samples_per_s",
    "baseline_throughput_samples_per_s", "scaling_efficiency", "straggler_spread", "efficiency_note",
)


def _throughputs(frame: pd.DataFrame) -> np.ndarray:
    """Each run's throughput as comparison_rows counts it: the job's samples per its median step time."""
    median_s = pd.to_numeric(frame["median_step_time_s"], errors="coerce")
    samples = frame["batch_size"] * frame["world_size"]
    return (samples / median_s).replace([np.inf, -np.inf], np.nan).dropna().to_numpy(dtype=float)


def scaling_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """Throughput against world size per runner, strategy and configuration, and the scaling efficiency:
    throughput on N devices / (N x the same runner's throughput on one device), at the same per-device batch.
    Throughputs are geometric means over runs (the unit of evidence is the run), each run's the job's samples per
    its median step time, as in comparison_rows. The one-device baseline is
    the runner's `single` runs, else its world-size-1 runs of the same strategy; where neither exists the
    efficiency is empty and efficiency_note says why."""
    summary = normalised(summary)
    if summary.empty or "median_step_time_s" not in summary:
        return pd.DataFrame(columns=SCALING_ROW_COLUMNS)
    ok = summary[summary.get("status", pd.Series("ok", index=summary.index)).fillna("failed") == "ok"]
    rows = []
    for config, runs in ok.groupby(list(SCALING_COLUMNS), sort=False):
        for (runner_name, strategy, world_size, nodes), own in runs.groupby(
            ["runner_name", "strategy", "world_size", "nodes"], sort=True
        ):
            values = _throughputs(own)
            if not values.size:
                continue
            one = runs[(runs["runner_name"] == runner_name) & (runs["world_size"] == 1)]
            single = one[one["strategy"] == "single"]
            baseline_runs = _throughputs(single if len(single) else one[one["strategy"] == strategy])
            throughput = stats.geometric_mean(values)
            row = {
                **dict(zip(SCALING_COLUMNS, config)), "runner": entry_label(runner_name, strategy),
                "runner_name": runner_name, "strategy": strategy, "world_size": int(world_size), "nodes": int(nodes),
                "runs": int(values.size), "throughput_samples_per_s": throughput,
                "straggler_spread": _straggler_spread(own),
                "baseline_throughput_samples_per_s": math.nan, "scaling_efficiency": math.nan, "efficiency_note": "",
            }
            if baseline_runs.size:
                baseline = stats.geometric_mean(baseline_runs)
                row.update(baseline_throughput_samples_per_s=baseline,
                           scaling_efficiency=throughput / (int(world_size) * baseline))
            else:
                row["efficiency_note"] = (
                    f"no one-device run of {runner_name} at this configuration (same per-device batch); "
                    "run it with --device or one entry of --devices"
                )
            rows.append(row)
    return pd.DataFrame(rows, columns=SCALING_ROW_COLUMNS)


def has_scaling(scaling: pd.DataFrame) -> bool:
    """Whether some configuration ran at more than one world size: a scaling table says something."""
    if scaling.empty:
        return False
    sizes = scaling.groupby(list(SCALING_COLUMNS), sort=False)["world_size"].nunique()
    return bool((sizes > 1).any())


def strategy_pairs(rows: pd.DataFrame, first: str, second: str) -> pd.DataFrame:
    """The studies' head-to-head tables from comparison rows: per configuration and world size, the
    throughput of each runner using `first` and of each using `second`, and second / first."""
    columns = [*CONFIG_COLUMNS, "runner_a", "throughput_a", "runner_b", "throughput_b", "ratio_b_to_a"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    ran = rows[(rows["status"] == "ok") & rows["throughput_samples_per_s"].notna()]
    table = []
    for config, frame in ran.groupby(list(CONFIG_COLUMNS), sort=False):
        for a in frame[frame["strategy"] == first].itertuples(index=False):
            for b in frame[frame["strategy"] == second].itertuples(index=False):
                table.append({
                    **dict(zip(CONFIG_COLUMNS, config)), "runner_a": a.runner, "throughput_a": a.throughput_samples_per_s,
                    "runner_b": b.runner, "throughput_b": b.throughput_samples_per_s,
                    "ratio_b_to_a": b.throughput_samples_per_s / a.throughput_samples_per_s,
                })
    return pd.DataFrame(table, columns=columns)
