"""The one place where runs become figures and verdicts: every table, file, report and plot reads these rows.

Input: the `summary` and `steps` frames (one row per run, one row per step; store.records builds them, the
store concatenates them) and, where `fwbench calibrate` measured it, the `calibration` frame (one noise
floor per configuration and framework). Output: one row per configuration and runner.

Figures are per run first, then over runs (stats.py says why): a run's median step time is its value,
median_step_ms is the geometric mean of those values, and verdicts compare runners on them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..plan.design import ROUNDS_LABEL
from ..store.analysis_columns import COMPARISON_COLUMNS
from ..store.comparability_columns import FLOOR_KEY_COLUMNS
from ..store.run_columns import (
    BUILT_IN,
    CONFIG_COLUMNS,
    RUN_COLUMNS,
    SERIES_COLUMNS,
    SETTINGS_COLUMNS,
)
from . import stats
from .alike import keyed, labelled
from .floors import Floor, noise_floors
from .judging import judge_against_native, judge_configuration
from .object_text import text_as_objects
from .parity import PARITY_CHECKED, parity_status
from .run_values import normalised, run_values


def is_out_of_memory(error: str) -> bool:
    text = str(error or "").lower()
    # Not every RESOURCE_EXHAUSTED: a busy runner's refusal is one too.
    return "out of memory" in text or "oom" in text.split()


def failure_verdict(error: str) -> str:
    if is_out_of_memory(error):
        return "out of memory"
    text = " ".join(str(error or "unknown error").split())
    return f"failed: {text[:200]}{'…' if len(text) > 200 else ''}"


def with_status(summary: pd.DataFrame) -> pd.DataFrame:
    """The normalised summary with every run's status as text: "ok" where the store predates statuses, "failed" where
    a run recorded none."""
    summary = normalised(summary)
    summary["status"] = summary["status"].fillna("failed") if "status" in summary else "ok"
    summary["status"] = summary["status"].astype(str)
    return summary


def _first(values: pd.Series, default=""):
    """The first value that is neither missing nor empty text; looked at one by one (a row's few runs), since making
    the whole column text cost a large report's analysis a second a thousand rows."""
    for place, value in enumerate(values.to_numpy(dtype=object)):
        if not (pd.api.types.is_scalar(value) and pd.isna(value)) and str(value) != "":
            return values.iloc[place]
    return default


def _numbers(values: pd.Series) -> pd.Series:
    return pd.to_numeric(values, errors="coerce").dropna()


def flag_summary(device_flags: pd.Series, runs: int, unit: str = "runs") -> str:
    """Why a row's runs were not on a quiet device, each kind once with how many runs it concerns: "host busy in 3
    of 6 runs" (`unit`: "windows" where the runs were a process block's windows). A run's flags are " | "-separated,
    each "kind: details"."""
    counts: dict[str, int] = {}
    for text in device_flags.dropna():
        for kind in dict.fromkeys(flag.split(": ", 1)[0].strip() for flag in str(text).split(" | ") if flag.strip()):
            counts[kind] = counts.get(kind, 0) + 1
    return "; ".join(f"{kind} in {n} of {runs} {unit}" for kind, n in counts.items())


def _joined(values) -> str:
    return " | ".join(dict.fromkeys(str(v) for v in values if isinstance(v, str) and v))


def _joined_settings(values: pd.Series) -> str:
    """A setting over a row's runs: its one value, or every value it took (" | "), "" where never reported."""
    return " | ".join(dict.fromkeys(str(v) for v in values.dropna() if str(v) != ""))


def straggler_spread_of(runs: pd.DataFrame) -> float:
    """The median of the runs' straggler spreads; none with one rank, where there is no straggler."""
    if "straggler_spread" not in runs:
        return math.nan
    spread = _numbers(runs["straggler_spread"][runs["world_size"] > 1])
    return float(spread.median()) if len(spread) else math.nan


def comparison_rows(
    summary: pd.DataFrame,
    steps: pd.DataFrame,
    calibration: pd.DataFrame | None = None,
    min_effect: float = stats.MIN_EFFECT,
    parity: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per configuration and runner, over all that runner's runs of it.

    median_step_ms is the geometric mean of the runs' median step times; p5/p95 are over the pooled
    measured steps (the spread inside runs), run_spread the spread between runs (about a fraction).
    Energy per sample and mean power are means over the runs that could measure them; energy_status
    says why the others could not. ratio_to_fastest divides by the fastest runner's median_step_ms.
    verdict: "fastest" for the fastest, stats.compare's verdict (fastest against this one, over runs)
    for the others, "out of memory" / "failed: ..." for a runner whose every run failed, "only runner"
    where no other runner ran the configuration; significant: whether that verdict called this runner
    slower. noise_floor: the calibrated floor applied, noise_floor_source which calibration it is (or "none"),
    noise_floor_flagged why that calibration's runs were not quiet (analyse.floors: its rule). flagged: why a run of
    this row was not on a quiet device. model_source and model_hash: which model
    ran (a plug-in's folder and hash); parity: for a plug-in, what `fwbench parity` showed (the `parity` frame).
    """
    summary = _numbered_runs(summary)
    row_of = summary[[*RUN_COLUMNS, "_row", "process_block"]].drop_duplicates(list(RUN_COLUMNS))
    steps = normalised(steps)
    step_times = _measured_step_times(steps, row_of)
    runs_frame = run_values(summary, steps).merge(row_of, on=list(RUN_COLUMNS))
    run_medians = {row: evidence_of(group) for row, group in runs_frame.groupby("_row", sort=False)}
    floors = noise_floors(normalised(calibration))
    rows = [
        row
        for config, runs in summary.groupby(list(CONFIG_COLUMNS), sort=False)
        for group, block in runs.groupby("group", sort=False)
        for row in _block_rows(config, group, block, step_times, run_medians, floors, min_effect, parity)
    ]
    table = pd.DataFrame(rows, columns=[*COMPARISON_COLUMNS, "_medians"]).drop(columns="_medians")
    return in_reading_order(table) if not table.empty else table


def _numbered_runs(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary keyed and labelled, each run numbered (_row) by its configuration, block and label (its runner and
    that runner's key within the block), process_block filled."""
    summary = labelled(keyed(with_status(summary)), CONFIG_COLUMNS)
    summary["_row"] = summary.groupby([*CONFIG_COLUMNS, "group", "label"], sort=False).ngroup()
    if "process_block" not in summary:
        summary["process_block"] = ""
    summary["process_block"] = summary["process_block"].fillna("").astype(str)
    return text_as_objects(summary)


def _measured_step_times(steps: pd.DataFrame, row_of: pd.DataFrame) -> dict[int, np.ndarray]:
    """Each row's measured (not warm-up) step times, pooled over its runs."""
    measured = steps[~steps["warmup"].astype(bool)] if "warmup" in steps else steps
    if "step_time_s" not in measured:
        return {}
    return {
        row: group["step_time_s"].to_numpy(dtype=float)
        for row, group in measured.merge(row_of, on=list(RUN_COLUMNS)).groupby("_row", sort=False)
    }


def _block_rows(
    config: tuple,
    group,
    block: pd.DataFrame,
    step_times: dict,
    run_medians: dict,
    floors: dict[tuple, Floor],
    min_effect: float,
    parity: pd.DataFrame | None,
) -> list[dict]:
    """One row per runner of a configuration's block, judged against the block's fastest, with the block's time."""
    config_values = dict(zip(CONFIG_COLUMNS, config))
    # Throughput counts the job's samples: the per-device batch on every device of every runner.
    batch_size = int(config_values["batch_size"]) * int(config_values["world_size"])
    block_rows = [
        {
            **_row(config_values, batch_size, label, own, step_times, run_medians),
            "group": group,
            "variant": own["variant"].iloc[0],
        }
        for label, own in block.groupby("label", sort=False)
    ]
    judge_configuration(block_rows, floors, config, min_effect)
    judge_against_native(block_rows, min_effect)
    _mark_source(block_rows, block, parity)
    started, finished = (
        _numbers(block.get(c, pd.Series(dtype=float))) for c in ("started_at_unix_s", "finished_at_unix_s")
    )
    for row in block_rows:
        # The block's time, every runner's runs from the first start to the last finish.
        row["wall_s"] = float(finished.max() - started.min()) if len(started) and len(finished) else math.nan
    return block_rows


def in_reading_order(table: pd.DataFrame) -> pd.DataFrame:
    """By configuration and block, then ok rows before failed ones, fastest first."""
    table = (
        table.assign(_failed=table["status"] != "ok")
        .sort_values(
            [
                "model",
                "model_options",
                "mode",
                "device",
                "precision",
                "input_shape",
                "batch_size",
                "world_size",
                "nodes",
                "group",
                "_failed",
                "ratio_to_fastest",
                "runner",
            ],
            kind="stable",
        )
        .drop(columns="_failed")
    )
    return table.reset_index(drop=True)


def _row(
    config_values: dict, batch_size: int, label: str, own: pd.DataFrame, step_times: dict, run_medians: dict
) -> dict:
    """One row: a runner's runs of one configuration that are alike (one block, one runner key), before judging. Read
    column by column: selecting the runs' rows of every column, twice a row, was most of a large report's analysis."""
    is_ok = (own["status"] == "ok").to_numpy()
    runs_ok, runs_failed = int(is_ok.sum()), int((~is_ok).sum())
    first_row = own.iloc[0]

    def every(column: str) -> pd.Series:
        return own.get(column, pd.Series(dtype=object))

    def of(column: str, rows: np.ndarray = is_ok) -> pd.Series:
        """The column's values over `rows` (the successful runs'); none where no run recorded it."""
        return own[column][rows] if column in own else pd.Series(dtype=object)

    row_id = first_row["_row"]  # `own` is grouped by what numbered the rows: one number
    times = step_times.get(row_id, np.array([]))
    medians, units = run_medians.get(row_id, (np.array([]), ()))
    energy, power = _numbers(of("energy_per_sample_j")), _numbers(of("mean_power_w"))
    repetitions = _numbers(of("max_repetitions"))
    row = {
        **config_values,
        "runner": label,
        "runner_name": _first(own["runner_name"]),
        "strategy": _first(own["strategy"]),
        "global_batch_size": batch_size,
        "straggler_spread": straggler_spread_of(
            own[[c for c in ("world_size", "straggler_spread") if c in own]][is_ok]
        ),
        "framework": _first(every("framework")),
        "framework_version": _first(every("framework_version")),
        "container_image": _first(every("container_image")),
        "device_name": first_row["device_name"],  # one device model a block
        **{setting: _joined_settings(of(setting)) for setting in SETTINGS_COLUMNS},
        "runs": runs_ok,
        "failed_runs": runs_failed,
        "steps": int(times.size),
        "energy_per_sample_j": float(energy.mean()) if len(energy) else math.nan,
        "mean_power_w": float(power.mean()) if len(power) else math.nan,
        "energy_runs": int(len(energy)),
        "energy_status": _joined(s for s in of("energy_status") if s != "ok"),
        "flagged": flag_summary(
            of("device_flags"), runs_ok, "windows" if (of("process_block") != "").any() else "runs"
        ),
        "error": _joined(of("error", ~is_ok).fillna("")),
        "max_repetitions": int(repetitions.max()) if len(repetitions) else 0,
        "looks": str(_first(every("looks"))),
        "model_source": str(_first(every("model_source"), BUILT_IN)),
        "model_hash": str(_first(every("model_hash"))),
        "_medians": medians,
        "_units": units,
        "blocks": len(units),
        "design": _first(every("design"), ROUNDS_LABEL),
        "_alike": {column: first_row[column] for column in FLOOR_KEY_COLUMNS},  # one key a row
    }
    if runs_ok and medians.size:
        median_s = stats.geometric_mean(medians)
        row.update(
            status="ok",
            median_step_ms=median_s * 1e3,
            p5_step_ms=float(np.percentile(times, 5)) * 1e3 if times.size else math.nan,
            p95_step_ms=float(np.percentile(times, 95)) * 1e3 if times.size else math.nan,
            run_spread=stats.run_spread(medians),
            throughput_samples_per_s=batch_size / median_s,
        )
    elif runs_ok:
        row.update(status="ok", median_step_ms=math.nan, verdict="no measured steps")
    else:
        row.update(status="failed", median_step_ms=math.nan, verdict=failure_verdict(row["error"]))
    row["ms_per_sample"] = row["median_step_ms"] / batch_size if batch_size else math.nan
    return row


def evidence_of(runs: pd.DataFrame) -> tuple[np.ndarray, tuple[str, ...]]:
    """A row's units of evidence, in the order they ran: its runs' medians; or, where its runs are windows of process
    blocks (plan.design), each block's value, the geometric mean of its windows' medians, with the blocks' names."""
    medians = runs["median_step_time_s"].astype(float)
    if runs.empty or (runs["process_block"] == "").any():
        return medians.to_numpy(), ()
    values = np.exp(np.log(medians).groupby(runs["process_block"], sort=False).mean())
    return values.to_numpy(), tuple(values.index)


def _mark_source(block_rows: list[dict], runs: pd.DataFrame, checks: pd.DataFrame | None) -> None:
    """The parity evidence for the model each row ran (its plug-in's hash: rows of other hashes are apart), in place."""
    runners = sorted({r["runner_name"] for r in block_rows})
    for row in block_rows:
        row["parity"] = parity_status(row["model"], row["model_hash"], row["model_source"], runners, checks)


def flagged_verdict(verdict: str, flagged: object, parity: object = "") -> str:
    """The verdict as every table shows it: marked where a run was not on a quiet device, and for a plug-in model
    whose runners were not shown to build the same network, with what parity showed."""
    text = f"{verdict} [FLAGGED: {flagged}]" if isinstance(flagged, str) and flagged else str(verdict)
    return f"{text} ({parity})" if isinstance(parity, str) and parity and parity != PARITY_CHECKED else text


def per_run(summary: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per successful run: analysis.run_values's median step time, and from it the run's throughput and
    time per sample over the job's samples (batch per device x devices), its runner's name, strategy, device name and
    energy per sample. Its `runner` is labelled by what sets its runs apart from others of their series (a
    configuration less its batch size: alike.labelled) and `group` says which block of them it is in, so that a
    series across batch sizes pools only alike runs."""
    runs = run_values(summary, steps)
    if runs.empty:
        return runs.assign(
            runner_name="",
            strategy="",
            device_name="",
            group="",
            time_per_sample_s=np.nan,
            throughput_samples_per_s=np.nan,
            energy_per_sample_j=np.nan,
        )
    summary = with_status(summary)
    facts = labelled(keyed(summary), SERIES_COLUMNS)
    extra = [c for c in ("runner_name", "strategy", "device_name", "energy_per_sample_j") if c in facts]
    facts = facts[[*RUN_COLUMNS, "label", "group", *extra]].drop_duplicates(list(RUN_COLUMNS))
    runs = runs.merge(facts, on=list(RUN_COLUMNS), how="left")
    runs["runner"] = runs.pop("label")
    for column, default in (("device_name", ""), ("energy_per_sample_j", np.nan)):
        if column not in runs:
            runs[column] = default
    runs = runs.astype({"runner": str, "group": str, "device_name": str})  # text, as the tables write it
    samples = runs["batch_size"] * runs["world_size"]
    runs["time_per_sample_s"] = runs["median_step_time_s"] / samples
    runs["throughput_samples_per_s"] = samples / runs["median_step_time_s"]
    return runs
