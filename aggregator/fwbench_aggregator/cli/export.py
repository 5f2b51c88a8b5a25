"""fwbench export mlflow: a store's comparisons into an MLflow tracking store (app.mlflow_export)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..app.mlflow_export import EXPERIMENT, export_mlflow
from ..app.report import selection_of
from ..present.console import out_console
from . import app
from .common import run
from .path_option_types import CompareSelectionOption, WhereOption, parse_store

export_app = typer.Typer(no_args_is_help=True, help="Take a store's results elsewhere: fwbench export mlflow.")
app.add_typer(export_app, name="export")


@export_app.command("mlflow")
def mlflow_command(
    tracking_uri: Annotated[
        str,
        typer.Option(
            help="where to write: a folder (an MLflow store is made in it: mlflow.db and artifacts/) or a tracking URI "
            "(http://host:5000, sqlite:///path/mlflow.db)"
        ),
    ],
    store: Annotated[Path, typer.Option(callback=parse_store, help="the results store")] = Path("results/store"),
    experiment: Annotated[str, typer.Option(help="the MLflow experiment, made where it does not exist")] = EXPERIMENT,
    compare: CompareSelectionOption = None,
    where: WhereOption = None,
) -> None:
    """Each comparison of the store (a configuration and its runners) as an MLflow run: the configuration and each
    runner's settings as parameters; medians, ratios, intervals and energy as metrics; verdicts as tags; its table as
    an artifact. They nest under one run holding this export's report. A comparison exported before is skipped, so
    exporting again adds only what is new. Needs MLflow: pip install 'fwbench-aggregator[mlflow]'."""
    exported = run(lambda progress: export_mlflow(store, tracking_uri, experiment, selection_of(compare, where or [])))
    skipped = f"; {exported.skipped} exported before, skipped" if exported.skipped else ""
    out_console.print(
        f"{exported.added} comparison(s) added to experiment {escape(exported.experiment)} at "
        f"{escape(exported.tracking_uri)}{skipped}",
        highlight=False,
    )
    if exported.parent_run_id:
        out_console.print(
            f"this export's report: run {exported.parent_run_id}, artifacts under report/", highlight=False
        )
