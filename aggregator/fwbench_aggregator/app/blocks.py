"""A comparison in interleaved process blocks (plan.design): block after block, each runner's windows in turn within a
block, a block's windows stored while the next block's workers start; under `--repetitions auto` the comparison rows
every table reads after every block, judged block by block by a plan that looks at half the budget and at its end
(analyse.sequential.block_looks), and a stop as soon as every verdict is settled or a budget is spent. A fixed number
of blocks is the same loop without the looks."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pandas as pd

from ..analyse.comparison import comparison_rows, evidence_of
from ..analyse.stopping import stop_reason
from ..base.progress import Progress
from ..plan.design import BlockDesign, DesignChoice
from ..plan.study import counterbalanced
from ..present.block_progress import block_progress
from ..run import jobs, replies, wire
from ..run.client import BlockPlace, RunnerClient, RunnerFailure, RunResult
from ..run.connection import Transport
from ..run.gate import Gate
from ..store import records
from .block_warmup import BlockWarmup
from .rounds import Repetitions, Rounds


def design_on_devices(choice: DesignChoice, kinds: list[str], progress: Progress) -> BlockDesign | None:
    """The blocks to run (None: rounds) once every runner resolved its device (`kinds`, each a DeviceKind), the
    line saying how auto chose them noted on `progress`."""
    blocks, note = choice.on_devices(kinds)
    if note:
        progress.note(note)
    return blocks


def window_order(runners: list[str], design: BlockDesign, block: int) -> list[tuple[int, str]]:
    """(window, runner) in the order block number `block` measures them: counterbalanced (A B, B A, ...), so that a
    drift within the block favours no runner, and every other block begins with the runners in reverse."""
    first = runners if block % 2 == 0 else list(reversed(runners))
    return counterbalanced(first, design.windows)


def block_name(prefix: str, block: int) -> str:
    """A process block's name: its comparison's, and its number there (every runner's windows of it share it)."""
    return f"{prefix}-block{block}"


def block_values(results: list[RunResult]) -> dict[str, list[float]]:
    """Each runner's value per block of these windows, in the order the blocks ran: what a verdict judges
    (analyse.comparison.evidence_of; a block a runner did not finish has fewer windows, not none)."""
    if not results:
        return {}
    summary = records.summary_frame("blocks", results, [])
    return {str(runner): evidence_of(windows)[0].tolist() for runner, windows in summary.groupby("runner", sort=False)}


def run_blocks(
    endpoints: dict[str, str],
    requests: dict[str, wire.Request],
    transport: Transport,
    design: BlockDesign,
    repetitions: Repetitions,
    prefix: str,
    calibration: pd.DataFrame | None,
    min_effect: float,
    on_result: Callable[[RunResult, wire.Request], None] = lambda run, sent: None,
    progress: Progress = Progress(),
    clock: Callable[[], float] = time.monotonic,
    gate: Gate | None = None,
) -> Rounds:
    """The windows of one configuration on every runner, block by block: a fixed number of blocks, or (auto) until the
    comparison rows say every verdict is settled, or a budget ends them. `prefix` names this comparison's blocks;
    `on_result` gets every window with the request it was: a block's while the next block's workers start (no window
    measures then; storing a window took 49 ms, two thirds of the time between windows), and the last block's, or
    those of a block an error or an interrupt ends, at once."""
    gate = gate or Gate()
    repetitions = repetitions.in_design(blocks=True)
    rounds = Rounds()
    alive = dict(endpoints)
    looks = repetitions.auto and len(endpoints) > 1
    started = clock()
    overall = progress.add_task("blocks", total=repetitions.budget)
    pending: list[tuple[RunResult, wire.Request]] = []

    def store_pending() -> None:
        while pending:
            on_result(*pending.pop(0))

    rows = None
    warmup = BlockWarmup(progress)
    try:
        for block in range(repetitions.budget):
            progress.update(overall, description=block_progress(block + 1, repetitions.budget, rows))
            runs, failures = _one_block(
                alive,
                requests,
                transport,
                design,
                block,
                block_name(prefix, block),
                lambda run, sent: pending.append((run, sent)),
                progress,
                gate,
                store_pending,
                warmup.steps_for,
            )
            progress.advance(overall)
            warmup.after_block(block, runs)
            rounds.results += runs
            rounds.failures += failures
            for failure in failures:
                alive.pop(failure.runner, None)
            if looks and len(alive) < 2:
                rounds.stopped = "one runner left"
                break
            if not looks:
                continue
            summary = records.summary_frame(
                "blocks", rounds.results, [], repetitions.max_runs, repetitions.looks(blocks=True)
            )
            rows = comparison_rows(summary, records.steps_frame("blocks", rounds.results), calibration, min_effect)
            rounds.stopped = stop_reason(rows, block + 1, repetitions.max_runs)
            if rounds.stopped:
                break
            if repetitions.time_budget_s is not None and clock() - started >= repetitions.time_budget_s:
                rounds.stopped = "time budget"
                break
        else:
            rounds.stopped = "run budget" if looks else ""
    finally:
        store_pending()
    progress.remove_task(overall)
    return rounds


def _one_block(
    endpoints: dict[str, str],
    requests: dict[str, wire.Request],
    transport: Transport,
    design: BlockDesign,
    number: int,
    name: str,
    on_result: Callable[[RunResult, wire.Request], None],
    progress: Progress,
    gate: Gate,
    store_meanwhile: Callable[[], None] = lambda: None,
    fresh_warmup: Callable[[str], int | None] = lambda runner: None,
) -> tuple[list[RunResult], list[RunnerFailure]]:
    """One process block: every runner's windows in turn (each runner's first builds and warms up), under one passage
    of the gate (no other fwbench measures the device between them). A runner that fails is left out of the block's
    later windows. Every runner's worker is started at once first (open_blocks); its workload is built in its first
    window. (Building every runner's workload at once, before the windows, took longer on a 2-core host: their thread
    pools, spinning while they wait, slowed each other's steps ten-fold.) `store_meanwhile` runs while the workers
    start, when no window measures. `fresh_warmup` says how many steps a runner's first window warms up (None: until
    stable, the runner's rule; app.block_warmup)."""
    results, failures = [], []
    failed: set[str] = set()
    order = window_order(list(endpoints), design, number)
    places = [
        place for runner in endpoints for place in gate.places(runner, endpoints[runner], transport, requests[runner])
    ]
    with gate.passage(list(dict.fromkeys(places)), name, progress) as passage:
        with ThreadPoolExecutor(max_workers=1) as writer:
            storing = writer.submit(store_meanwhile)
            opened = open_blocks(endpoints, transport, name)
            storing.result()
        for failure in opened:
            failures.append(failure)
            failed.add(failure.runner)
        for window, runner in order:
            if runner in failed:
                continue
            repetition = number * design.windows + window
            if window == 0:  # the block's wait belongs to each runner's first window, once
                gate.passages[(runner, repetition)] = passage
            label = f"{runner} block {number + 1} window {window + 1}"
            task = progress.add_task(f"{label}: starting")

            def on_progress(p: replies.Progress, task=task, label=label) -> None:
                progress.update(task, description=f"{label}: {p.phase}", completed=p.steps_done, total=p.steps_total)

            request = wire.window(
                requests[runner],
                design,
                name,
                last=window == design.windows - 1,
                fresh_warmup_steps=fresh_warmup(runner) if window == 0 else None,
            )
            try:
                result = jobs.run_job(runner, endpoints[runner], transport, request, on_progress, repetition)
                result.block = BlockPlace(design.label, name, window)
                results.append(result)
                on_result(result, request)
            except RunnerFailure as failure:
                failures.append(failure)
                failed.add(runner)
            finally:
                progress.remove_task(task)
    return results, failures


def open_blocks(endpoints: dict[str, str], transport: Transport, block: str) -> list[RunnerFailure]:
    """Every runner's worker for `block` started at once, each importing its framework, before any window: the
    imports run side by side instead of one after another between windows (on a 2-core host, torch's took 2.3-3.1 s
    of a block's 8.1 s). A runner that predates OpenBlock (UNIMPLEMENTED) starts its worker in its first window, as
    before; any other refusal is that runner's failure in the block."""

    def open_one(runner: str) -> RunnerFailure | None:
        try:
            with RunnerClient(runner, endpoints[runner], transport) as client:
                client.open_block(block)
        except RunnerFailure as failure:
            return None if failure.code == "UNIMPLEMENTED" else failure
        return None

    with ThreadPoolExecutor(max_workers=len(endpoints)) as pool:
        return [failure for failure in pool.map(open_one, endpoints) if failure is not None]
