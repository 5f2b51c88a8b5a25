"""fwbench store check: whether every file of a results store reads, and which do not; fwbench store bundle and
store add: a store's runs carried to another machine's store as one file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..app.bundle import add_to_store, bundle_store
from ..app.report import selection_of
from ..app.store_check import check_store
from ..present.health import print_bundle_added, print_bundle_written, print_store_check
from . import app
from .common import run
from .path_option_types import CompareSelectionOption, WhereOption, parse_store

DAMAGED_STATUS = 1

store_app = typer.Typer(no_args_is_help=True, help="Look after a results store: fwbench store check, bundle, add.")
app.add_typer(store_app, name="store")


@store_app.command("check")
def check_command(
    store: Annotated[Path, typer.Option(callback=parse_store, help="the results store")] = Path("results/store"),
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="make the store's catalog again from its runs, every file read whole")
    ] = False,
) -> None:
    """The store's format, its readable runs, who is writing it, and each damaged file with why.

    Reads every file of the store whole and changes no run (its catalog is brought up to date, or with --rebuild made
    again from the runs). Exit status 1 where a file is damaged.
    """
    health = run(lambda progress: check_store(store, rebuild, progress))
    print_store_check(health)
    if health.damaged:
        raise typer.Exit(DAMAGED_STATUS)


@store_app.command("bundle")
def bundle_command(
    out: Annotated[Path, typer.Argument(help="the bundle to write, one file (e.g. gpu-runs.fwbench.tar.gz)")],
    store: Annotated[Path, typer.Option(callback=parse_store, help="the results store")] = Path("results/store"),
    compare: CompareSelectionOption = None,
    where: WhereOption = None,
) -> None:
    """Every readable run of the store (with its noise floors, searches and FLOP counts), or the runs chosen, as one
    file that `fwbench store add` adds to another store. Damaged runs are never carried."""
    written = run(lambda progress: bundle_store(store, out, selection_of(compare, where or [])))
    print_bundle_written(written)


@store_app.command("add")
def add_command(
    bundle: Annotated[Path, typer.Argument(help="a bundle written by `fwbench store bundle`")],
    store: Annotated[Path, typer.Option(callback=parse_store, help="the results store to add to")] = Path(
        "results/store"
    ),
) -> None:
    """Add a bundle's runs to the store: each checked against its manifest's checksums first. A run whose id the store
    holds with the same files is skipped; with other files, it is kept apart under a new id, named. A run without
    checksums, or whose files do not match them, is refused, named. Exit status 1 where one was refused."""
    added = run(lambda progress: add_to_store(store, bundle, progress))
    print_bundle_added(added, store)
    if added.refused:
        raise typer.Exit(DAMAGED_STATUS)
