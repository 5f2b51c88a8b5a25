"""A command's phases as the stopwatch laps them, and the line that says where its time went."""

from __future__ import annotations

from itertools import accumulate

from fwbench_aggregator.base.stopwatch import Stopwatch
from fwbench_aggregator.present.time_spent import time_spent_line


def clock_of(*steps_s: float):
    """A clock that reads 0, then each running total of `steps_s`, one per read."""
    readings = iter([0.0, *accumulate(steps_s)])
    return lambda: next(readings)


def test_each_lap_holds_the_seconds_since_the_previous_and_a_name_lapped_again_adds_in_its_first_place():
    stopwatch = Stopwatch(clock_of(9.75, 0.25, 30.0, 1.5, 0.5))
    for name in ("runners started", "checks", "4 blocks", "analysis and report", "runners stopped"):
        stopwatch.lap(name)
    assert stopwatch.laps_s == {
        "runners started": 9.75,
        "checks": 0.25,
        "4 blocks": 30.0,
        "analysis and report": 1.5,
        "runners stopped": 0.5,
    }
    stopwatch = Stopwatch(clock_of(1.0, 2.0, 4.0))
    for name in ("analysis and report", "runners stopped", "analysis and report"):
        stopwatch.lap(name)
    assert list(stopwatch.laps_s.items()) == [("analysis and report", 5.0), ("runners stopped", 2.0)]
    assert stopwatch.total_s == 7.0


def test_the_line_names_every_phase_in_order_and_the_whole():
    stopwatch = Stopwatch(clock_of(9.75, 30.0))
    stopwatch.lap("runners started")
    stopwatch.lap("4 blocks")
    assert time_spent_line(stopwatch) == "time: runners started 9.8 s, 4 blocks 30.0 s (39.8 s in all)"
    assert time_spent_line(Stopwatch(clock_of())) == ""
