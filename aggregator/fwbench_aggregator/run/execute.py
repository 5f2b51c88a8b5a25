"""One configuration on every runner: repetition after repetition, in counterbalanced order, each run handed to
the caller the moment it completes."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..base.progress import Progress
from ..plan.study import counterbalanced
from . import jobs, replies, wire
from .client import RunnerFailure, RunResult
from .connection import Transport
from .gate import Gate


def run_all(
    endpoints: dict[str, str],
    requests: dict[str, wire.Request],
    transport: Transport,
    repetitions: int = 1,
    cooldown_s: float = 0.0,
    on_result: Callable[[RunResult], None] = lambda result: None,
    rendezvous_port: int | None = None,
    progress: Progress = Progress(),
    first_repetition: int = 0,
    gate: Gate | None = None,
) -> tuple[list[RunResult], list[RunnerFailure]]:
    """Run the request on each runner, one after the other (they may share a device), repetition after
    repetition in counterbalanced order (A B, B A, ...) so that drift favours neither. A runner that fails
    is named once and left out of later repetitions. `on_result` gets each run the moment it completes. A
    runner given several addresses runs each request as one job across them (jobs.py). Repetitions are
    numbered from `first_repetition` (a later round of the same comparison). Each run passes `gate` first (its
    device's lock, and a quiet host where asked; default: the lock alone), outside the cool-down; what it waited is
    in gate.passages before `on_result` gets the run."""
    gate = gate or Gate()
    results, failures = [], []
    failed: set[str] = set()
    overall = progress.add_task("runs", total=repetitions * len(endpoints))
    order = counterbalanced(list(endpoints), first_repetition + repetitions)[first_repetition * len(endpoints) :]
    for number, (repetition, name) in enumerate(order):
        if name in failed:
            progress.advance(overall)
            continue
        if cooldown_s and number:
            time.sleep(cooldown_s)
        label = f"{name} #{repetition + 1}"
        progress.update(overall, description=label)
        task = progress.add_task(f"{label}: starting")

        def on_progress(p: replies.Progress, task=task, label=label) -> None:
            progress.update(task, description=f"{label}: {p.phase}", completed=p.steps_done, total=p.steps_total)

        try:
            places = gate.places(name, endpoints[name], transport, requests[name])
            with gate.passage(places, label, progress) as passage:
                result = jobs.run_job(
                    name, endpoints[name], transport, requests[name], on_progress, repetition, rendezvous_port
                )
            gate.passages[(name, repetition)] = passage
            results.append(result)
            on_result(result)
        except RunnerFailure as failure:
            failures.append(failure)
            failed.add(name)
        finally:
            progress.remove_task(task)
        progress.advance(overall)
    progress.remove_task(overall)
    return results, failures
