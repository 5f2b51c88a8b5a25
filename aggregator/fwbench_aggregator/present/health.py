"""A store's health on the terminal: what `fwbench store check` finds, and the damaged files a report left out."""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape

from ..store.bundle import Added, Written
from ..store.health import Damage, StoreHealth
from .console import err_console, out_console


def _damage_lines(damaged: Sequence[Damage]) -> str:
    # Paths and reasons come from the file system and pyarrow: printed as text, never read as console markup.
    return "".join(f"\n  {escape(str(d.path))}: {escape(d.reason)}" for d in damaged)


def print_left_out(damaged: Sequence[Damage]) -> None:
    if damaged:
        err_console.print(
            f"[yellow]left out of the report, as they cannot be read ({len(damaged)} file(s); a sweep "
            f"--resume runs a damaged run again):[/]{_damage_lines(damaged)}",
            highlight=False,
        )


def print_store_check(health: StoreHealth) -> None:
    out_console.print(
        f"store {escape(str(health.store))}: format {health.format}, {health.runs} runs readable "
        f"({health.entries} readable entries in all: runs, noise floors, max-batch searches, FLOP "
        "counts)",
        highlight=False,
    )
    if health.partials:
        out_console.print(
            f"half-written: {health.partials} (writers at work or killed mid-write: never read, and "
            "the next sweep removes those of ended writers)",
            highlight=False,
        )
    out_console.print(f"writer: {escape(health.writer)}" if health.writer else "writer: none", highlight=False)
    if health.catalog_rebuilt:
        out_console.print("catalog: made again from the runs", highlight=False)
    if health.damaged:
        out_console.print(
            f"[bold red]damaged: {len(health.damaged)} file(s)[/], their entries left out of every "
            "read (a sweep --resume runs a damaged run again, keeping its files in "
            f"{escape(str(health.store / 'damaged'))}):{_damage_lines(health.damaged)}",
            highlight=False,
        )
    else:
        out_console.print("damaged: none", highlight=False)


def print_bundle_written(written: Written) -> None:
    out_console.print(
        f"bundled {written.runs} entries into {escape(str(written.path))} ({written.size_bytes / 1e6:.1f} MB)",
        highlight=False,
    )


def print_bundle_added(added: Added, store) -> None:
    out_console.print(
        f"added {len(added.added)} entries to {escape(str(store))}; {len(added.identical)} already there, "
        f"identical, skipped; {len(added.kept_apart)} kept apart under a new id; {len(added.refused)} "
        "refused",
        highlight=False,
    )
    if added.kept_apart:
        err_console.print(
            "[yellow]kept apart, the store holding other files under their ids (both kept):[/]"
            + "".join(f"\n  {escape(key)} -> {escape(new)}" for key, new in added.kept_apart.items()),
            highlight=False,
        )
    if added.refused:
        err_console.print(
            "[red]refused, their files unchecked or not matching their manifests:[/]"
            + "".join(f"\n  {escape(key)}: {escape(why)}" for key, why in added.refused.items()),
            highlight=False,
        )
