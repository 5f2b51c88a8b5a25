"""fwbench versions up / down: a study's version matrix as runner containers (docs/versions.md); and what `sweep` and
`report` do for versions: the version runners' addresses, the confirmation round, the version report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..app.report import selection_of
from ..app.study import StudyRequest
from ..app.versions import (
    confirm_regressions,
    container_runners,
    override_path,
    version_report,
    versions_down,
    versions_up,
    with_tags,
)
from ..plan.versions import VersionMatrix, load_versions
from ..present.console import err_console, out_console
from ..present.versions import print_version_report
from ..run.compose_versions import COMPOSE_ENV
from ..run.launch import REPO_ROOT
from . import app
from .common import report_failures, run
from .path_option_types import parse_store

versions_app = typer.Typer(
    no_args_is_help=True,
    help="Several versions of a framework side by side, one runner "
    "container per image tag of a sweep file's versions field.",
)
app.add_typer(versions_app, name="versions")

StudyArgument = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="a sweep file with a versions field")]
StoreOption = Annotated[
    Path,
    typer.Option(callback=parse_store, help="the study's results store: the Compose override is written beside it"),
]
ComposeFileOption = Annotated[
    Path,
    typer.Option(
        help=f"the stack's compose.yaml (its folder holds .env); the Compose "
        f"command is ${COMPOSE_ENV}, default `docker compose`"
    ),
]
ConfirmOption = Annotated[
    bool,
    typer.Option(
        "--confirm/--no-confirm",
        help="with a versions field: run each regression again, both versions interleaved, and "
        "call it confirmed only where that round agrees",
    ),
]


@versions_app.command("up")
def up_command(
    study: StudyArgument,
    store: StoreOption = Path("results/store"),
    compose_file: ComposeFileOption = REPO_ROOT / "compose.yaml",
    cpu: Annotated[bool, typer.Option(help="reserve no GPU (hosts without the NVIDIA runtime)")] = False,
) -> None:
    """Write the Compose override (one runner per tag), build and start every version, print their --runner values.

    A tag that does not build, or a runner that does not come up, is named (exit 1); the other versions come up.
    """
    result = run(lambda progress: versions_up(study, store, compose_file, cpu, progress))
    err_console.print(f"Compose override: {escape(str(result.override))}", highlight=False)
    for value in result.runners:
        out_console.print(f"--runner {value}", highlight=False, soft_wrap=True)
    report_failures(result.failures)


@versions_app.command("down")
def down_command(
    study: StudyArgument,
    store: StoreOption = Path("results/store"),
    compose_file: ComposeFileOption = REPO_ROOT / "compose.yaml",
) -> None:
    """Stop and remove every version's runner container of the study."""
    removed = run(lambda progress: versions_down(study, store, compose_file, progress))
    err_console.print(f"removed {escape(', '.join(removed))} ({escape(str(override_path(store)))})", highlight=False)


def sweep_matrix(file: Path | None) -> VersionMatrix:
    """A sweep file's version matrix (none without a file); read once the file has been checked whole."""
    return load_versions(file) if file is not None else VersionMatrix()


def version_runners(matrix: VersionMatrix, runner: list[str]) -> list[str]:
    """The --runner values a sweep uses: those given, else the version containers' published ports."""
    return runner or container_runners(matrix)


def after_version_study(request: StudyRequest, matrix: VersionMatrix, confirm: bool, failures: list) -> list:
    """The confirmation round (unless --no-confirm) and the version report, printed; every failure, tags named."""
    if confirm:
        failures = failures + run(lambda progress: confirm_regressions(request, progress))
    report = run(lambda progress: version_report(request.store, required=False))
    if report is None:
        err_console.print("no version report: the store holds no configuration that two versions ran", highlight=False)
    else:
        print_version_report(report.changes, report.path)
    return with_tags(failures, matrix)


def print_store_versions(store: Path, out: Path | None, compare: str | None = None, where: Sequence[str] = ()) -> None:
    """fwbench report --versions, over the runs --compare and --where choose."""
    report = run(lambda progress: version_report(store, out, selection=selection_of(compare, where)))
    print_version_report(report.changes, report.path)
