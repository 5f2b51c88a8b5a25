"""Where a command's wall time went, one line: its phases in the order they ran, and the whole."""

from __future__ import annotations

from ..base.stopwatch import Stopwatch
from .console import err_console


def time_spent_line(stopwatch: Stopwatch) -> str:
    """ "time: runners started 9.8 s, checks 0.4 s, 4 blocks 29.1 s, ... (41.0 s in all)"; "" where nothing was timed."""
    if not stopwatch.laps_s:
        return ""
    laps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in stopwatch.laps_s.items())
    return f"time: {laps} ({stopwatch.total_s:.1f} s in all)"


def print_time_spent(stopwatch: Stopwatch) -> None:
    line = time_spent_line(stopwatch)
    if line:
        err_console.print(line, markup=False, highlight=False)
