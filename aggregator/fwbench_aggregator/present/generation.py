"""What a generation comparison prints (analyse.generation's rows): per configuration, each runner's time to first
token and decode time per token with their verdicts, the decode throughput and per-token percentiles, and whether it
generated the fastest runner's tokens."""

from __future__ import annotations

import math

import pandas as pd

from ..store.run_columns import CONFIG_COLUMNS
from .console import Column, out_console, print_table
from .display import cell
from .html_table import table_html
from .terminal import VERDICT_WIDTH
from .titles import configuration_title


def _ms(value: float) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f} ms"


def _per_s(value: float) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.1f} tok/s"


def generation_table(rows: pd.DataFrame) -> tuple[list[Column], list[tuple]]:
    """One configuration in mode generate: a row per figure and runner."""
    columns = [
        Column("figure", key=True),
        Column("runner", key=True),
        Column("runs", numeric=True),
        Column("median\n(of runs)", numeric=True),
        Column("decode", numeric=True),
        Column("p90 / p99\nper token", numeric=True),
        Column("× fastest", numeric=True),
        Column("verdict", wrap_at=VERDICT_WIDTH),
        Column("same\ntokens"),
    ]
    table = [
        (
            r.figure,
            r.runner,
            str(r.runs),
            _ms(r.value_ms),
            _per_s(r.decode_tokens_per_s),
            ""
            if math.isnan(r.p90_token_latency_ms)
            else f"{_ms(r.p90_token_latency_ms)} / {_ms(r.p99_token_latency_ms)}",
            cell(r.ratio_to_fastest, "ratio_to_fastest"),
            r.verdict,
            r.same_tokens or "–",
        )
        for r in rows.itertuples()
    ]
    return columns, table


def print_generation(rows: pd.DataFrame, console=None) -> None:
    """Every configuration in mode generate: its table, titled with the configuration and the tokens generated."""
    console = console or out_console
    for _, own in rows.groupby(list(CONFIG_COLUMNS), sort=False, dropna=False):
        first = own.iloc[0]
        columns, table = generation_table(own)
        tokens = f"{first['new_tokens']:.0f} new tokens" if not pd.isna(first["new_tokens"]) else "new tokens unknown"
        print_table(columns, table, f"generation: {tokens} · {configuration_title(first)}{_served(first)}", console)


def _served(row: pd.Series) -> str:
    """Under a serving scenario, what this table's time to first token leaves out (docs/serving.md)."""
    if not isinstance(row["serving"], str) or not row["serving"]:
        return ""
    return " · time to first token: the prefill alone, the queue excluded (serving's TTFT+queue includes it)"


def generation_display(rows: pd.DataFrame) -> pd.DataFrame:
    """The generation rows as the report's table shows them: the configuration's title, then the figures."""
    columns, table = generation_table(rows)
    frame = pd.DataFrame(table, columns=[c.header.replace("\n", " ") for c in columns])
    frame.insert(0, "configuration", [configuration_title(r) for _, r in rows.iterrows()])
    frame.insert(1, "new tokens", [f"{n:.0f}" if not pd.isna(n) else "–" for n in rows["new_tokens"]])
    return frame


def generation_section_html(rows: pd.DataFrame) -> str:
    """The report's "Generation" section: how to read it and the table; empty where no run generated."""
    if rows.empty:
        return ""
    return (
        "<h2>Generation</h2><p>Runs in mode generate (docs/generation.md): each request prefills its prompts, then "
        "decodes the new tokens one at a time from a key-value cache, greedily. Time to first token is the prefill; "
        "decode, per token, is a decode step (a token for every prompt of the batch). Each is judged as step times "
        "are, over the same runs or blocks; decode tokens per second is the batch over the per-token time. Same "
        "tokens says, between runners of one framework, whether the runner generated exactly the fastest runner's "
        "tokens; between frameworks it is empty, as each starts from its own random weights (fwbench parity "
        "compares tokens from shared weights). Under a serving scenario the time to first token here is still the "
        "prefill alone; the Serving section's TTFT+queue counts from each query's arrival.</p>"
        + table_html(generation_display(rows), lift=True)
    )
