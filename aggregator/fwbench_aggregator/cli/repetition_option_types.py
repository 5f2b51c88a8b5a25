"""The options of how many runs a verdict takes and how the evidence is made (repetitions, the sequential design's
budget, blocks or rounds, the smallest effect), each declared once as an option type."""

from __future__ import annotations

from typing import Annotated

import typer

from ..analyse import stats
from ..analyse.sequential import DEFAULT_MAX_BLOCKS, DEFAULT_MAX_RUNS
from ..plan import spec as plan
from ..plan.design import MAX_BLOCK_WINDOWS, Design
from .option_parsing import choices_metavar, parse_choice

RepetitionsOption = Annotated[
    int,
    typer.Option(
        min=1,
        max=plan.MAX_REPETITIONS,
        help=f"runs per runner, in counterbalanced order A B B A ...; a verdict needs {stats.MIN_REPETITIONS}",
    ),
]
AUTO = "auto"


def _auto_or_count(value: str | None) -> str | None:
    """'auto', or a whole number of runs within the limits."""
    if value is None or value == AUTO:
        return value
    if not value.isdigit() or not 1 <= int(value) <= plan.MAX_REPETITIONS:
        raise typer.BadParameter(
            f"{value!r}: accepted values: auto, or a number of runs from 1 to {plan.MAX_REPETITIONS}"
        )
    return value


AutoRepetitionsOption = Annotated[
    str,
    typer.Option(
        callback=_auto_or_count,
        metavar="auto|N",
        help="runs per runner, in counterbalanced rounds A B, B A, ... (or blocks, where the design is blocks): auto "
        "looks after each round (blocks: at half of --max-repetitions and at its end) and stops once the verdict is "
        "settled (a difference called, or equivalence within --min-effect), within --max-repetitions and "
        f"--time-budget-s; N runs exactly N (a verdict needs {stats.MIN_REPETITIONS})",
    ),
]
SweepRepetitionsOption = Annotated[
    str | None,
    typer.Option(
        callback=_auto_or_count,
        metavar="auto|N",
        help="runs per runner and point, in counterbalanced rounds: auto (default) looks after each round of a point and "
        "stops it once its verdict is settled, within --max-repetitions and --time-budget-s; N runs exactly N",
    ),
]
DesignOption = Annotated[
    str,
    typer.Option(
        callback=parse_choice(Design, "design"),
        metavar=choices_metavar(Design),
        help="how the evidence is made: blocks, each runner in a fresh worker process per block measuring short windows "
        "in turn on one warm build, judged block by block; rounds, whole runs one after another (each its own "
        "build); auto, blocks where the runs can be windows on the CPU and rounds elsewhere, saying which and why "
        "(docs/verdict.md)",
    ),
]
BlockWindowsOption = Annotated[
    int, typer.Option(min=1, max=MAX_BLOCK_WINDOWS, help="under --design blocks: windows per runner in each block")
]
WindowOption = Annotated[
    float,
    typer.Option(
        min=0.01, max=plan.MAX_MEASURE_S, help="under --design blocks: each window measures at least this many seconds"
    ),
]
MaxRepetitionsOption = Annotated[
    int | None,
    typer.Option(
        min=stats.MIN_REPETITIONS,
        max=plan.MAX_REPETITIONS,
        help=f"under --repetitions auto: the most runs per runner [default: {DEFAULT_MAX_RUNS} in rounds, "
        f"{DEFAULT_MAX_BLOCKS} blocks]",
    ),
]
TimeBudgetOption = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        max=plan.MAX_TIME_BUDGET_S,
        help="under --repetitions auto: stop starting rounds after this many seconds of the configuration's runs",
    ),
]
SearchRepetitionsOption = Annotated[
    int,
    typer.Option(
        min=1,
        max=plan.MAX_REPETITIONS,
        help="under --profile best: runs of each candidate setting in each runner's search (the same for every runner)",
    ),
]
CooldownOption = Annotated[float, typer.Option(min=0.0, max=plan.MAX_COOLDOWN_S, help="seconds to wait between runs")]
MinEffectOption = Annotated[
    float, typer.Option(min=0.0, max=1.0, help="smallest difference a verdict calls real, as a fraction")
]
