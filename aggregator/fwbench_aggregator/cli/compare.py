"""fwbench compare and fwbench calibrate: one configuration on every runner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..analyse import stats
from ..analyse.sequential import DEFAULT_MAX_RUNS
from ..app.best import DEFAULT_SEARCH_REPETITIONS
from ..app.calibrate import FloorTarget
from ..app.calibrate import calibrate as calibrate_use_case
from ..app.compare import CompareRequest
from ..app.compare import compare as compare_use_case
from ..app.factors import DEFAULT_FACTORS, FACTORS
from ..app.factors import factors as factors_use_case
from ..plan import spec as plan
from ..plan.design import Design
from ..present import terminal
from ..present.generation import print_generation
from ..present.serving import print_serving
from ..present.time_spent import print_time_spent
from ..store.location import store_path_problem
from . import app
from .common import report_failures, run, usage_error
from .groups import with_groups
from .option_parsing import checked_names
from .path_option_types import StoreOption, parse_out, parse_store
from .quiet import WaitForQuietOption
from .repetition_option_types import CooldownOption, MinEffectOption, RepetitionsOption, SearchRepetitionsOption
from .run_option_types import BatchSizeOption, DistributedTimeoutOption, ModeOption, RendezvousPortOption
from .runner_option_types import AllowDifferentModelsOption
from .runner_options import CalibrationRunnerOptions, RunnerOptions
from .setting_options import Evidence, Execution, Power, Profile, Rounds, ServingLoad, Startup
from .workload_options import Generation, Measurement, ModelOnDevice, Seeds


@app.command()
@with_groups
def compare(
    workload: ModelOnDevice = ModelOnDevice(),
    mode: ModeOption = "train",
    batch_size: BatchSizeOption = 32,
    profile: Profile = Profile(),
    execution: Execution = Execution(),
    startup: Startup = Startup(),
    measurement: Measurement = Measurement(),
    power: Power = Power(),
    seeds: Seeds = Seeds(),
    generation: Generation = Generation(),
    serving: ServingLoad = ServingLoad(),
    rounds: Rounds = Rounds(),
    evidence: Evidence = Evidence(),
    search_repetitions: SearchRepetitionsOption = DEFAULT_SEARCH_REPETITIONS,
    wait_for_quiet: WaitForQuietOption = 0.0,
    cooldown_s: CooldownOption = 0.0,
    min_effect: MinEffectOption = stats.MIN_EFFECT,
    runners: RunnerOptions = RunnerOptions(),
    rendezvous_port: RendezvousPortOption = None,
    distributed_timeout_s: DistributedTimeoutOption = None,
    allow_different_models: AllowDifferentModelsOption = False,
    out: Annotated[
        Path, typer.Option(callback=parse_out, help="folder to write results into; each comparison gets a subfolder")
    ] = Path("results"),
    store: Annotated[
        Path | None,
        typer.Option(
            callback=parse_store,
            help="the results store: every run is kept, and noise floors are read from it (default: OUT/store)",
        ),
    ] = None,
) -> None:
    """Run one model at one batch size and shape on every runner, and compare them.

    With --devices, or a runner given several addresses (one job across machines), each runner runs data-parallel.
    Every runner is asked first whether it can run the request; a mistake stops the comparison before anything
    runs.
    """
    if workload.device and execution.devices:
        raise usage_error("give one device with --device or several with --devices, not both")
    spec = workload.spec(
        mode,
        batch_size,
        **seeds.settings(),
        **generation.settings(mode),
        startup=startup.settings(),
        distributed_timeout_s=distributed_timeout_s,
        **profile.settings(),
        **execution.settings(),
        **measurement.settings(),
        **power.settings(),
        **serving.settings(mode),
    )
    problem = store is None and store_path_problem(out / "store")  # the default store, checked as --store is
    if problem:
        raise usage_error(problem, "--out")
    spread = "blocks measure single-device runs: a --strategy spreads a run over several" if execution.strategy else ""
    design = evidence.choice(spec, cooldown_s, tuple(runners.runner), whole_runs=spread or measurement.whole_runs())
    request = CompareRequest(
        spec=spec,
        runners=runners.choice(),
        compilation=tuple(execution.compilation),
        strategy=tuple(execution.strategy),
        repetitions=rounds.repetitions_plan(),
        design=design,
        cooldown_s=cooldown_s,
        min_effect=min_effect,
        rendezvous_port=rendezvous_port,
        out=out,
        store=store,
        allow_different_models=allow_different_models,
        search_repetitions=search_repetitions,
        wait_for_quiet_s=wait_for_quiet,
        latency_budget_ms=serving.latency_budget_ms,
    )
    result = run(lambda progress: compare_use_case(request, progress))
    if result.best:
        terminal.print_best_search(result.best)
    terminal.print_compare(result.rows, result.run_dir, result.store, result.scaling, result.results, result.report)
    terminal.print_rounds(result.rows, result.stopped)
    if not result.serving.empty:
        print_serving(result.serving)
    if not result.generation.empty:
        print_generation(result.generation)
    print_time_spent(result.time_spent)
    report_failures(result.failures)


@app.command()
@with_groups
def calibrate(
    workload: ModelOnDevice = ModelOnDevice(),
    mode: ModeOption = "train",
    batch_size: BatchSizeOption = 32,
    profile: Profile = Profile(),
    measurement: Measurement = Measurement(),
    repetitions: RepetitionsOption = plan.DEFAULT_REPETITIONS,
    floor_precision_pct: Annotated[
        float | None,
        typer.Option(
            min=1.0,
            max=1000.0,
            metavar="P",
            help="instead of --repetitions: add runs, a round at a time, until the floor's own 99% interval is within "
            "P% of the floor, up to --max-repetitions",
        ),
    ] = None,
    max_repetitions: Annotated[
        int,
        typer.Option(
            min=stats.MIN_REPETITIONS,
            max=plan.MAX_REPETITIONS,
            help="under --floor-precision-pct: the most runs per instance",
        ),
    ] = DEFAULT_MAX_RUNS,
    search_repetitions: SearchRepetitionsOption = DEFAULT_SEARCH_REPETITIONS,
    wait_for_quiet: WaitForQuietOption = 0.0,
    evidence: Evidence = Evidence(),
    runners: CalibrationRunnerOptions = CalibrationRunnerOptions(),
    store: StoreOption = Path("results/store"),
) -> None:
    """Measure the noise floor: each runner against a second instance of itself (A/A), for one configuration.

    The floor is the smallest difference this host resolves there; it is stored, and `compare` and `report` call no
    difference below it.
    """
    spec = workload.spec(mode, batch_size, **profile.settings(), **measurement.settings())
    choice = runners.choice()
    precise = "--floor-precision-pct adds whole runs a round at a time" if floor_precision_pct is not None else ""
    if precise and evidence.design == Design.blocks.value:
        raise usage_error(
            f"{precise}; under --design blocks give --repetitions, the blocks to run", "--floor-precision-pct"
        )
    design = evidence.choice(spec, whole_runs=precise or measurement.whole_runs())
    target = FloorTarget(floor_precision_pct / 100, max_repetitions) if floor_precision_pct is not None else None
    result = run(
        lambda progress: calibrate_use_case(
            spec, choice, repetitions, store, progress, search_repetitions, wait_for_quiet, target, design
        )
    )
    terminal.print_calibrations(result.calibrations, workload.label(mode, batch_size), store)
    report_failures(result.failures)


def _parse_factors(value: str) -> str:
    return checked_names(value, list(FACTORS), "factor")


@app.command()
@with_groups
def factors(
    workload: ModelOnDevice = ModelOnDevice(),
    mode: ModeOption = "train",
    batch_size: BatchSizeOption = 32,
    vary: Annotated[
        str,
        typer.Option(
            "--factors",
            callback=_parse_factors,
            help=f"the settings to change one at a time, comma-separated, of: {', '.join(FACTORS)}",
        ),
    ] = ",".join(DEFAULT_FACTORS),
    measurement: Measurement = Measurement(),
    repetitions: RepetitionsOption = plan.DEFAULT_REPETITIONS,
    runners: RunnerOptions = RunnerOptions(),
    out: Annotated[
        Path, typer.Option(callback=parse_out, help="folder to write the runs and the factor table into")
    ] = Path("results"),
) -> None:
    """What each setting does to each runner: one configuration under the equal profile, then each other value of
    each factor the runner accepts, one setting changed at a time, each compared with that runner's own baseline
    over runs. A value a runner refuses is named with its reason."""
    spec = workload.spec(mode, batch_size, **measurement.settings())
    choice = runners.choice()
    result = run(lambda progress: factors_use_case(spec, choice, tuple(vary.split(",")), repetitions, out, progress))
    terminal.print_factors(result.effects, workload.label(mode, batch_size), result.run_dir)
    report_failures(result.failures)
