"""design_aa.py's judging: every analysis over collected A/A runs (fixed and sequential, Welch, paired and by
covariate), as is and with a difference planted, read from the CSVs alone (no runner needed)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from fwbench_aggregator.analyse import stats
from fwbench_aggregator.analyse.sequential import default_budget, look, plan_for
from fwbench_aggregator.plan.design import is_blocks

ANALYSES = ("welch", "paired")
# Judged where the runs carry the covariate (collections since 2026-11-29 afternoon): Welch on CUPED-adjusted runs.
COVARIATE = "covariate"


def adjusted_by_covariate(
    a: np.ndarray, b: np.ndarray, xa: np.ndarray, xb: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """CUPED on log run medians: each run less theta times its covariate's distance from the comparison's mean, theta
    the slope within instances (pooled), so that a run made while the host was busier counts as it would have at the
    mean load. Also the within-instance correlation, what the adjustment can remove (r squared of the variance)."""
    ya, yb = np.log(a), np.log(b)
    dx = np.concatenate([xa - xa.mean(), xb - xb.mean()])
    dy = np.concatenate([ya - ya.mean(), yb - yb.mean()])
    spread = float(dx @ dx)
    theta = float(dx @ dy) / spread if spread > 0 else 0.0
    r = float(dx @ dy) / math.sqrt(spread * float(dy @ dy)) if spread > 0 and dy @ dy > 0 else 0.0
    mean_x = float(np.concatenate([xa, xb]).mean())
    return np.exp(ya - theta * (xa - mean_x)), np.exp(yb - theta * (xb - mean_x)), r


def fixed(analysis: str, a: np.ndarray, b: np.ndarray) -> stats.Comparison:
    return stats.compare("a", a, "b", b, paired=analysis == "paired")


def sequential(analysis: str, a: np.ndarray, b: np.ndarray, max_runs: int | None, blocks: bool = False):
    """The sequential design replayed over the runs in the order they ran: the decision at the first look that
    stops, or at the last round collected (then "continue": the budget would have run on). Blocks judged paired
    look and spend as compare --design blocks does; `max_runs` None is the design's default budget."""
    paired_blocks = blocks and analysis == "paired"
    plan_ = plan_for(max_runs or default_budget(blocks), paired_blocks)
    for n in range(stats.MIN_REPETITIONS, a.size + 1):
        decision = look(plan_, a[:n], b[:n], "a", "b", paired=analysis == "paired")
        if decision.stop:
            break
    return decision


def judged(runs: pd.DataFrame, plant: float, fixed_runs: list[int], max_runs: int | None) -> dict:
    """One A/A comparison's runs (rounds in order) under every analysis, as is and with the difference planted."""
    a, b = runs["a_s"].to_numpy(float), runs["b_s"].to_numpy(float)
    # The whole comparison's time, starting both instances included: every collection records it.
    row = {"rounds": len(runs), "wall_s": float(runs["pair_wall_s"].iloc[0])}
    for analysis in ANALYSES:
        for n in fixed_runs:
            if a.size < n:
                continue
            aa, planted = fixed(analysis, a[:n], b[:n]), fixed(analysis, a[:n], b[:n] * plant)
            row[f"{analysis} {n}: resolves"] = aa.resolvable
            row[f"{analysis} {n}: wrong"] = aa.significant
            row[f"{analysis} {n}: found"] = planted.significant and planted.slower == "b"
            row[f"{analysis} {n}: runs"] = n
        blocks = is_blocks(runs["design"].iloc[0]) if "design" in runs else False
        aa, planted = sequential(analysis, a, b, max_runs, blocks), sequential(analysis, a, b * plant, max_runs, blocks)
        row[f"{analysis} auto: resolves"] = aa.comparison.resolvable
        row[f"{analysis} auto: wrong"] = aa.outcome == "different"
        row[f"{analysis} auto: found"] = planted.outcome == "different" and planted.comparison.slower == "b"
        row[f"{analysis} auto: runs"] = aa.runs
    covariates = [
        pd.to_numeric(runs.get(f"{name}_other_cpu_cores", pd.Series(dtype=float)), errors="coerce").to_numpy(float)
        for name in ("a", "b")
    ]
    if all(x.size == a.size and not np.isnan(x).any() for x in covariates):
        xa, xb = covariates
        for n in fixed_runs:
            if a.size < n:
                continue
            ca, cb, r = adjusted_by_covariate(a[:n], b[:n], xa[:n], xb[:n])
            pa, pb_, _ = adjusted_by_covariate(a[:n], b[:n] * plant, xa[:n], xb[:n])
            aa, planted = fixed("welch", ca, cb), fixed("welch", pa, pb_)
            row[f"covariate {n}: resolves"] = aa.resolvable
            row[f"covariate {n}: wrong"] = aa.significant
            row[f"covariate {n}: found"] = planted.significant and planted.slower == "b"
            row[f"covariate {n}: runs"] = n
            row[f"covariate {n}: r"] = r
    return row


def read_sittings(paths: list[Path]) -> pd.DataFrame:
    """Collected CSVs as one frame, each row with its sitting: the name of the folder its file lies in. A sitting's
    pairs are its own (another sitting's pair 0 is another pair); files in one folder add pairs to one sitting
    (collect --first-pair)."""
    return pd.concat(
        [pd.read_csv(path, keep_default_na=False).assign(sitting=path.parent.name) for path in paths], ignore_index=True
    )


def judge(paths: list[Path], plant: float, fixed_runs: list[int], max_runs: int | None) -> int:
    frame = read_sittings(paths)
    for column, default in (("run_isolation", ""), ("design", "rounds 1s")):
        frame[column] = frame[column].fillna(default) if column in frame else default
    keys = ["design", "run_isolation", "framework", "model", "mode", "batch_size", "shape", "sitting", "pair"]
    rows = [
        {**dict(zip(keys, key)), **judged(runs.sort_values("round"), plant, fixed_runs, max_runs)}
        for key, runs in frame.groupby(keys, sort=False)
    ]
    table = pd.DataFrame(rows)
    print(f"{len(table)} A/A comparisons, each with freshly started instances; planted difference: b x {plant}")
    print(
        f"\n{'collected':<20} {'analysis':<14} {'median resolves':>15} {'A/A wrong':>10} {'planted found':>14} "
        f"{'median runs':>11} {'median wall s':>13}"
    )
    for (design, isolation), mine in table.groupby(["design", "run_isolation"], sort=False):
        collected = f"{design}{' ' + isolation if isolation else ''}"
        for analysis in (*ANALYSES, COVARIATE):
            for n in [*(str(n) for n in fixed_runs), "auto"]:
                if f"{analysis} {n}: resolves" not in mine:
                    continue
                done = mine[f"{analysis} {n}: resolves"].notna()
                resolves = mine.loc[done, f"{analysis} {n}: resolves"].median()
                print(
                    f"{collected:<20} {analysis + ' ' + n:<14} {resolves:>15.1%} "
                    f"{int(mine[f'{analysis} {n}: wrong'].sum()):>4} of {len(mine):<3} "
                    f"{int(mine[f'{analysis} {n}: found'].sum()):>7} of {len(mine):<3} "
                    f"{mine[f'{analysis} {n}: runs'].median():>11g} {mine['wall_s'].median():>13.0f}"
                )
        if "welch 8: resolves" in mine:
            narrower = mine["welch 8: resolves"] / mine["paired 8: resolves"]
            print(
                f"{collected:<20} paired over Welch at 8 runs: intervals narrower by a median "
                f"{narrower.median():.2f}x (range {narrower.min():.2f}x to {narrower.max():.2f}x)"
            )
        if "covariate 8: resolves" in mine and mine["covariate 8: resolves"].notna().any():
            narrower = mine["welch 8: resolves"] / mine["covariate 8: resolves"]
            print(
                f"{collected:<20} covariate over Welch at 8 runs: intervals narrower by a median "
                f"{narrower.median():.2f}x (range {narrower.min():.2f}x to {narrower.max():.2f}x); run medians' "
                f"correlation with other processes' CPU within instances: median r {mine['covariate 8: r'].median():+.2f} "
                f"(range {mine['covariate 8: r'].min():+.2f} to {mine['covariate 8: r'].max():+.2f})"
            )
        print_found_by_configuration(collected, mine, "paired auto" if is_blocks(design) else "welch auto")
        print_process_offsets(frame[(frame["design"] == design) & (frame["run_isolation"] == isolation)], keys[:-1])
    return 0


def print_found_by_configuration(collected: str, table: pd.DataFrame, analysis: str) -> None:
    """How many configurations call the planted difference, under the analysis compare uses for this design: the
    issue's measure of power is configurations, not comparisons, so that one easy configuration cannot hide a hard
    one. A configuration counts where most of its comparisons (across pairs and sittings) found it."""
    found = table.groupby(["framework", "model", "mode", "batch_size", "shape"], sort=False)[f"{analysis}: found"].agg(
        ["mean", "sum", "size"]
    )
    print(
        f"{collected:<20} planted found under {analysis}, by configuration: in most comparisons in "
        f"{int((found['mean'] > 0.5).sum())} of {len(found)}, in every one in {int((found['mean'] == 1).sum())}; "
        "least: "
        + ", ".join(
            f"{' '.join(str(k) for k in key if k)} {int(row['sum'])} of {int(row['size'])}"
            for key, row in found.nsmallest(3, "mean").iterrows()
        )
    )


def process_offsets(frame: pd.DataFrame, config_keys: list[str]) -> list[tuple[str, float]]:
    """How far fresh pairs of instances of each configuration sit apart beyond their runs' own noise: the spread of
    each pair's mean log ratio less what its rounds' spread explains (a variance-components estimate), by
    configuration name. An offset a process carries for all its runs is invisible to any test within one pair, and is
    what a verdict would call a difference between identical runners."""
    offsets = []
    for key, runs in frame.groupby(config_keys, sort=False):
        logs = np.log(runs["b_s"].to_numpy(float) / runs["a_s"].to_numpy(float))
        by_pair = pd.Series(logs).groupby(runs["pair"].to_numpy())
        if by_pair.ngroups < 2:
            continue
        between = by_pair.mean().var(ddof=1) - (by_pair.var(ddof=1) / by_pair.size()).mean()
        offsets.append((" ".join(str(k) for k in key if k), math.sqrt(max(between, 0.0))))
    return offsets


def print_process_offsets(frame: pd.DataFrame, config_keys: list[str]) -> None:
    offsets = process_offsets(frame, config_keys)
    if offsets:
        name, largest = max(offsets, key=lambda o: o[1])
        print(
            f"{'':<20} process offsets beyond the rounds' noise: median {np.median([o[1] for o in offsets]):.1%}, "
            f"largest {largest:.1%} ({name})"
        )
