"""Calibrate: each runner against a second instance of itself (A/A) for one configuration. The far end of that
comparison's interval is the noise floor: the smallest difference this host resolves there, stored, and applied by
every later comparison of the configuration. A floor whose runs were not on a quiet device is stored flagged, and
applied only where no quiet one exists (analyse.floors); --wait-for-quiet makes each run wait for a quiet host.

With a target precision (--floor-precision-pct) the twins run in counterbalanced rounds, one run each, until the
floor's own interval (analyse.floors.floor_precision) is within that fraction of the floor, or the most runs
are spent; each calibration says the precision it reached."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import NamedTuple

import pandas as pd
from google.protobuf.json_format import MessageToDict

from ..analyse import stats
from ..analyse.comparison import flag_summary
from ..analyse.floors import FloorPrecision, calibration_row, floor_precision
from ..analyse.run_values import normalised
from ..analyse.sequential import DEFAULT_MAX_RUNS
from ..base.progress import Progress
from ..plan.design import BlockDesign, DesignChoice
from ..plan.keys import new_run_id
from ..plan.spec import RunSpec
from ..run import wire
from ..run.client import RunnerFailure, RunResult
from ..run.connection import Transport
from ..run.execute import run_all
from ..run.gate import Gate
from ..run.launch import default_venvs
from ..run.runners import start_embedded
from ..store import records
from ..store.results_store import ResultStore
from . import preflight
from .best import DEFAULT_SEARCH_REPETITIONS, search
from .blocks import block_values, design_on_devices, run_blocks
from .errors import UsageError
from .medians import medians_by_runner
from .rounds import Repetitions
from .runners import RunnerChoice


class Calibration(NamedTuple):
    runner: str
    row: dict  # analyse.floors.calibration_row: what the store keeps
    comparison: stats.Comparison
    run_spread: float  # the larger of the two instances'
    precision: FloorPrecision | None  # the floor's own interval; None with too few runs
    target: FloorTarget | None = None  # the precision asked for, if any


@dataclass(frozen=True)
class FloorTarget:
    """Run until the floor's interval half-width is within `precision` of the floor (0.25: +-25%), up to max_runs
    per instance."""

    precision: float
    max_runs: int = DEFAULT_MAX_RUNS

    def reached(self, precision: FloorPrecision | None) -> bool:
        return precision is not None and precision.relative <= self.precision


@dataclass
class CalibrateResult:
    calibrations: list[Calibration] = field(default_factory=list)
    failures: list[RunnerFailure] = field(default_factory=list)


def twin_pairs(given: Sequence[str]) -> dict[str, list[str]]:
    """NAME=HOST:PORT values, each name given exactly twice: name -> its two addresses."""
    pairs: dict[str, list[str]] = {}
    for value in given:
        name, _, address = value.partition("=")
        if "," in address:
            raise UsageError(f"{value!r}: calibrate compares two single runners, not jobs across machines", "--runner")
        pairs.setdefault(name, []).append(address)
    uneven = sorted(name for name, addresses in pairs.items() if len(addresses) != 2)
    if uneven:
        raise UsageError(
            f"{', '.join(uneven)}: give each runner exactly twice, NAME=HOST:PORT of two instances", "--runner"
        )
    return pairs


def run_medians_by_runner(
    endpoints: dict[str, str],
    transport: Transport,
    request: wire.Request,
    repetitions: int,
    progress: Progress = Progress(),
    gate: Gate | None = None,
) -> tuple[list[RunResult], dict[str, list[float]], list[RunnerFailure]]:
    """The same request on every runner, counterbalanced, each run through `gate`: the results and each runner's
    per-run median step times (what an A/A comparison compares)."""
    results, failures = run_all(
        endpoints, {name: request for name in endpoints}, transport, repetitions, progress=progress, gate=gate
    )
    if failures:
        return results, {}, failures
    return results, medians_by_runner(results), []


def precision_of(medians: dict[str, list[float]]) -> FloorPrecision | None:
    a, b = medians.values()
    return floor_precision(a, b) if min(len(a), len(b)) >= stats.MIN_REPETITIONS else None


def medians_to_precision(
    twins: dict[str, str],
    transport: Transport,
    request: wire.Request,
    target: FloorTarget,
    progress: Progress = Progress(),
    gate: Gate | None = None,
) -> tuple[list[RunResult], dict[str, list[float]], list[RunnerFailure]]:
    """run_medians_by_runner in rounds of one run per twin (counterbalanced across rounds), until the floor is known
    to the target precision or the most runs are spent."""
    results: list[RunResult] = []
    for number in range(target.max_runs):
        runs, failures = run_all(
            twins,
            {twin: request for twin in twins},
            transport,
            1,
            progress=progress,
            first_repetition=number,
            gate=gate,
        )
        results += runs
        if failures:
            return results, {}, failures
        if target.reached(precision_of(medians_by_runner(results))):
            break
    return results, medians_by_runner(results), []


def in_blocks(
    twins: dict[str, str],
    transport: Transport,
    request: wire.Request,
    design: BlockDesign,
    blocks: int,
    prefix: str,
    progress: Progress = Progress(),
    gate: Gate | None = None,
) -> tuple[list[RunResult], dict[str, list[float]], list[RunnerFailure]]:
    """`blocks` process blocks of both twins' windows (app.blocks): the windows, and each twin's value per block."""
    done = run_blocks(
        twins,
        {twin: request for twin in twins},
        transport,
        design,
        Repetitions(fixed=blocks),
        prefix,
        None,
        stats.MIN_EFFECT,
        progress=progress,
        gate=gate,
    )
    if done.failures:
        return done.results, {}, done.failures
    return done.results, block_values(done.results), []


def calibrate_twins(
    name: str,
    addresses: Sequence[str],
    transport: Transport,
    request: wire.Request,
    repetitions: int,
    results_store: ResultStore,
    run_id: str,
    progress: Progress = Progress(),
    gate: Gate | None = None,
    target: FloorTarget | None = None,
    design: BlockDesign | None = None,
) -> tuple[Calibration | None, list[RunnerFailure]]:
    """Two instances of one runner against each other (A/A), and the noise floor that gives, stored with why its
    runs were not quiet ("" when they were) and what each run waited (the manifest's "passages"). With a target,
    as many runs as the floor's precision needs (medians_to_precision); under a block design, `repetitions` blocks
    judged block by block; else `repetitions` runs."""
    twins = {name: addresses[0], f"{name}-2": addresses[1]}
    gate = gate or Gate()
    if design is not None:
        results, medians, failures = in_blocks(
            twins, transport, request, design, repetitions, f"{run_id}-{name}", progress, gate
        )
    elif target is None:
        results, medians, failures = run_medians_by_runner(twins, transport, request, repetitions, progress, gate)
    else:
        results, medians, failures = medians_to_precision(twins, transport, request, target, progress, gate)
    if failures:
        return None, failures
    # Under the block design the twins' blocks pair, as a comparison's do (analyse.comparison).
    comparison = stats.compare(
        name,
        medians[name],
        f"{name}-2",
        medians[f"{name}-2"],
        paired=design is not None,
        unit="block" if design else "run",
    )
    summary = records.summary_frame(run_id, results, [])
    row = calibration_row(
        normalised(summary).iloc[0].to_dict(),
        results[0].runner_info.framework,
        comparison,
        flag_summary(summary["device_flags"], len(summary), "windows" if design else "runs"),
        float(pd.to_numeric(summary["finished_at_unix_s"]).max()),
    )
    key = new_run_id()
    passages = {f"{r.runner} #{r.repetition + 1}": gate.context_of(r.runner, r.repetition) for r in results}
    results_store.append(
        key,
        {"calibration": run_id, "runner": name, **MessageToDict(request)},
        {"calibration": pd.DataFrame([row])},
        {
            **records.manifest(key, results, {twin: request for twin in twins}),
            "passages": {run: waited for run, waited in passages.items() if waited},
        },
    )
    # The floor's own interval is Welch's (floor_precision): none is given for blocks, which the paired test judges.
    return Calibration(
        name,
        row,
        comparison,
        max(stats.run_spread(medians[twin]) for twin in twins),
        None if design else precision_of(medians),
        target,
    ), []


def calibrate(
    spec: RunSpec,
    runners: RunnerChoice,
    repetitions: int,
    store: Path,
    progress: Progress = Progress(),
    search_repetitions: int = DEFAULT_SEARCH_REPETITIONS,
    wait_for_quiet_s: float = 0.0,
    target: FloorTarget | None = None,
    design: DesignChoice = DesignChoice(),
) -> CalibrateResult:
    """The noise floor of `spec` for each runner: twins given (each name twice), else two embedded instances of
    each framework started here. Each run holds its device's lock and, with `wait_for_quiet_s`, first waits that
    long at most for a quiet host (run.gate). Under a block design the twins' windows interleave in `repetitions`
    process blocks, and the floor applies to comparisons in that design."""
    gate = Gate(wait_for_quiet_s)
    pairs = twin_pairs(runners.given)
    request = wire.to_request(spec)
    run_id = (
        time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-calibrate-{spec.model}-{spec.mode.value}-b{spec.batch_size}"
    )
    result = CalibrateResult()
    startup = runners.startup(spec.startup)
    with ExitStack() as stack, TemporaryDirectory() as logs:
        if not pairs:
            frameworks = runners.frameworks.split(",")
            venvs = runners.venvs or default_venvs()
            progress.note(f"starting two instances of each embedded runner: {', '.join(frameworks)}")
            first, result.failures = start_embedded(frameworks, venvs, Path(logs) / "a", stack, startup, progress)
            second, more = start_embedded(frameworks, venvs, Path(logs) / "b", stack, startup, progress)
            result.failures += more
            pairs = {name: [first[name], second[name]] for name in first if name in second}
        resolved, unreachable = preflight.checked(
            {name: addresses[0] for name, addresses in pairs.items()},
            runners.transport,
            {name: request for name in pairs},
            "the calibration",
        )
        result.failures += unreachable
        blocks = design_on_devices(design, [config.device.kind for config in resolved.values()], progress)
        results_store = ResultStore(store)
        for name, addresses in pairs.items():
            if name in {f.runner for f in unreachable}:
                continue
            own = request
            if spec.profile and spec.profile.value == "best":
                # The floor of the settings a best comparison runs: those this runner's search finds fastest.
                found = search(
                    {name: addresses[0]}, runners.transport, {name: request}, search_repetitions, progress=progress
                )
                own = found.choices[name].request
                progress.note(f"{name}: calibrating at its best settings, {found.choices[name].summary}")
            calibration, failures = calibrate_twins(
                name,
                addresses,
                runners.transport,
                own,
                repetitions,
                results_store,
                run_id,
                progress,
                gate,
                target,
                blocks,
            )
            result.failures += failures
            if calibration is not None:
                result.calibrations.append(calibration)
    return result
