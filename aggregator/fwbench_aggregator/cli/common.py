"""What every command shares: signals end a command as Ctrl-C does, a use case's mistake is a usage error (exit
2), a runner's failure is named and makes the exit status 1."""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from typing import TypeVar

import typer
from rich.markup import escape
from typer.core import TyperGroup

from ..app.errors import UsageError
from ..base.env_flags import EnvFlagError
from ..base.write_paths import WritePathError
from ..plan.field_checks import SweepError
from ..present.console import err_console
from ..run.client import RunnerFailure
from ..store.migrations import StoreFormatError
from .progress import TerminalProgress

T = TypeVar("T")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt, so that both end a command the same way: the runs
    in flight cancelled, finished runs kept, runners stopped."""


def _terminate(signum, frame) -> None:
    raise Terminated()


def interrupted_status(interrupt: KeyboardInterrupt) -> int:
    """The shell's exit status for a command ended by a signal, 128 + its number: Ctrl-C 130, SIGTERM 143."""
    return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)


class Commands(TyperGroup):
    """Every command ends on SIGTERM as on Ctrl-C, with the signal's exit status."""

    def invoke(self, ctx):
        signal.signal(signal.SIGTERM, _terminate)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as interrupt:
            status = interrupted_status(interrupt)
            err_console.print(
                f"[bold yellow]interrupted by {signal.Signals(status - 128).name}[/]: runs in flight "
                "cancelled, finished runs kept, runners stopped"
            )
            raise typer.Exit(status) from None


def usage_error(message: str, hint: str = "") -> typer.Exit:
    """A mistake found before anything ran: said plainly, naming the option or field to change where one is known,
    exit status 2 (as the command line's own checks)."""
    where = f"invalid value for {hint}: " if hint else ""
    err_console.print(f"[bold red]Error:[/] {escape(where + message)}", highlight=False)
    return typer.Exit(2)


def run(use_case: Callable[[TerminalProgress], T]) -> T:
    """Call a use case with the terminal's progress; its UsageError or SweepError, a path it will not write (a store
    among them), or a store from a newer fwbench, becomes a usage error, and a runner's failure it did not catch
    a named failure (exit 1)."""
    try:
        with TerminalProgress() as progress:
            return use_case(progress)
    except UsageError as error:
        raise usage_error(str(error), error.hint) from None
    except (SweepError, EnvFlagError) as error:
        raise usage_error(str(error)) from None
    except WritePathError as error:  # a path fwbench will not write, a store's among them
        raise usage_error(str(error), error.option) from None
    except StoreFormatError as error:
        raise usage_error(str(error), "--store") from None
    except RunnerFailure as failure:
        # One a use case did not catch (a plug-in that fails the checks before any run): named, exit 1, never a
        # traceback.
        report_failures([failure])


def report_failures(failures: Sequence[RunnerFailure]) -> None:
    """Name every runner that failed (once per distinct failure) and exit 1 if any did."""
    seen = set()
    for failure in failures:
        if (failure.runner, failure.code, failure.message) in seen:
            continue
        seen.add((failure.runner, failure.code, failure.message))
        # The message may repeat what the user typed: printed as text, never read as console markup.
        err_console.print(
            f"[bold red]runner {escape(failure.runner)} failed[/]: {failure.code}: {escape(failure.message)}",
            highlight=False,
        )
    if failures:
        raise typer.Exit(1)
