"""The terminal: one console for results (stdout), one for progress and errors (stderr), and one table
renderer that fits every table to the console's width, so that no figure is ever cut to '4.…'. Every cell and header
is plain text, never rich markup: a label such as "torch [device H100]" prints with its brackets.

A table is a list of entities (a runner, a model, a configuration), one row of cells each. It is printed
in the first layout whose natural width fits: a row per entity; else a column per entity (few
entities, many fields, as `compare` prints in 80 columns); else each entity as a block of field/value
rows, which fits any width.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from rich.text import Text

out_console = Console()
err_console = Console(stderr=True)

# Wide enough to measure a table's natural width: nothing is squeezed.
_UNBOUNDED_WIDTH = 10_000


@dataclass(frozen=True)
class Column:
    header: str
    numeric: bool = False  # right-aligned
    key: bool = False  # names the entity: heads its column in the column-per-entity layout
    wrap_at: int | None = None  # prose that may wrap at this many characters; other cells never wrap


def natural_width(console: Console, view: Table) -> int:
    return console.measure(view, options=console.options.update(max_width=_UNBOUNDED_WIDTH)).maximum


def _row_per_entity(columns, rows, styles, groups) -> Table:
    view = Table()
    for column in columns:
        # Prose wraps at its width, and a word longer than that folds: never cut to an ellipsis.
        view.add_column(
            Text(column.header),
            justify="right" if column.numeric else "left",
            no_wrap=column.wrap_at is None,
            max_width=column.wrap_at,
            overflow="fold",
        )
    for i, row in enumerate(rows):
        last_of_group = groups is not None and (i + 1 == len(rows) or groups[i + 1] != groups[i])
        view.add_row(*(Text(str(c)) for c in row), style=styles[i], end_section=last_of_group)
    return view


def _column_per_entity(columns, rows, styles, groups) -> Table:
    view = Table()
    view.add_column("", no_wrap=True)
    keys = [i for i, column in enumerate(columns) if column.key]
    for row, style in zip(rows, styles):
        view.add_column(Text("\n".join(row[i] for i in keys)), justify="right", no_wrap=True, style=style)
    for i, column in enumerate(columns):
        if not column.key:
            view.add_row(Text(column.header.replace("\n", " ")), *(Text(str(row[i])) for row in rows))
    return view


def _stacked(columns, rows, styles, groups) -> Table:
    view = Table(show_header=False)
    view.add_column("field", no_wrap=True, style="bold")
    # A value longer than the line folds onto the next: wrapped, never cut.
    view.add_column("value", overflow="fold")
    for row, style in zip(rows, styles):
        for i, (column, cell) in enumerate(zip(columns, row)):
            view.add_row(
                Text(column.header.replace("\n", " ")), Text(str(cell)), style=style, end_section=i + 1 == len(columns)
            )
    return view


def print_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    title: str = "",
    console: Console | None = None,
    styles: Sequence[str | None] | None = None,
    groups: Sequence[Hashable] | None = None,
) -> None:
    """Print one row of `cells` per entity in the first layout that fits the console's width, under its title
    (left-aligned lines, which wrap at the console's width rather than the table's). `styles`: a rich style per
    entity (None: plain); `groups`: a key per entity, the row-per-entity layout drawing a rule where it changes
    (every configuration of a report its own section)."""
    console = console or out_console
    styles = list(styles or [None] * len(rows))
    layouts = (_row_per_entity, _column_per_entity, _stacked)
    for layout in layouts:
        view = layout(columns, rows, styles, groups)
        if layout is layouts[-1] or natural_width(console, view) <= console.width:
            break
    if title:
        console.print(Text(title, style="bold"))
    console.print(view)
