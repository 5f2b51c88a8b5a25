"""fwbench store check: whether every file of a results store reads, and which do not."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..app.store_check import check_store
from ..present.health import print_store_check
from . import app
from .common import run
from .options import parse_store

DAMAGED_STATUS = 1

store_app = typer.Typer(no_args_is_help=True, help="Look after a results store: fwbench store check.")
app.add_typer(store_app, name="store")


@store_app.command("check")
def check_command(
    store: Annotated[Path, typer.Option(callback=parse_store, help="the results store")] = Path("results/store"),
) -> None:
    """The store's format, its readable runs, who is writing it, and each damaged file with why.

    Reads every file of the store whole and changes nothing. Exit status 1 where a file is damaged.
    """
    health = run(lambda progress: check_store(store))
    print_store_check(health)
    if health.damaged:
        raise typer.Exit(DAMAGED_STATUS)
