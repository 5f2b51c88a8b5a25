"""The options of the paths a command writes, --store and --out, each refused before anything is written where
fwbench can write nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..base.write_paths import write_path_problem
from ..store.location import store_path_problem


def parse_store(value: Path | None) -> Path | None:
    """A results store's path, refused before anything is written where no store can be there (store.location)."""
    problem = value is not None and store_path_problem(value)
    if problem:
        raise typer.BadParameter(problem)
    return value


def parse_out(value: Path | None) -> Path | None:
    """A folder --out names, refused before anything is written where fwbench writes no folder (base.write_paths)."""
    problem = value is not None and write_path_problem(value, "folder")
    if problem:
        raise typer.BadParameter(problem)
    return value


StoreOption = Annotated[
    Path,
    typer.Option(callback=parse_store, help="the results store: every run is kept, and noise floors are read from it"),
]

# Which stored runs a command reads (store.selection): one compare's, and those whose summary holds each value.
CompareSelectionOption = Annotated[
    str | None,
    typer.Option(
        "--compare",
        help="only this compare's runs: the name of its results folder (e.g. 20261127T173700Z-resnet18-infer-b2)",
    ),
]
WhereOption = Annotated[
    list[str] | None,
    typer.Option(
        "--where",
        help="only the runs whose summary has this value, COLUMN=VALUE, e.g. framework_version=2.15.0 (repeat it: "
        "every one must hold)",
    ),
]
