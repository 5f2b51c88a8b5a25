"""What serving prints: a comparison's percentiles per runner with each verdict (analyse.serving's rows), and
serve-capacity's searches with every probe."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from rich.markup import escape

from ..analyse import stats
from ..store.run_columns import CONFIG_COLUMNS
from .console import Column, err_console, out_console, print_table
from .display import cell
from .html import png_data_uri
from .html_table import table_html
from .plot_kit import PlotResult
from .terminal import VERDICT_WIDTH
from .titles import configuration_title


def figure_text(row) -> str:
    """A row's figure as read: "12.34 ms" for a percentile, "1234.5 samples/s" offline, "–" where unsupported."""
    if row.figure == "throughput":
        return "–" if pd.isna(row.throughput_samples_per_s) else f"{row.throughput_samples_per_s:.1f} samples/s"
    return "–" if pd.isna(row.latency_ms) else f"{row.latency_ms:.2f} ms"


def tokens_text(value: float) -> str:
    return "–" if pd.isna(value) else f"{value:.1f}"


def _generates(rows: pd.DataFrame) -> bool:
    return bool(rows["generated_tokens_per_s"].notna().any())


def serving_table(rows: pd.DataFrame) -> tuple[list[Column], list[tuple]]:
    """One configuration under a scenario: a row per figure and runner (its value over runs, the ratio to the best
    runner, the verdict), under mode generate the tokens served per second, and with a budget whether the p99 meets
    it."""
    budget = rows["budget_status"].fillna("").ne("").any()
    generates = _generates(rows)
    columns = [
        Column("figure", key=True),
        Column("runner", key=True),
        Column("runs", numeric=True),
        Column("achieved qps", numeric=True),
        *([Column("tokens/s", numeric=True)] if generates else []),
        Column("value\n(of runs)", numeric=True),
        Column("× best", numeric=True),
        Column("verdict", wrap_at=VERDICT_WIDTH),
        *([Column(f"≤ {rows['latency_budget_ms'].dropna().iloc[0]:g} ms", wrap_at=20)] if budget else []),
    ]
    table = [
        (
            r.figure,
            r.runner,
            str(r.runs),
            cell(r.achieved_qps),
            *((tokens_text(r.generated_tokens_per_s),) if generates else ()),
            figure_text(r),
            cell(r.ratio_to_best, "ratio_to_fastest"),
            r.verdict,
            *((r.budget_status or "–",) if budget else ()),
        )
        for r in rows.itertuples()
    ]
    return columns, table


def print_serving(rows: pd.DataFrame, console=None) -> None:
    """Every configuration under a scenario: its table, titled with the configuration and its load."""
    console = console or out_console
    for _, own in rows.groupby(list(CONFIG_COLUMNS), sort=False):
        first = own.iloc[0]
        columns, table = serving_table(own)
        print_table(columns, table, f"serving: {first['serving']} · {configuration_title(first)}", console)


def print_capacities(searches: Sequence, percentile: str, budget_ms: float, resolution: float, store: Path) -> None:
    """Each runner's capacity (app.serve_capacity.CapacitySearch) and every probe it ran."""
    columns = [
        Column("runner", key=True),
        Column("capacity qps", numeric=True),
        Column(f"probes (qps: achieved, {percentile})", wrap_at=60),
    ]
    table = []
    for s in searches:
        capacity = "none" if s.capacity_qps is None else f"≥ {s.capacity_qps:g}" if s.capped else f"{s.capacity_qps:g}"
        probes = "; ".join(
            f"{p.target_qps:g}: {', '.join(f'{a:.1f}' for a in p.achieved_qps)}, "
            f"{', '.join('unsupported' if v is None else f'{v * 1e3:.3g} ms' for v in p.latency_s)}"
            f"{'' if p.meets else ' ✗'}"
            for p in s.probes
        )
        table.append((s.runner, capacity, probes))
    print_table(
        columns,
        table,
        f"serve-capacity: the highest offered load whose {percentile} stays under {budget_ms:g} ms "
        f"(within {resolution:.0%} below the edge)",
    )
    for s in searches:
        for p in s.probes:
            if p.note and "not supported" in p.note:
                out_console.print(f"{escape(s.runner)} at {p.target_qps:g} qps: {escape(p.note)}", highlight=False)
    err_console.print(
        f"every probe is stored in {escape(str(store))}; `fwbench report --store {escape(str(store))}` "
        "plots latency against offered load",
        highlight=False,
    )


def serving_display(rows: pd.DataFrame) -> pd.DataFrame:
    """The serving rows as every table shows them: the configuration's title and load, then the figures."""
    budget = rows["budget_status"].fillna("").ne("").any()
    return pd.DataFrame(
        {
            "configuration": [configuration_title(r) for _, r in rows.iterrows()],
            "serving": rows["serving"],
            "figure": rows["figure"],
            "runner": rows["runner"],
            "runs": rows["runs"].astype(str),
            "achieved qps": [cell(v) for v in rows["achieved_qps"]],
            **({"tokens/s": [tokens_text(v) for v in rows["generated_tokens_per_s"]]} if _generates(rows) else {}),
            "value (of runs)": [figure_text(r) for r in rows.itertuples()],
            "× best": [cell(v, "ratio_to_fastest") for v in rows["ratio_to_best"]],
            "verdict": rows["verdict"],
            **(
                {
                    "p99 within budget": [
                        f"{s} (≤ {b:g} ms)" if s else "–"
                        for s, b in zip(rows["budget_status"], rows["latency_budget_ms"])
                    ]
                }
                if budget
                else {}
            ),
        }
    )


def capacity_display(capacities: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "runner": capacities["runner"],
            "model": capacities["model"],
            "batch": capacities["batch_size"].astype(str),
            "device": capacities["device"],
            "budget": [f"{p} ≤ {b:g} ms" for p, b in zip(capacities["percentile"], capacities["latency_budget_ms"])],
            "capacity qps": [cell(v) for v in capacities["capacity_qps"]],
            "note": capacities["capacity_note"],
            "probes": capacities["probes"],
        }
    )


def serving_section_html(rows: pd.DataFrame, capacities: pd.DataFrame, plot: PlotResult) -> str:
    """The report's "Serving" section: how to read it, the comparison of percentiles, serve-capacity's searches and
    latency against offered load; empty where no run had a scenario."""
    if rows.empty and capacities.empty:
        return ""
    e = html.escape
    parts = [
        "<h2>Serving</h2>",
        "<p>Runs under a scenario (docs/serving.md): each run's p50, p90 and p99 query latency is one value, as a "
        "run's median step time is; a runner's figure is the geometric mean of its runs' values, and the best "
        "runner is compared with each other one by the same test as step times (Welch's t-test on the log run "
        f"values, {stats.CONFIDENCE:.0%} interval, at least {stats.MIN_REPETITIONS} runs a side). A percentile a "
        "run's queries could not support (p90 needs 29 queries, p99 299) is not compared: the row says why. "
        "Offline runs compare throughput. Under mode generate a query is a prompt, its latency runs to its last "
        "token, TTFT+queue is its time to first token from its arrival (the wait for its batch included, unlike the "
        "Generation section's prefill-only time to first token), TPOT its decode time per output token, and tokens/s "
        "the tokens served per second (padding excluded).</p>",
    ]
    if not rows.empty:
        parts.append(table_html(serving_display(rows), lift=True))
    if not capacities.empty:
        parts.append(
            "<h3>Capacity under a latency budget (fwbench serve-capacity)</h3><p>The highest offered load "
            "whose percentile stayed under the budget in every run of its probe, found by doubling then "
            "bisection; a percentile a probe's queries could not support counts as missing the budget.</p>"
        )
        parts.append(table_html(capacity_display(capacities), lift=True))
    if plot.path is not None:
        parts.append(f'<h3>{e(plot.title)}</h3><img src="{png_data_uri(plot.path)}" alt="{e(plot.title)}">')
    return "\n".join(parts)
