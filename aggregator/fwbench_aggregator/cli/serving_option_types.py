"""The options of a serving load and its latency budget (docs/serving.md), each declared once as an option type."""

from __future__ import annotations

from typing import Annotated

import typer

from ..base.vocabulary import (
    Scenario,
)
from ..plan import spec as plan
from ..plan.serving_fields import TARGET_QPS_RANGE, target_qps_ok
from .option_parsing import choices_metavar, parse_choice

LatencyBudgetOption = Annotated[
    float | None,
    typer.Option(
        min=0.001,
        max=3_600_000.0,
        help="a serving latency budget in ms, the longest a query may take: under a scenario, whether each runner's p99 "
        "stays under it (serve-capacity: the highest load whose chosen percentile does); for back-to-back batches, the "
        "largest batch whose step time does (at 99% confidence over runs)",
    ),
]
ScenarioOption = Annotated[
    str | None,
    typer.Option(
        callback=parse_choice(Scenario, "scenario"),
        metavar=choices_metavar(Scenario),
        help="serve inference queries or generation requests under a load (MLPerf LoadGen's scenarios; "
        "docs/serving.md): single_stream (one query "
        "after another), server (Poisson arrivals at --target-qps), offline (every query at once); default: back-to-back "
        "batches",
    ),
]


def parse_target_qps(value: float | None) -> float | None:
    if value is not None and not target_qps_ok(value):
        raise typer.BadParameter(f"{value!r} is not accepted; accepted: {TARGET_QPS_RANGE} (queries per second)")
    return value


TargetQpsOption = Annotated[
    float | None,
    typer.Option(
        callback=parse_target_qps,
        help="--scenario server: the mean arrival rate, queries per second (Poisson, seeded: "
        "every runner sees the same arrivals)",
    ),
]
QueriesOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=plan.MAX_QUERIES,
        help="measured queries per run under a scenario; default: the runner's (single_stream "
        "and server: at least 300 and at least --min-measure-s; offline: 8 batches). p99 needs 299 queries",
    ),
]
BatchTimeoutOption = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        max=plan.MAX_BATCH_TIMEOUT_MS,
        help="--scenario server with --batch-size above 1: the longest the oldest "
        "query waits for a batch to fill (dynamic batching, the same rule on every runner)",
    ),
]
