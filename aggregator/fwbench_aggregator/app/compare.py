"""Compare: one model at one batch size and shape on every runner, repetition after repetition, every run stored the
moment it completes (in process blocks, a block's windows when it ends: app.blocks), then the figures and verdicts,
the results folder and the power plots."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
from google.protobuf.json_format import MessageToDict

from ..analyse import stats
from ..analyse.results import analysed
from ..analyse.scaling import has_scaling, scaling_rows
from ..base.paths import safe_component
from ..base.progress import Progress
from ..base.stopwatch import Stopwatch
from ..base.vocabulary import Compilation, Strategy
from ..plan.design import DesignChoice
from ..plan.keys import new_run_id
from ..plan.spec import RunSpec, per_runner
from ..present.line_plots import power_timeline
from ..present.report import write_report
from ..run import replies, wire
from ..run.client import RunnerFailure, RunResult
from ..run.gate import Gate
from ..store import catalog, records
from ..store.catalog import scaling_key
from ..store.results_store import ResultStore
from ..store.run_columns import BEST_SEARCH_PROFILE, SCALING_KEY_COLUMNS
from ..store.schema import PARITY_FRAME
from . import best, preflight
from .blocks import design_on_devices, run_blocks
from .facts import record_model_facts
from .report import REPORT_FOLDER, version_tables
from .rounds import Repetitions, run_rounds
from .runners import RunnerChoice, runners_for


@dataclass(frozen=True, kw_only=True)  # built from keywords: a new option is one more keyword
class CompareRequest:
    spec: RunSpec  # the run every runner gets, but for its compilation and strategy
    runners: RunnerChoice
    compilation: tuple[str, ...] = ()  # VALUE for every runner, or RUNNER=VALUE
    strategy: tuple[str, ...] = ()
    repetitions: Repetitions = Repetitions()  # as many as the verdict needs, by default (runs, or blocks)
    design: DesignChoice = DesignChoice()  # interleaved process blocks (app.blocks), or runs in rounds
    cooldown_s: float = 0.0
    min_effect: float = stats.MIN_EFFECT
    rendezvous_port: int | None = None
    out: Path = Path("results")
    store: Path | None = None  # default: OUT/store
    allow_different_models: bool = False  # a plug-in whose runners build different parameter counts
    search_repetitions: int = best.DEFAULT_SEARCH_REPETITIONS  # the best profile's runs per candidate
    wait_for_quiet_s: float = 0.0  # before each run, wait up to this long for a quiet host (run.gate)
    latency_budget_ms: float | None = None  # under a scenario: whether each runner's p99 meets it


@dataclass
class CompareResult:
    run_id: str
    store: Path
    run_dir: Path | None = None  # None where nothing ran
    report: Path | None = None  # RUN_DIR/report/report.html, this compare's runs alone
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)  # analyse.comparison rows
    scaling: pd.DataFrame = field(default_factory=pd.DataFrame)  # where the store has other world sizes of it
    resolved: dict[str, replies.Resolved] = field(default_factory=dict)  # each runner's run, as it resolved it
    results: list[RunResult] = field(default_factory=list)
    failures: list[RunnerFailure] = field(default_factory=list)
    best: dict[str, best.BestChoice] = field(default_factory=dict)  # under the best profile: each runner's search
    stopped: str = ""  # under --repetitions auto: why the rounds ended ("settled", "run budget", ...)
    serving: pd.DataFrame = field(default_factory=pd.DataFrame)  # under a scenario: analyse.serving rows
    generation: pd.DataFrame = field(default_factory=pd.DataFrame)  # mode generate: analyse.generation rows
    time_spent: Stopwatch = field(default_factory=Stopwatch)  # the compare's phases: where its wall time went


def run_id_for(spec: RunSpec) -> str:
    """The compare's id, its results folder's name: the time, then random hex digits, so that two compares started
    in one second (on one machine or two) never share a folder or a --compare selection."""
    return (
        time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        + f"-{secrets.token_hex(3)}"
        + f"-{safe_component(spec.model)}-{spec.mode.value}-b{spec.batch_size}"
    )


def requests_for(names, request: CompareRequest) -> dict[str, wire.Request]:
    return {
        name: wire.to_request(
            replace(
                request.spec,
                compilation=per_runner(name, list(request.compilation), Compilation),
                strategy=per_runner(name, list(request.strategy), Strategy),
            )
        )
        for name in names
    }


def compare(request: CompareRequest, progress: Progress = Progress()) -> CompareResult:
    """Every runner checked first (a mistake refuses the comparison before anything runs, with a UsageError), then
    run counterbalanced; a runner that fails is named in the result's failures and the others' results kept."""
    store = request.store or request.out / "store"
    result = CompareResult(run_id_for(request.spec), store)
    run_dir = request.out / result.run_id
    laps = result.time_spent
    with runners_for(request.runners, progress, request.spec.startup) as runners:
        laps.lap("runners started")
        result.failures += runners.failures
        requests = requests_for(runners.endpoints, request)
        result.resolved, unreachable = preflight.checked(runners.endpoints, runners.transport, requests)
        result.failures += unreachable
        requests = {name: r for name, r in requests.items() if name not in {f.runner for f in unreachable}}
        if not requests:
            return result
        preflight.same_network(runners.endpoints, runners.transport, requests, request.allow_different_models)
        laps.lap("checks")
        results_store = ResultStore(store)

        blocks = design_on_devices(request.design, [c.device.kind for c in result.resolved.values()], progress)
        repetitions = request.repetitions.in_design(blocks is not None)
        # What every run stores as the sequential design it was made under (its budget and looks), 0 for a fixed number.
        max_repetitions = repetitions.budget if repetitions.auto else 0
        looks = repetitions.looks(blocks is not None)
        gate = Gate(request.wait_for_quiet_s)

        def keep(run: RunResult, sent: wire.Request | None = None, profile: str = "") -> None:
            sent = sent or requests[run.runner]
            config = {
                "compare": result.run_id,
                **MessageToDict(sent),
                "runner": run.runner,
                "repetition": run.repetition,
            }
            records.store_result(
                results_store,
                new_run_id(),
                config,
                run,
                sent,
                gate.context_of(run.runner, run.repetition),
                profile=profile,
                max_repetitions=0 if profile else max_repetitions,
                looks=() if profile else looks,
            )

        if request.spec.profile and request.spec.profile.value == "best":
            requests = search_best(request, runners, requests, keep, progress, result, gate)
            result.resolved, _ = preflight.checked(runners.endpoints, runners.transport, requests)
            laps.lap("search for the best settings")

        endpoints = {name: runners.endpoints[name] for name in requests}
        if blocks:
            rounds = run_blocks(
                endpoints,
                requests,
                runners.transport,
                blocks,
                repetitions,
                result.run_id,
                results_store.load("calibration"),
                request.min_effect,
                keep,
                progress,
                gate=gate,
            )
        else:
            rounds = run_rounds(
                endpoints,
                requests,
                runners.transport,
                repetitions,
                results_store.load("calibration"),
                request.min_effect,
                request.cooldown_s,
                keep,
                request.rendezvous_port,
                progress,
                gate=gate,
            )
        laps.lap(f"{len({r.block.block for r in rounds.results if r.block})} blocks" if blocks else "runs")
        result.results, result.stopped = rounds.results, rounds.stopped
        result.failures += rounds.failures
        if not result.results:
            return result
        frames = {
            "steps": records.steps_frame(result.run_id, result.results),
            "summary": records.summary_frame(result.run_id, result.results, result.failures, max_repetitions, looks),
            "power": records.power_frame(result.run_id, result.results),
        }
        if any(r.queries for r in result.results):
            frames["queries"] = records.queries_frame(result.run_id, result.results)
        if any(choice.candidates for choice in result.best.values()):
            frames["best_search"] = best.search_frame(result.best)
        record_model_facts(endpoints, runners.transport, results_store, frames["summary"], progress)
        runners.keep_logs(run_dir / "logs")
        laps.lap("analysis and report")
    laps.lap("runners stopped")
    result.run_dir = run_dir
    calibration, parity = results_store.load("calibration"), results_store.load(PARITY_FRAME)
    analysis = analysed(
        frames["summary"],
        frames["steps"],
        calibration,
        results_store.load("max_batch"),
        results_store.load("model_facts"),
        request.latency_budget_ms,
        request.min_effect,
        parity=parity,
    )
    result.rows, result.serving, result.generation = analysis.rows, analysis.serving, analysis.generation
    frames["comparison"] = result.rows
    if not result.serving.empty:
        frames["serving"] = result.serving
    if not result.generation.empty:
        frames["generation"] = result.generation
    result.scaling = scaling_of(result.rows, results_store)
    if not result.scaling.empty:
        frames["scaling"] = result.scaling
    records.write_results(run_dir, frames)
    if not frames["power"].empty:
        power_timeline(frames["power"], run_dir)
    manifest = records.manifest(result.run_id, result.results, requests)
    records.write_manifest(run_dir, manifest)
    # This compare's own report: its runs alone, never the rest of the store (`fwbench report` reads that).
    result.report = write_report(
        analysis,
        frames["summary"],
        manifest,
        run_dir / REPORT_FOLDER,
        versions=version_tables(results_store, frames["summary"], analysis.run_medians),
        parity=parity,
    )
    laps.lap("analysis and report")
    return result


def search_best(
    request: CompareRequest,
    runners,
    baselines: dict[str, wire.Request],
    keep,
    progress: Progress,
    result: CompareResult,
    gate: Gate,
) -> dict[str, wire.Request]:
    """Each runner's fastest settings (app.best), its search runs stored under their own profile label; the requests
    that run the comparison at them."""
    found = best.search(
        {name: runners.endpoints[name] for name in baselines},
        runners.transport,
        baselines,
        request.search_repetitions,
        progress=progress,
        on_result=lambda run, sent: keep(run, sent, BEST_SEARCH_PROFILE),
        gate=gate,
    )
    result.best = found.choices
    result.failures += found.failures
    failed = {failure.runner for failure in found.failures}
    return {name: choice.request for name, choice in found.choices.items() if name not in failed}


def scaling_of(rows: pd.DataFrame, results_store: ResultStore) -> pd.DataFrame:
    """The scaling rows of these configurations over every run the store holds, where they ran at more than
    one world size (e.g. the user ran them on one device before); else empty."""
    mine = rows[list(SCALING_KEY_COLUMNS)].drop_duplicates()
    # Only the stored runs of these configurations are read: the catalog finds them by their scaling key.
    keys = catalog.keys_where(results_store.catalog, "scaling_key", map(scaling_key, mine.to_dict("records")))
    if len(set(catalog.column(results_store.catalog, "world_size", keys).values())) < 2:
        keys = set()  # one world size: no scaling, whatever it holds, and nothing to read
    scaling = scaling_rows(results_store.load("summary", keys))
    scaling = scaling.merge(mine, on=list(SCALING_KEY_COLUMNS)) if not scaling.empty else scaling
    return scaling if has_scaling(scaling) else scaling.iloc[0:0]
