"""The published studies' questions, answered from stored runs: the optimal batch size (and the largest batch
under a latency budget), whether time per sample falls as the batch grows (tested), hardware efficiency
(achieved FLOP/s and model FLOP utilisation), and one finding per question for the top of the report.

Like analysis.py it works on per-run values, since the unit of evidence is the run, and leaves every test to
stats.py; report.py and the console only present what it returns. A figure the runs cannot resolve (too few
runs, no FLOP count, no known peak) is left empty, and a note says what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from . import stats
from .analysis import CONFIG_COLUMNS, RUN_COLUMNS, SERIES_COLUMNS, has_scaling, is_out_of_memory, normalised, run_values
from .peaks import peak_flops

SERIES_KEY = (*SERIES_COLUMNS, "runner")
# Doubling the batch gains less than this in time per sample: the trend has flattened.
FLATTEN_GAIN = 0.05
# A training step is about three forward passes: the forward, and the backward's two products per layer.
TRAIN_FLOPS_FACTOR = 3.0
TOO_FEW_RUNS = f"fewer than {stats.MIN_REPETITIONS} runs per batch"


def _batches_text(batches: Sequence[int]) -> str:
    return ", ".join(str(int(b)) for b in sorted(batches))


def per_run(summary: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per successful run: analysis.run_values's median step time, and from it the run's throughput and
    time per sample over the job's samples (batch per device x devices), its runner's name, device name and
    energy per sample."""
    runs = run_values(summary, steps)
    if runs.empty:
        return runs.assign(runner_name="", device_name="", time_per_sample_s=np.nan, throughput_samples_per_s=np.nan,
                           energy_per_sample_j=np.nan)
    extra = [c for c in ("runner_name", "device_name", "energy_per_sample_j") if c in normalised(summary)]
    facts = normalised(summary)[[*RUN_COLUMNS, *extra]].drop_duplicates(list(RUN_COLUMNS))
    runs = runs.merge(facts, on=list(RUN_COLUMNS), how="left")
    for column, default in (("device_name", ""), ("energy_per_sample_j", np.nan)):
        if column not in runs:
            runs[column] = default
    samples = runs["batch_size"] * runs["world_size"]
    runs["time_per_sample_s"] = runs["median_step_time_s"] / samples
    runs["throughput_samples_per_s"] = samples / runs["median_step_time_s"]
    return runs


def _failed_batches(summary: pd.DataFrame) -> dict[tuple, list[int]]:
    """Per series and runner, the batches every run of which ran out of memory."""
    summary = normalised(summary)
    if "status" not in summary or summary.empty:
        return {}
    failed = summary[(summary["status"] != "ok") & (summary["batch_size"] > 0)]
    ran = set(map(tuple, summary[summary["status"] == "ok"][[*SERIES_KEY, "batch_size"]].itertuples(index=False)))
    out: dict[tuple, list[int]] = {}
    for row in failed.itertuples(index=False):
        values = row._asdict()
        key = tuple(values[c] for c in SERIES_KEY)
        if is_out_of_memory(values.get("error", "")) and (*key, values["batch_size"]) not in ran:
            out.setdefault(key, [])
            if values["batch_size"] not in out[key]:
                out[key].append(int(values["batch_size"]))
    return out


def _largest_fitting(max_batch: Optional[pd.DataFrame]) -> dict[tuple, dict]:
    """max-batch's newest answer per (model, options, mode, shape, precision, device, runner name)."""
    if max_batch is None or max_batch.empty:
        return {}
    columns = ("model", "model_options", "mode", "input_shape", "precision", "device", "runner")
    frame = max_batch.copy()
    for column in columns:
        frame[column] = frame[column].astype(object).where(frame[column].notna(), "").astype(str)
    frame = frame.sort_values("searched_at_unix_s")
    return {tuple(getattr(r, c) for c in columns): r._asdict() for r in frame.itertuples(index=False)}


OPTIMAL_COLUMNS = (
    *SERIES_KEY, "batches", "runs_per_batch", "best_batch", "best_throughput_samples_per_s", "best_throughput_low",
    "best_throughput_high", "within_noise", "optimal_status", "out_of_memory_batches", "largest_fitting_batch",
    "fit_note", "latency_budget_ms", "budget_batch", "budget_step_ms", "budget_note",
)


def optimal_batches(
    summary: pd.DataFrame, steps: pd.DataFrame, max_batch: Optional[pd.DataFrame] = None,
    latency_budget_ms: Optional[float] = None,
) -> pd.DataFrame:
    """Per series (a configuration less its batch size) and runner: the batch with the highest throughput among
    those that ran (so fit), the batches that cannot be told apart from it, what max-batch or out-of-memory
    failures say of the batches that fit beyond the grid, and, with a latency budget, the largest batch whose
    step time stays under it at the stats.CONFIDENCE level."""
    runs = per_run(summary, steps)
    failed = _failed_batches(summary)
    fitting = _largest_fitting(max_batch)
    rows = []
    for key, own in runs.groupby(list(SERIES_KEY), sort=True):
        values = dict(zip(SERIES_KEY, key))
        per_sample = {int(b): g["time_per_sample_s"].to_numpy() for b, g in own.groupby("batch_size")}
        step_ms = {int(b): g["median_step_time_s"].to_numpy() * 1e3 for b, g in own.groupby("batch_size")}
        batches = sorted(per_sample)
        fewest_runs = min(v.size for v in per_sample.values())
        best = min(batches, key=lambda b: stats.geometric_mean(per_sample[b]))
        throughput = stats.geometric_interval(1.0 / per_sample[best])
        tied, status = _ties(best, per_sample)
        row = {
            **values, "batches": _batches_text(batches), "runs_per_batch": fewest_runs, "best_batch": best,
            "best_throughput_samples_per_s": throughput.value, "best_throughput_low": throughput.low,
            "best_throughput_high": throughput.high, "within_noise": _batches_text(tied), "optimal_status": status,
            "out_of_memory_batches": _batches_text(failed.get(key, [])),
        }
        row.update(_fit(values, batches, best, failed.get(key, []), fitting))
        row.update(_budget(step_ms, latency_budget_ms))
        rows.append(row)
    return pd.DataFrame(rows, columns=OPTIMAL_COLUMNS)


def _ties(best: int, per_sample: dict[int, np.ndarray]) -> tuple[list[int], str]:
    """The batches whose time per sample the runs cannot tell from the best's, and the optimum's status."""
    if len(per_sample) == 1:
        return [], "one batch size measured: nothing to choose between"
    if min(v.size for v in per_sample.values()) < stats.MIN_REPETITIONS:
        return [], f"not resolved: {TOO_FEW_RUNS} (a verdict needs {stats.MIN_REPETITIONS})"
    tied = [b for b in per_sample if b != best
            and not stats.compare("best", per_sample[best], str(b), per_sample[b]).significant]
    if tied:
        return tied, f"best, but batch {_batches_text(tied)} within the noise (99% confidence)"
    return [], "best of the measured batches (99% confidence)"


def _fit(values: dict, batches: list[int], best: int, out_of_memory: list[int], fitting: dict[tuple, dict]) -> dict:
    """Where the batches that fit end, by max-batch's search or by the grid's own out-of-memory failures."""
    searched = fitting.get(tuple(values[c] for c in ("model", "model_options", "mode", "input_shape", "precision",
                                                     "device", "runner"))) if values["world_size"] == 1 else None
    largest = math.nan
    notes = []
    if searched is not None:
        largest = int(searched["largest_batch"])
        bound = "at least " if bool(searched.get("capped")) else ""
        notes.append(f"max-batch: {bound}{largest} fits" if largest > 0 else "max-batch: no batch fits")
    if out_of_memory:
        notes.append(f"out of memory from batch {min(out_of_memory)}")
    edge = best == max(batches)
    if edge and len(batches) > 1:
        beyond = not out_of_memory and (searched is None or largest > max(batches))
        notes.append("best at the grid's largest batch: larger batches that fit may do better" if beyond
                     else "best at the largest batch that fits")
    return {"largest_fitting_batch": largest, "fit_note": "; ".join(notes)}


def _budget(step_ms: dict[int, np.ndarray], budget_ms: Optional[float]) -> dict:
    """The largest batch whose step time is under the budget with stats.CONFIDENCE: the interval of its runs'
    geometric mean ends below it."""
    if not budget_ms:
        return {"latency_budget_ms": math.nan, "budget_batch": math.nan, "budget_step_ms": math.nan, "budget_note": ""}
    intervals = {b: stats.geometric_interval(v) for b, v in sorted(step_ms.items())}
    unresolved = [b for b, i in intervals.items() if not i.resolved]
    under = [b for b, i in intervals.items() if i.resolved and i.high < budget_ms]
    unsure = [b for b, i in intervals.items() if i.resolved and i.low <= budget_ms <= i.high]
    notes = []
    if unresolved:
        notes.append(f"batch {_batches_text(unresolved)}: {TOO_FEW_RUNS}, not judged")
    if unsure:
        notes.append(f"batch {_batches_text(unsure)}: within the noise of the budget")
    chosen = max(under) if under else math.nan
    if under and chosen == max(step_ms):
        notes.append("every measured batch up to here is under the budget; larger ones were not measured")
    if not under and not unresolved and not unsure:
        smallest = min(intervals)
        notes.append(f"no batch stays under {budget_ms:g} ms (batch {smallest}: {intervals[smallest].value:.3g} ms)")
    return {"latency_budget_ms": float(budget_ms), "budget_batch": chosen,
            "budget_step_ms": intervals[chosen].value if under else math.nan, "budget_note": "; ".join(notes)}


TREND_COLUMNS = (
    *SERIES_KEY, "batches", "runs", "spearman_rho", "spearman_p", "ratio_per_doubling", "slope_p", "trend",
    "flattens_at_batch", "flatten_note",
)


def batch_trends(summary: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per series and runner: does time per sample fall as the batch grows? Spearman's rank correlation over every
    run (p-value at stats.ALPHA), the log-log slope as the ratio per doubling, and where the fall flattens: the
    batch past which each doubling gains less than FLATTEN_GAIN (geometric means over runs)."""
    runs = per_run(summary, steps)
    rows = []
    for key, own in runs.groupby(list(SERIES_KEY), sort=True):
        batches = sorted(int(b) for b in own["batch_size"].unique())
        row = {**dict(zip(SERIES_KEY, key)), "batches": _batches_text(batches), "runs": len(own)}
        if len(batches) < 3:
            rows.append({**row, "trend": f"not tested: {len(batches)} batch size(s), a trend needs 3"})
            continue
        fewest_runs = int(own.groupby("batch_size").size().min())
        if fewest_runs < stats.MIN_REPETITIONS:
            # One run per batch is one observation per batch: a rank correlation over so few says nothing.
            rows.append({**row, "trend": f"not tested: {TOO_FEW_RUNS} (a trend needs {stats.MIN_REPETITIONS})"})
            continue
        fit = stats.trend(own["batch_size"], own["time_per_sample_s"])
        means = [stats.geometric_mean(own.loc[own["batch_size"] == b, "time_per_sample_s"]) for b in batches]
        row.update(spearman_rho=fit.spearman_rho, spearman_p=fit.spearman_p, ratio_per_doubling=fit.ratio_per_doubling,
                   slope_p=fit.slope_p, trend=fit.direction)
        row.update(_flattening(batches, means))
        rows.append(row)
    return pd.DataFrame(rows, columns=TREND_COLUMNS)


def _flattening(batches: list[int], means: list[float]) -> dict:
    """The smallest batch from which every further doubling gains less than FLATTEN_GAIN in time per sample."""
    # Gain per doubling between neighbours, so that a grid of 1, 4, 16 reads like one of 1, 2, 4.
    gains = [1.0 - (means[i + 1] / means[i]) ** (1.0 / math.log2(batches[i + 1] / batches[i]))
             for i in range(len(batches) - 1)]
    if gains[-1] >= FLATTEN_GAIN:
        return {"flattens_at_batch": math.nan,
                "flatten_note": f"still gaining {gains[-1]:.0%} per doubling at batch {batches[-1]}"}
    start = len(gains)
    while start > 0 and gains[start - 1] < FLATTEN_GAIN:
        start -= 1
    note = "flat from the smallest batch" if start == 0 else f"each doubling past batch {batches[start]} gains < {FLATTEN_GAIN:.0%}"
    return {"flattens_at_batch": batches[start], "flatten_note": note}


EFFICIENCY_COLUMNS = (
    *CONFIG_COLUMNS, "runner", "runs", "forward_flops", "flops_per_step", "achieved_flops_per_s", "device_name",
    "peak_flops_per_s", "peak_entry", "mfu", "efficiency_note",
)


def _device_names(summary: pd.DataFrame) -> dict[tuple, str]:
    summary = normalised(summary)
    if "device_name" not in summary:
        return {}
    named = summary[summary["device_name"].astype(str).str.len() > 0].drop_duplicates([*CONFIG_COLUMNS, "runner"])
    return {tuple(r[:-1]): str(r[-1]) for r in named[[*CONFIG_COLUMNS, "runner", "device_name"]].itertuples(index=False)}


def _forward_flops(model_facts: Optional[pd.DataFrame]) -> dict[tuple, float]:
    """(runner name, model, options, shape) -> forward FLOPs per sample, as the runner counted them."""
    if model_facts is None or model_facts.empty:
        return {}
    facts = model_facts.copy()
    for column in ("runner", "model", "model_options", "input_shape"):
        facts[column] = facts[column].astype(object).where(facts[column].notna(), "").astype(str)
    return {(r.runner, r.model, r.model_options, r.input_shape): float(r.forward_flops)
            for r in facts.itertuples(index=False) if r.forward_flops and r.forward_flops > 0}


def hardware_efficiency(rows: pd.DataFrame, summary: pd.DataFrame, model_facts: Optional[pd.DataFrame]) -> pd.DataFrame:
    """Per comparison row that ran: achieved FLOP/s (forward FLOPs per sample x the job's samples, x3 for
    training, over the median step time) and, where the device's peak for the precision is known, the model FLOP
    utilisation against that peak times the job's devices."""
    if rows.empty:
        return pd.DataFrame(columns=EFFICIENCY_COLUMNS)
    flops = _forward_flops(model_facts)
    names = _device_names(summary)
    table = []
    for row in rows[(rows["status"] == "ok") & rows["median_step_ms"].notna()].itertuples(index=False):
        config = tuple(getattr(row, c) for c in CONFIG_COLUMNS)
        out = {**dict(zip(CONFIG_COLUMNS, config)), "runner": row.runner, "runs": row.runs,
               "device_name": names.get((*config, row.runner), ""), "forward_flops": math.nan,
               "flops_per_step": math.nan, "achieved_flops_per_s": math.nan, "peak_flops_per_s": math.nan,
               "peak_entry": "", "mfu": math.nan}
        forward = flops.get((row.runner_name, row.model, row.model_options, row.input_shape))
        notes = []
        if forward is None:
            notes.append("no FLOP count stored for this model and shape (a sweep or compare inspects it)")
        else:
            per_step = forward * row.global_batch_size * (TRAIN_FLOPS_FACTOR if row.mode == "train" else 1.0)
            out.update(forward_flops=forward, flops_per_step=per_step,
                       achieved_flops_per_s=per_step / (row.median_step_ms / 1e3))
        peak = peak_flops(out["device_name"], row.precision) if str(row.device).startswith("gpu") else None
        if peak is None:
            notes.append("no peak known for a CPU" if str(row.device).startswith("cpu")
                         else f"no peak known for {out['device_name'] or 'this device'} at {row.precision}")
        else:
            devices = int(row.world_size) * int(row.nodes)
            out.update(peak_flops_per_s=peak.flops_per_s * devices, peak_entry=peak.entry)
            if forward is not None:
                out["mfu"] = out["achieved_flops_per_s"] / out["peak_flops_per_s"]
        if row.runs < stats.MIN_REPETITIONS:
            notes.append(f"{row.runs} run(s): the step time behind it is not resolved")
        out["efficiency_note"] = "; ".join(notes)
        table.append(out)
    return pd.DataFrame(table, columns=EFFICIENCY_COLUMNS)


# ---------------------------------------------------------------------------------------------- findings


@dataclass(frozen=True)
class VerdictCount:
    """How one question's configurations came out: per runner, those it won with confidence, and the rest."""

    configurations: int
    wins: dict[str, list[float]]  # runner -> the margins (ratio - 1) of the configurations it won
    unresolved: int  # enough runs, but the difference was not called
    too_few_runs: int
    flagged: int  # configurations with a run on a device that was not quiet

    def headline(self) -> str:
        """'torch faster in 5, tensorflow in 2, 1 not resolved': what a plot's title says."""
        parts = [f"{runner} faster in {len(margins)}" for runner, margins in self._ranked()]
        if self.unresolved:
            parts.append(f"{self.unresolved} not resolved")
        if self.too_few_runs:
            parts.append(f"{self.too_few_runs} with too few runs")
        return ", ".join(parts) or "no verdict"

    def _ranked(self) -> list[tuple[str, list[float]]]:
        return sorted(self.wins.items(), key=lambda item: (-len(item[1]), item[0]))


def verdict_counts(rows: pd.DataFrame) -> VerdictCount:
    """Per configuration with two or more runners that ran: the fastest runner wins it where every other runner's
    verdict called it significantly slower."""
    wins: dict[str, list[float]] = {}
    configurations = unresolved = too_few = flagged = 0
    if rows.empty:
        return VerdictCount(0, wins, 0, 0, 0)
    for _, frame in rows.groupby(list(CONFIG_COLUMNS), sort=False):
        ran = frame[(frame["status"] == "ok") & frame["median_step_ms"].notna()]
        if len(ran) < 2:
            continue
        configurations += 1
        flagged += bool((ran["flagged"].astype(str) != "").any())
        others = ran[ran["verdict"] != "fastest"]
        if (others["runs"] < stats.MIN_REPETITIONS).any() or int(ran["runs"].min()) < stats.MIN_REPETITIONS:
            too_few += 1
        elif others["significant"].astype(bool).all():
            winner = ran.loc[ran["verdict"] == "fastest", "runner"].iloc[0]
            wins.setdefault(winner, []).append(float(others["ratio_to_fastest"].min()) - 1.0)
        else:
            unresolved += 1
    return VerdictCount(configurations, wins, unresolved, too_few, flagged)


@dataclass(frozen=True)
class Finding:
    question: str
    sentence: str
    flagged: str = ""  # why a verdict behind it is not trustworthy; "" where none


OVER_RUNS = f" ({stats.CONFIDENCE:.0%} confidence, over runs)."


def _range(margins: list[float]) -> str:
    low, high = min(margins), max(margins)
    return f"by {low:.0%}" if round(low, 2) == round(high, 2) else f"by {low:.0%} to {high:.0%}"


def _time_finding(question: str, rows: pd.DataFrame, what: str) -> Finding:
    counts = verdict_counts(rows)
    if not counts.configurations:
        return Finding(question, f"Not measured: no {what} configuration ran on two or more runners.")
    wins = [f"{runner} was faster in {len(m)} of {counts.configurations} configurations ({_range(m)})"
            for runner, m in counts._ranked()]
    rest = []
    if counts.unresolved:
        rest.append(f"{counts.unresolved} could not be told apart")
    if counts.too_few_runs:
        rest.append(f"{counts.too_few_runs} had too few runs for a verdict (need {stats.MIN_REPETITIONS} per runner)")
    if counts.too_few_runs == counts.configurations:
        return Finding(question, f"Not resolved: each of the {counts.configurations} configurations has fewer than "
                                 f"{stats.MIN_REPETITIONS} runs per runner, and a verdict needs {stats.MIN_REPETITIONS} "
                                 "(run more repetitions).")
    if not wins:
        wins = [f"no runner was faster with confidence in any of {counts.configurations} configurations"]
    sentence = "; ".join(wins) + (f"; {', '.join(rest)}" if rest else "") + OVER_RUNS
    flagged = f"{counts.flagged} configuration(s) had a run on a device that was not quiet" if counts.flagged else ""
    return Finding(question, sentence, flagged)


def _trend_finding(trends: pd.DataFrame) -> Finding:
    question = "Batch size and inference time per sample"
    tested = trends[(trends["mode"] == "infer") & trends["spearman_p"].notna()] if not trends.empty else trends
    if tested.empty:
        return Finding(question, f"Not tested: no inference series ran at three or more batch sizes with at least "
                                 f"{stats.MIN_REPETITIONS} runs each.")
    falls = tested[tested["trend"] == "falls"]
    rises = tested[tested["trend"] == "rises"]
    sentence = (f"Time per sample fell as the batch grew in {len(falls)} of {len(tested)} series"
                + (f", rose in {len(rises)}" if len(rises) else "")
                + f" (Spearman's rank correlation over runs, p < {stats.ALPHA:g})")
    flat = tested.dropna(subset=["flattens_at_batch"])
    if len(flat):
        points = [f"{r.model} {r.runner} {r.device} past {int(r.flattens_at_batch)}" for r in flat.head(4).itertuples(index=False)]
        sentence += f"; doubling it gained less than {FLATTEN_GAIN:.0%} " + ", ".join(points) + (", …" if len(flat) > 4 else "")
    return Finding(question, sentence + ".")


def _energy_finding(summary: pd.DataFrame, steps: pd.DataFrame) -> Finding:
    question = "Power and energy"
    runs = per_run(summary, steps).dropna(subset=["energy_per_sample_j"])
    if runs.empty:
        return Finding(question, "Not measured: no run has a power reading (CPUs have none here; on a GPU, telemetry "
                                 "was off or unreadable).")
    wins: dict[str, int] = {}
    configurations = unresolved = 0
    for _, frame in runs.groupby(list(CONFIG_COLUMNS), sort=False):
        per_runner = {r: g["energy_per_sample_j"].to_numpy() for r, g in frame.groupby("runner")}
        if len(per_runner) < 2:
            continue
        configurations += 1
        ranked = sorted(per_runner, key=lambda r: stats.geometric_mean(per_runner[r]))
        best = ranked[0]
        if all(stats.compare(best, per_runner[best], r, per_runner[r]).significant for r in ranked[1:]):
            wins[best] = wins.get(best, 0) + 1
        else:
            unresolved += 1
    if not configurations:
        return Finding(question, "Energy per sample was measured for one runner only: nothing to compare.")
    parts = [f"{runner} used less energy per sample in {n} of {configurations} configurations"
             for runner, n in sorted(wins.items(), key=lambda i: -i[1])]
    if not wins:
        parts = [f"no runner used less energy per sample with confidence in any of {configurations} configurations"]
    elif unresolved:
        parts.append(f"{unresolved} could not be told apart")
    return Finding(question, "; ".join(parts) + OVER_RUNS)


def _scaling_finding(scaling: pd.DataFrame) -> Finding:
    question = "Scaling over devices"
    if not has_scaling(scaling):
        return Finding(question, "Not measured: no configuration ran at more than one number of devices.")
    spread = scaling[(scaling["world_size"] > 1) & scaling["scaling_efficiency"].notna()]
    if spread.empty:
        return Finding(question, "Not measured: no one-device baseline at the same per-device batch.")
    resolved = spread[spread["runs"] >= stats.MIN_REPETITIONS]
    shown = resolved if len(resolved) else spread
    best = shown.loc[shown["scaling_efficiency"].idxmax()]
    worst = shown.loc[shown["scaling_efficiency"].idxmin()]
    sentence = (f"Scaling efficiency ranged from {worst.scaling_efficiency:.0%} ({worst.runner}, {worst.world_size} devices) "
                f"to {best.scaling_efficiency:.0%} ({best.runner}, {best.world_size} devices) over {len(shown)} configuration(s)")
    if resolved.empty:
        sentence += f"; from fewer than {stats.MIN_REPETITIONS} runs each, so not resolved"
    return Finding(question, sentence + ".")


def findings(
    rows: pd.DataFrame, summary: pd.DataFrame, steps: pd.DataFrame, trends: pd.DataFrame, scaling: pd.DataFrame,
) -> list[Finding]:
    """One finding per question of the studies, generated from the data: training time, GPU inference, CPU
    inference, the batch trend, power and energy, and scaling."""
    kinds = rows["device"].astype(str).str.split(":").str[0] if not rows.empty else pd.Series(dtype=str)
    infer = rows["mode"] == "infer" if not rows.empty else pd.Series(dtype=bool)
    return [
        _time_finding("Training time", rows[rows["mode"] == "train"] if not rows.empty else rows, "training"),
        _time_finding("GPU inference", rows[infer & (kinds == "gpu")] if not rows.empty else rows, "GPU inference"),
        _time_finding("CPU inference", rows[infer & (kinds == "cpu")] if not rows.empty else rows, "CPU inference"),
        _trend_finding(trends),
        _energy_finding(summary, steps),
        _scaling_finding(scaling),
    ]
