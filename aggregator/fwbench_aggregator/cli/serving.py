"""`fwbench serve-capacity`: each runner's highest load within a latency budget (the load options' rules, shared
with `compare --scenario`, are cli.setting_options')."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..app.serve_capacity import DEFAULT_RESOLUTION, MAX_RESOLUTION, MIN_RESOLUTION, CapacityRequest
from ..app.serve_capacity import serve_capacity as serve_capacity_use_case
from ..base.vocabulary import Mode, Scenario
from ..plan import spec as plan
from ..present import serving as present
from ..store.run_columns import SERVING_PERCENTILES
from . import app
from .common import report_failures, run, usage_error
from .groups import with_groups
from .path_option_types import StoreOption
from .run_option_types import BatchSizeOption, MinMeasureOption, WarmupOption
from .runner_options import RunnerOptions
from .serving_option_types import BatchTimeoutOption, LatencyBudgetOption, QueriesOption, parse_target_qps
from .setting_options import Startup, checked_load
from .workload_options import ModelOnDevice, Seeds

PercentileOption = Annotated[
    str, typer.Option(help=f"the latency percentile the budget bounds, one of {', '.join(SERVING_PERCENTILES)}")
]
RateOption = Annotated[
    float,
    typer.Option(
        callback=parse_target_qps,
        help="the first load to try, queries per second; the search doubles it until one misses",
    ),
]
ResolutionOption = Annotated[
    float,
    typer.Option(
        min=MIN_RESOLUTION,
        max=MAX_RESOLUTION,
        help="stop bisecting when the highest load that met the budget and the lowest that missed it are this close, "
        "as a fraction",
    ),
]


@app.command("serve-capacity")
@with_groups
def serve_capacity(
    latency_budget_ms: LatencyBudgetOption = None,
    workload: ModelOnDevice = ModelOnDevice(),
    batch_size: BatchSizeOption = 1,
    percentile: PercentileOption = "p99",
    start_qps: RateOption = 10.0,
    max_qps: Annotated[
        float,
        typer.Option(
            callback=parse_target_qps,
            help="the highest load to try: a runner that meets the budget there has at least this capacity",
        ),
    ] = 10_000.0,
    repetitions: Annotated[
        int,
        typer.Option(
            min=1, max=plan.MAX_REPETITIONS, help="runs per probe: a load meets the budget only where every run does"
        ),
    ] = 1,
    resolution: ResolutionOption = DEFAULT_RESOLUTION,
    queries: QueriesOption = None,
    batch_timeout_ms: BatchTimeoutOption = None,
    warmup: WarmupOption = 10,
    min_measure_s: MinMeasureOption = 0.0,
    seeds: Seeds = Seeds(),
    startup: Startup = Startup(),
    runners: RunnerOptions = RunnerOptions(),
    store: StoreOption = Path("results/store"),
) -> None:
    """Each runner's capacity under the server scenario: the highest offered load (queries per second) whose latency
    percentile stays under --latency-budget-ms, by a geometric bracket from --start-qps then bisection to
    --resolution, each probe a real run, stored.

    A percentile the probe's queries cannot support counts as not meeting the budget, and the probe says why.
    """
    if latency_budget_ms is None:
        raise usage_error("missing; give the latency budget in ms, e.g. --latency-budget-ms 20", "--latency-budget-ms")
    if percentile not in SERVING_PERCENTILES:
        raise usage_error(
            f"{percentile!r} is not a percentile; accepted values: {', '.join(SERVING_PERCENTILES)}", "--percentile"
        )
    if start_qps >= max_qps:
        raise usage_error(f"--start-qps ({start_qps:g}) must be below --max-qps ({max_qps:g})", "--start-qps")
    load = checked_load(Mode.infer, Scenario.server, start_qps, queries, batch_timeout_ms)
    spec = workload.spec(
        Mode.infer,
        batch_size,
        warmup=warmup,
        **seeds.settings(),
        startup=startup.settings(),
        min_measure_s=min_measure_s,
        power_rate_hz=0.0,
        idle_baseline_s=0.0,
        scenario=load.scenario,
        target_qps=start_qps,
        query_count=load.query_count,
        batch_timeout_ms=batch_timeout_ms,
    )
    choice = runners.choice()
    request = CapacityRequest(
        spec=spec,
        runners=choice,
        latency_budget_ms=latency_budget_ms,
        percentile=percentile,
        start_qps=start_qps,
        max_qps=max_qps,
        resolution=resolution,
        store=store,
        repetitions=repetitions,
    )
    result = run(lambda progress: serve_capacity_use_case(request, progress))
    present.print_capacities(result.searches, percentile, latency_budget_ms, resolution, store)
    report_failures(result.failures)
