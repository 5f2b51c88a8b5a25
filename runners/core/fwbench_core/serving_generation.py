"""Serving with generation (Mode.GENERATE under a scenario). A query is one prompt (single_stream's a batch of them),
and the scenario's batch of waiting queries runs one whole generation request: its prefill, then new_tokens - 1
decode steps, the device waited for after each token. Per query, as its user sees it:

- first token latency (its time to first token as its user sees it): from its arrival (or issue) until its batch's
  prefill put its first token on the host, the wait for the batch included (the generation summary's time to first
  token is the prefill alone, from the request's start);
- time per output token: its decode time (first token to last) over its new_tokens - 1 decode steps, MLPerf's TPOT.

Each is one value per query, so the evidence rule over queries (serving.latency_percentiles) decides which
percentiles a run reports, as it does for latency (arrival to the last token). The tokens served count real prompts
only, padding excluded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .serving import PERCENTILES, ServingSummary, latency_percentiles

FIRST_TOKEN_LATENCY_PERCENTILES = {
    name.replace("latency_s", "first_token_latency_s"): quantile for name, quantile in PERCENTILES.items()
}
TIME_PER_OUTPUT_TOKEN_PERCENTILES = {
    name.replace("latency_s", "time_per_output_token_s"): quantile for name, quantile in PERCENTILES.items()
}


def time_per_output_token_s(
    latency_s: Sequence[float], first_token_latency_s: Sequence[float], new_tokens: int
) -> list[float]:
    """Each query's decode time per token: the tokens after its first came from new_tokens - 1 decode steps."""
    return [(last - first) / (new_tokens - 1) for last, first in zip(latency_s, first_token_latency_s, strict=True)]


def with_generation(
    summary: ServingSummary,
    latency_s: Sequence[float],
    first_token_latency_s: Sequence[float],
    new_tokens: int,
) -> ServingSummary:
    """The scenario's summary with its generation figures: the percentiles of first token latency and of time per
    output token that the query count supports (the others' reasons beside latency's), and the tokens served per
    second."""
    first, first_reasons = latency_percentiles(summary.scenario, first_token_latency_s, FIRST_TOKEN_LATENCY_PERCENTILES)
    per_token, per_token_reasons = latency_percentiles(
        summary.scenario,
        time_per_output_token_s(latency_s, first_token_latency_s, new_tokens),
        TIME_PER_OUTPUT_TOKEN_PERCENTILES,
    )
    figures: dict[str, Any] = {
        **first,
        **per_token,
        "reasons": {**summary.reasons, **first_reasons, **per_token_reasons},
        "generated_tokens_per_s": summary.sample_count * new_tokens / summary.duration_s,
    }
    return replace(summary, **figures)
