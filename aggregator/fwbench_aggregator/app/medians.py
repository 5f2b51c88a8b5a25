"""Each runner's per-run median step times from the results of one configuration: what every comparison of runs
(compare, calibrate, factors, the best profile's search) compares."""

from __future__ import annotations

from collections.abc import Sequence

from ..analyse.run_values import normalised, run_values
from ..run.client import RunResult
from ..store import records


def medians_by_runner(results: Sequence[RunResult]) -> dict[str, list[float]]:
    """Each runner's per-run median step times, in repetition order, from the results of one configuration."""
    summary = records.summary_frame("a-a", list(results), [])
    runs = run_values(summary, records.steps_frame("a-a", list(results)))
    # Rows are labelled with the strategy ("a ddp"); the caller knows its runners by name.
    names = dict(normalised(summary)[["runner", "runner_name"]].itertuples(index=False))
    return {names[label]: group.tolist() for label, group in runs.groupby("runner")["median_step_time_s"]}
