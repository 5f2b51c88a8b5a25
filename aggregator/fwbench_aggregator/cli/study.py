"""fwbench sweep and fwbench report: a whole study into a results store, and the report over any store."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer

from ..app.report import report as report_use_case
from ..app.report import selection_of
from ..app.runners import names_of
from ..app.study import StudyRequest, StudyResult
from ..app.study import study as study_use_case
from ..app.sweep_rounds import budget_text
from ..base.frameworks import names as framework_names
from ..base.vocabulary import Mode
from ..plan import spec as plan
from ..plan.command_line_sweep import sweep_from_options
from ..plan.settings import BY_NAME, non_default
from ..plan.study import DEFAULT_MAX_REPETITIONS, MIN_MAX_REPETITIONS, Sweep
from ..plan.study_file import load_sweep
from ..present import terminal
from ..present.health import print_left_out
from ..present.report import print_report
from ..run.runners import runners_in_use
from . import app
from .common import interrupted_status, report_failures, run, usage_error
from .groups import with_groups
from .path_option_types import CompareSelectionOption, WhereOption, parse_store
from .quiet import WaitForQuietOption
from .repetition_option_types import AUTO, SweepRepetitionsOption
from .runner_option_types import AllowDifferentModelsOption, every_framework
from .runner_options import RunnerAccess
from .serving_option_types import LatencyBudgetOption
from .versions import ConfirmOption, after_version_study, print_store_versions, sweep_matrix, version_runners
from .workload_options import Generation, Measurement, Seeds


@dataclass(frozen=True)
class SweepGrid:
    """A sweep given by options rather than a file: its models and axes (each comma-separated), how many runs each
    point gets, and whether a runner's batch sizes share a build. --time-budget-s applies to a file's sweep too."""

    models: Annotated[str | None, typer.Option(help="comma-separated models")] = None
    modes: Annotated[str | None, typer.Option(help="comma-separated: train, infer, generate")] = None
    batch_sizes: Annotated[str | None, typer.Option(help="comma-separated, e.g. 1,2,4,8")] = None
    shapes: Annotated[str | None, typer.Option(help="comma-separated shapes, e.g. 3x32x32,3x64x64")] = None
    precisions: Annotated[str | None, typer.Option(help="comma-separated precisions")] = None
    profiles: Annotated[
        str | None,
        typer.Option(help="comma-separated settings profiles: equal (default), native; docs/usage.md#profiles"),
    ] = None
    strategies: Annotated[
        str | None,
        typer.Option(
            help="comma-separated strategies, each for every runner (a sweep file can give them per runner, and lists of "
            "devices)"
        ),
    ] = None
    repetitions: SweepRepetitionsOption = None
    max_repetitions: Annotated[
        int | None,
        typer.Option(
            min=MIN_MAX_REPETITIONS,
            max=plan.MAX_REPETITIONS,
            help=f"under --repetitions auto: the most runs per runner and point (default {DEFAULT_MAX_REPETITIONS})",
        ),
    ] = None
    time_budget_s: Annotated[
        float | None,
        typer.Option(
            max=plan.MAX_TIME_BUDGET_S,
            help="under repetitions auto: the sweep's seconds, spread over its points (each gets an "
            "equal share of what is left); also over a sweep file's time_budget_s",
        ),
    ] = None
    reuse_builds: Annotated[
        bool | None,
        typer.Option(
            "--reuse-builds/--no-reuse-builds",
            help="a runner's batch sizes of one repetition share one build, each run restarted from the seed (default: on)",
        ),
    ] = None

    def study(self, settings: dict, runners: list[str] | None, accepted: list[str]) -> Sweep:
        """The sweep these options describe, with the run settings of the measurement and seed groups."""
        count = int(self.repetitions) if self.repetitions not in (None, AUTO) else self.repetitions
        assert self.models is not None  # the caller asks only where --models is given
        return run(
            lambda progress: sweep_from_options(
                self.models,
                runners=runners,
                batch_sizes=self.batch_sizes,
                shapes=self.shapes,
                modes=self.modes,
                precisions=self.precisions,
                strategies=self.strategies,
                repetitions=count,
                max_repetitions=self.max_repetitions,
                time_budget_s=self.time_budget_s,
                reuse_builds=self.reuse_builds,
                runner_names=accepted,
                profiles=self.profiles,
                **settings,
            )
        )


def _study_from_file(file: Path, settings: dict, time_budget_s: float | None, accepted: list[str]) -> Sweep:
    """The sweep file's study; its runs take their settings from the file alone, so a run setting given on the
    command line as well is a usage error, as is a time budget for a file that fixes its repetitions."""
    option = next(iter(non_default(settings)), None)
    if option:
        raise usage_error(
            f"{BY_NAME[option].flag} applies to a sweep given by options (--models); write {option}: in {file} instead"
        )
    study = run(lambda progress: load_sweep(file, accepted))
    if time_budget_s is None:
        return study
    if not time_budget_s > 0:
        raise usage_error(f"--time-budget-s {time_budget_s:g}: accepted: a number of seconds above 0")
    if not study.auto:
        raise usage_error(
            f"--time-budget-s applies under repetitions: auto only, and {file} fixes "
            f"repetitions: {study.repetitions}; set repetitions: auto there, or leave the option out"
        )
    return replace(study, time_budget_s=time_budget_s)


def _check_reachable(study: Sweep, runners: RunnerAccess) -> None:
    """A usage error where a runner of the study has no address, or a point spans machines outside Slurm."""
    reachable = names_of(runners_in_use(runners.runner, ",".join(study.runners)))
    unreachable = [name for name in study.runners if runners.runner and name not in reachable]
    if unreachable:
        raise usage_error(
            f"the sweep's runner(s) {', '.join(unreachable)} have no address; give each as "
            f"--runner NAME=HOST:PORT, or list only {', '.join(reachable)} in its runners"
        )
    spanning = sorted({c.nodes for c in study.configurations() if c.nodes > 1})
    if spanning:
        raise usage_error(
            f"nodes: {spanning} spreads a run over several machines: run the study on a Slurm allocation with "
            "`fwbench slurm`, or give a runner its machines as --runner NAME=HOST:PORT,HOST:PORT (every run of it "
            "then spans them) and leave nodes out"
        )


def _print_study_result(result: StudyResult, store: Path) -> None:
    """What a finished sweep prints: its report's tables, the files it left out, the points left unresolved and those
    that ran out of memory."""
    if result.report is not None:
        print_report(result.report.analysis, result.report.path)
        print_left_out(result.report.left_out)
    terminal.print_unresolved(
        [f"{p.label}: {budget_text(p)}" + "".join(f"; {v}" for v in p.verdicts) for p in result.unresolved], store
    )
    terminal.print_out_of_memory(result.out_of_memory)


@app.command()
@with_groups
def sweep(
    file: Annotated[Path | None, typer.Argument(help="a sweep file (YAML); or use the options below")] = None,
    grid: SweepGrid = SweepGrid(),
    measurement: Measurement = Measurement(),
    seeds: Seeds = Seeds(),
    generation: Generation = Generation(),
    store: Annotated[
        Path, typer.Option(callback=parse_store, help="the results store (append-only; every completed run is kept)")
    ] = Path("results/store"),
    resume: Annotated[bool, typer.Option(help="skip configurations already in the store")] = False,
    report: Annotated[bool, typer.Option(help="write the HTML report from the store when the sweep ends")] = True,
    latency_budget_ms: LatencyBudgetOption = None,
    runners: RunnerAccess = RunnerAccess(),
    allow_different_models: AllowDifferentModelsOption = False,
    wait_for_quiet: WaitForQuietOption = 0.0,
    confirm: ConfirmOption = True,
) -> None:
    """Run a whole study, one run at a time per device, each stored the moment it completes.

    Ctrl-C or SIGTERM keeps every finished run; --resume runs what the store lacks.
    """
    # A sweep without a file compares the runners given, as `compare` would (an opt-in one only where named).
    given = names_of(runners_in_use(runners.runner, every_framework()))
    accepted = names_of(runners.runner) if runners.runner else framework_names()
    generates = "generate" in (grid.modes or "").split(",")
    settings = {
        **measurement.settings(),
        **seeds.settings(),
        **generation.settings(Mode.generate if generates else None),
    }
    if file is not None:
        study = _study_from_file(file, settings, grid.time_budget_s, accepted)
    elif grid.models:
        study = grid.study(settings, given or None, accepted)
    else:
        raise usage_error("give a sweep file or at least --models")
    matrix = sweep_matrix(file)  # a version study reaches its containers' published ports unless told otherwise
    runners = replace(runners, runner=version_runners(matrix, runners.runner))
    _check_reachable(study, runners)
    request = StudyRequest(
        sweep=study,
        runners=runners.choice(),
        store=store,
        resume=resume,
        report=report,
        latency_budget_ms=latency_budget_ms,
        allow_different_models=allow_different_models,
        wait_for_quiet_s=wait_for_quiet,
    )
    result = run(lambda progress: study_use_case(request, progress))
    if result.interrupted is not None:
        terminal.print_interrupted(result.stored, result.stored_now, result.store_runs, store)
        raise typer.Exit(interrupted_status(result.interrupted))
    _print_study_result(result, store)
    if matrix.versions:
        result.failures = after_version_study(request, matrix, confirm, result.failures)
    report_failures(result.failures)


@app.command("report")
def report_command(
    store: Annotated[Path, typer.Option(callback=parse_store, help="the results store a sweep wrote")] = Path(
        "results/store"
    ),
    out: Annotated[
        Path | None, typer.Option(help="folder for report.html, tables and plots (default: STORE/report)")
    ] = None,
    latency_budget_ms: LatencyBudgetOption = None,
    versions: Annotated[
        bool,
        typer.Option(
            "--versions",
            help="the version report instead: each framework version against the previous one, per "
            "configuration (versions.html; docs/versions.md)",
        ),
    ] = False,
    compare: CompareSelectionOption = None,
    where: WhereOption = None,
) -> None:
    """Tables, plots, verdicts and the manifest from the store alone: no runner is needed."""
    if versions:
        print_store_versions(store, out, compare, where or [])
        return
    result = run(
        lambda progress: report_use_case(
            store, out, latency_budget_ms, selection_of(compare, where or []), progress=progress
        )
    )
    print_report(result.analysis, result.path)
    print_left_out(result.left_out)
