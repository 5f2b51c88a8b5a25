"""Figures as text: how every table (terminal, Markdown, HTML) shows a frame's values and names its columns."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyse.comparison import flagged_verdict
from ..analyse.searches import SEARCH_KEY
from ..store.analysis_columns import SERIES_KEY
from ..store.run_columns import CONFIG_COLUMNS, SCALING_KEY_COLUMNS
from ..store.selection import is_missing

# Headers whose cells are figures: right-aligned in every table.
NUMERIC_HEADERS = {
    "batch",
    "devices",
    "runners",
    "efficiency",
    "samples/s on 1",
    "ratio",
    "runs",
    "blocks",
    "windows",
    "median ms",
    "run spread",
    "ms/sample",
    "samples/s",
    "J/sample",
    "mean W",
    "× fastest",
    "noise floor",
    "straggler spread",
}
DISPLAY_COLUMNS = {
    "model": "model",
    "model_options": "options",
    "mode": "mode",
    "batch_size": "batch",
    "input_shape": "input",
    "precision": "precision",
    "device": "device",
    "world_size": "devices",
    "nodes": "runners",
    "profile": "profile",
    "serving": "serving",
    "runner": "runner",
    "framework_version": "version",
    "runs": "runs",
    "median_step_ms": "median ms",
    "run_spread": "run spread",
    "ms_per_sample": "ms/sample",
    "throughput_samples_per_s": "samples/s",
    "energy_per_sample_j": "J/sample",
    "mean_power_w": "mean W",
    "ratio_to_fastest": "× fastest",
    "noise_floor": "noise floor",
    "straggler_spread": "straggler spread",
    "verdict": "verdict",
}
# The headers that name a row's entity: its configuration and runner.
KEY_HEADERS = tuple(DISPLAY_COLUMNS[c] for c in (*CONFIG_COLUMNS, "runner"))
PERCENT_COLUMNS = ("run_spread", "noise_floor", "straggler_spread", "scaling_efficiency")


def cell(value, column: str = "") -> str:
    if is_missing(value):
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
    if "serving" in shown and not shown["serving"].fillna("").astype(str).ne("").any():
        shown = shown.drop(columns="serving")  # no run under a scenario: back-to-back batches need no column
    for column in shown:
        shown[column] = [cell(v, column) for v in shown[column]]
    if "blocks" in rows and (rows["blocks"].fillna(0) > 0).any():
        # Made in process blocks, a row's units are its blocks, each of windows: never called runs.
        at = shown.columns.get_loc("runs")
        shown.insert(at, "blocks", [cell(int(b)) if b > 0 else "–" for b in rows["blocks"].fillna(0)])
        if (rows["blocks"].fillna(0) > 0).all():
            shown = shown.rename(columns={"runs": "windows"})
    if "verdict" in shown and "flagged" in rows:
        shown["verdict"] = [
            flagged_verdict(v, f, c)
            for v, f, c in zip(shown["verdict"], rows["flagged"], rows.get("parity", [""] * len(rows)))
        ]
    return shown.rename(columns=DISPLAY_COLUMNS)


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (no tabulate needed)."""

    def escape(text) -> str:
        return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

    header = "| " + " | ".join(escape(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(escape(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"


SCALING_DISPLAY = {
    **{c: DISPLAY_COLUMNS[c] for c in SCALING_KEY_COLUMNS},
    "runner": "runner",
    "world_size": "devices",
    "nodes": "runners",
    "runs": "runs",
    "throughput_samples_per_s": "samples/s",
    "baseline_throughput_samples_per_s": "samples/s on 1",
    "scaling_efficiency": "efficiency",
    "straggler_spread": "straggler spread",
    "efficiency_note": "note",
}
# The studies' head-to-head tables: (key, title, first strategy, second strategy).
STRATEGY_TABLES = (
    ("dp-vs-ddp", "DataParallel vs DistributedDataParallel", "dp", "ddp"),
    ("ddp-vs-mirrored", "DistributedDataParallel vs MirroredStrategy", "ddp", "mirrored"),
)


def scaling_display(scaling: pd.DataFrame) -> pd.DataFrame:
    shown = scaling[list(SCALING_DISPLAY)].copy()
    for column in shown:
        shown[column] = [cell(v, column) for v in shown[column]]
    return shown.rename(columns=SCALING_DISPLAY)


def pairs_display(pairs: pd.DataFrame, first: str, second: str) -> pd.DataFrame:
    shown = pd.DataFrame(
        {
            **{DISPLAY_COLUMNS[c]: pairs[c].astype(str) for c in CONFIG_COLUMNS},
            first: pairs["runner_a"],
            f"{first} samples/s": [cell(v) for v in pairs["throughput_a"]],
            second: pairs["runner_b"],
            f"{second} samples/s": [cell(v) for v in pairs["throughput_b"]],
            "ratio": [cell(v, "ratio_to_fastest") for v in pairs["ratio_b_to_a"]],
        }
    )
    return shown


def figure(value, digits: int = 3) -> str:
    return "–" if value is None or pd.isna(value) else f"{value:.{digits}g}"


def optimal_display(optimal: pd.DataFrame) -> pd.DataFrame:
    """The optimal-batch table as shown: the optimum only where the runs resolve it, else what is missing."""
    budget = optimal["latency_budget_ms"].notna().any() if len(optimal) else False
    rows = []
    for r in optimal.itertuples(index=False):
        resolved = str(r.optimal_status).startswith("best")
        batch = f"{r.best_batch}" + (f" (≈ {r.within_noise})" if r.within_noise else "") if resolved else "–"
        interval = f" [{figure(r.best_throughput_low)}, {figure(r.best_throughput_high)}]" if resolved else ""
        row = {
            **{DISPLAY_COLUMNS[c]: str(getattr(r, c)) for c in SERIES_KEY},
            "batches": r.batches,
            "runs/batch": str(r.runs_per_batch),
            "optimal batch": batch,
            "samples/s": figure(r.best_throughput_samples_per_s, 4) + interval if resolved else "–",
            "status": r.optimal_status,
            "fit": r.fit_note or "–",
        }
        if budget:
            under = "–" if pd.isna(r.budget_batch) else f"{int(r.budget_batch)} ({figure(r.budget_step_ms)} ms)"
            row.update({f"≤ {r.latency_budget_ms:g} ms": under, "budget note": r.budget_note or "–"})
        rows.append(row)
    return pd.DataFrame(rows)


def trend_display(trends: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                **{DISPLAY_COLUMNS[c]: str(getattr(r, c)) for c in SERIES_KEY},
                "batches": r.batches,
                "runs": str(r.runs),
                "trend": r.trend,
                "Spearman ρ": figure(r.spearman_rho, 2),
                "p": figure(r.spearman_p, 2),
                "× per doubling": figure(r.ratio_per_doubling),
                "flattens past": "–" if pd.isna(r.flattens_at_batch) else str(int(r.flattens_at_batch)),
                "note": r.flatten_note if isinstance(r.flatten_note, str) and r.flatten_note else "–",
            }
            for r in trends.itertuples(index=False)
        ]
    )


def search_display(searches: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                **{DISPLAY_COLUMNS[c]: str(getattr(r, c)) for c in SEARCH_KEY},
                "runner": r.runner,
                "candidate": r.candidate,
                "runs": str(r.runs),
                "median ms": figure(r.median_step_ms, 4),
                "chosen": "✓" if r.chosen else "",
            }
            for r in searches.itertuples(index=False)
        ]
    )


def efficiency_display(efficiency: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                **{DISPLAY_COLUMNS[c]: str(getattr(r, c)) for c in (*CONFIG_COLUMNS, "runner")},
                "GFLOP/sample": figure(r.forward_flops / 1e9, 4),
                "achieved TFLOP/s": figure(r.achieved_flops_per_s / 1e12),
                "device name": r.device_name or "–",
                "peak TFLOP/s": figure(r.peak_flops_per_s / 1e12),
                "MFU": "–" if pd.isna(r.mfu) else f"{r.mfu:.1%}",
                "note": r.efficiency_note or "–",
            }
            for r in efficiency.itertuples(index=False)
        ]
    )


def native_display(rows: pd.DataFrame) -> pd.DataFrame:
    """Each Keras runner's row judged against the framework it runs on used natively (analyse.judging): both
    medians, the ratio with its interval (above 1: the Keras runner slower) and the verdict."""
    judged = rows[rows["native_runner"].fillna("") != ""]
    medians = rows.set_index([*CONFIG_COLUMNS, "group", "runner"])["median_step_ms"]
    return pd.DataFrame(
        [
            {
                **{DISPLAY_COLUMNS[c]: cell(getattr(r, c)) for c in (*CONFIG_COLUMNS, "runner")},
                "median ms": cell(r.median_step_ms),
                "native runner": r.native_runner,
                "its median ms": cell(
                    medians.get((*(getattr(r, c) for c in CONFIG_COLUMNS), r.group, r.native_runner))
                ),
                "ratio": f"{r.native_ratio:.2f} [{r.native_ratio_ci_low:.2f}, {r.native_ratio_ci_high:.2f}]",
                "verdict": r.native_verdict,
            }
            for r in judged.itertuples(index=False)
        ]
    )


def verdict_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (and block of alike runs): its fastest runner and every other runner's verdict
    against it, then each Keras runner's against the framework it runs on, used natively."""
    table = []
    for (*config, _), frame in rows.groupby([*CONFIG_COLUMNS, "group"], sort=False):
        fastest = frame[frame["verdict"].isin(["fastest", "only runner"])]["runner"].tolist()
        others = [
            f"{r.runner}: {flagged_verdict(r.verdict, r.flagged, getattr(r, 'parity', ''))}"
            for r in frame.itertuples(index=False)
            if r.runner not in fastest
        ]
        others += [
            f"{r.runner} against {r.native_runner} used natively: {r.native_verdict}"
            for r in frame.itertuples(index=False)
            if not is_missing(getattr(r, "native_verdict", "")) and getattr(r, "native_verdict", "")
        ]
        table.append(
            {
                **dict(zip(CONFIG_COLUMNS, config)),
                "fastest": ", ".join(fastest) or "–",
                "verdicts": "; ".join(others) or "–",
            }
        )
    return pd.DataFrame(table).rename(columns=DISPLAY_COLUMNS)
