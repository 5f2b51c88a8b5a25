"""Throughput against devices: scaling efficiency per runner and strategy, and the studies' head-to-head tables
(DataParallel against DistributedDataParallel, DDP against MirroredStrategy)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..store.analysis_columns import SCALING_COLUMNS, STRATEGY_PAIR_COLUMNS
from ..store.comparability_columns import RUNNER_KEY_COLUMNS
from ..store.run_columns import CONFIG_COLUMNS, SCALING_KEY_COLUMNS
from . import stats
from .alike import keyed, labelled
from .comparison import straggler_spread_of, with_status
from .object_text import text_as_objects


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
    summary = with_status(summary)
    if summary.empty or "median_step_time_s" not in summary:
        return pd.DataFrame(columns=SCALING_COLUMNS)
    # Runs pool, and find their one-device baseline, only among alike runs (alike.labelled): one block, one runner key.
    summary = labelled(keyed(summary), SCALING_KEY_COLUMNS)
    # The columns read below alone, text as objects: the groups below took every column's rows, most of the table's
    # time over a large store
    read = [*SCALING_KEY_COLUMNS, "group", "label", "runner_name", "strategy", "world_size", "nodes", "batch_size"]
    read += [column for column in ("median_step_time_s", "straggler_spread") if column in summary]
    ok = text_as_objects(summary.loc[summary["status"] == "ok", list(dict.fromkeys(read))])
    ok["runner_key"] = summary[list(RUNNER_KEY_COLUMNS)].groupby(list(RUNNER_KEY_COLUMNS), sort=False).ngroup()
    rows = []
    for (*config, _), runs in ok.groupby([*SCALING_KEY_COLUMNS, "group"], sort=False):
        for (label, runner_name, strategy, world_size, nodes), own in runs.groupby(
            ["label", "runner_name", "strategy", "world_size", "nodes"], sort=True
        ):
            values = _throughputs(own)
            if not values.size:
                continue
            same_runner = runs["runner_key"] == own["runner_key"].iloc[0]
            one = runs[(runs["runner_name"] == runner_name) & same_runner & (runs["world_size"] == 1)]
            single = one[one["strategy"] == "single"]
            baseline_runs = _throughputs(single if len(single) else one[one["strategy"] == strategy])
            throughput = stats.geometric_mean(values)
            row = {
                **dict(zip(SCALING_KEY_COLUMNS, config)),
                "runner": label,
                "runner_name": runner_name,
                "strategy": strategy,
                "world_size": int(world_size),
                "nodes": int(nodes),
                "runs": int(values.size),
                "throughput_samples_per_s": throughput,
                "straggler_spread": straggler_spread_of(own),
                "baseline_throughput_samples_per_s": math.nan,
                "scaling_efficiency": math.nan,
                "efficiency_note": "",
            }
            if baseline_runs.size:
                baseline = stats.geometric_mean(baseline_runs)
                row.update(
                    baseline_throughput_samples_per_s=baseline,
                    scaling_efficiency=throughput / (int(world_size) * baseline),
                )
            else:
                row["efficiency_note"] = (
                    f"no one-device run of {runner_name} at this configuration (same per-device batch); "
                    "run it with --device or one entry of --devices"
                )
            rows.append(row)
    return pd.DataFrame(rows, columns=SCALING_COLUMNS)


def has_scaling(scaling: pd.DataFrame) -> bool:
    """Whether some configuration ran at more than one world size: a scaling table says something."""
    if scaling.empty:
        return False
    sizes = scaling.groupby(list(SCALING_KEY_COLUMNS), sort=False)["world_size"].nunique()
    return bool((sizes > 1).any())


def strategy_pairs(rows: pd.DataFrame, first: str, second: str) -> pd.DataFrame:
    """The studies' head-to-head tables from comparison rows: per configuration and world size, the
    throughput of each runner using `first` and of each using `second`, and second / first."""
    columns = list(STRATEGY_PAIR_COLUMNS)
    if rows.empty:
        return pd.DataFrame(columns=columns)
    ran = rows[(rows["status"] == "ok") & rows["throughput_samples_per_s"].notna()]
    table = []
    for config, frame in ran.groupby(list(CONFIG_COLUMNS), sort=False):
        for a in frame[frame["strategy"] == first].itertuples(index=False):
            for b in frame[frame["strategy"] == second].itertuples(index=False):
                table.append(
                    {
                        **dict(zip(CONFIG_COLUMNS, config)),
                        "runner_a": a.runner,
                        "throughput_a": a.throughput_samples_per_s,
                        "runner_b": b.runner,
                        "throughput_b": b.throughput_samples_per_s,
                        "ratio_b_to_a": b.throughput_samples_per_s / a.throughput_samples_per_s,
                    }
                )
    return pd.DataFrame(table, columns=columns)
