"""Serve-capacity: each runner's highest offered load (server scenario) whose latency percentile stays under a
budget, by plan.bracket_search (a geometric bracket, then bisection to a stated resolution), each probe a real run that
is stored like any run, so that the report's latency-against-load plot shows them; the search is stored too."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
from google.protobuf.json_format import MessageToDict

from ..base.progress import Progress
from ..plan.bracket_search import RateSearch
from ..plan.keys import new_run_id
from ..plan.spec import RunSpec
from ..run import jobs, wire
from ..run.client import RunnerFailure, RunResult
from ..store import records
from ..store.results_store import ResultStore
from ..store.schema import MAX_BATCH_KEY_COLUMNS, SERVE_CAPACITY_COLUMNS, SERVE_CAPACITY_FRAME
from .runner_search import search_each_runner
from .runners import RunnerChoice

MIN_RESOLUTION, MAX_RESOLUTION, DEFAULT_RESOLUTION = 0.01, 1.0, 0.1


@dataclass(frozen=True, kw_only=True)  # built from keywords: a new option is one more keyword
class CapacityRequest:
    spec: RunSpec  # the server scenario; each probe sets its target_qps
    runners: RunnerChoice
    latency_budget_ms: float
    percentile: str = "p99"
    start_qps: float = 10.0
    max_qps: float = 10_000.0
    resolution: float = DEFAULT_RESOLUTION
    store: Path = Path("results/store")
    repetitions: int = 1  # runs per probe; a probe meets the budget only where every one of them does


@dataclass(frozen=True)
class Probe:
    target_qps: float
    achieved_qps: list[float]  # per run
    latency_s: list[float | None]  # the percentile per run; None where its queries could not support it
    meets: bool
    note: str = ""  # why it misses: over the budget, or the percentile unsupported (the runner's reason)


@dataclass
class CapacitySearch:
    runner: str
    capacity_qps: float | None  # None: even the start load missed the budget
    capped: bool  # the highest load asked for met it: the capacity is at least that
    probes: list[Probe] = field(default_factory=list)


@dataclass
class CapacityResult:
    searches: list[CapacitySearch] = field(default_factory=list)
    failures: list[RunnerFailure] = field(default_factory=list)


def percentile_of(run: RunResult, percentile: str) -> tuple[float | None, str]:
    """The run's latency percentile in seconds, or None and the runner's reason where its queries could not support
    it."""
    name = f"{percentile}_latency_s"
    serving = run.summary.serving
    value = getattr(serving, name) if serving else None
    if value is not None:
        return value, ""
    return None, (serving.reasons if serving else {}).get(name, "not reported by the runner")


def judge_probe(target_qps: float, runs: list[RunResult], percentile: str, budget_ms: float) -> Probe:
    """A probe meets the budget where every run's percentile is supported and under it."""
    values, notes = [], []
    for run in runs:
        value, reason = percentile_of(run, percentile)
        values.append(value)
        if value is None:
            notes.append(f"{percentile} not supported ({reason}): counts as missing the budget")
        elif value * 1e3 >= budget_ms:
            notes.append(f"{percentile} {value * 1e3:.3g} ms is over the budget")
    achieved = [run.summary.serving.achieved_qps for run in runs]
    return Probe(target_qps, achieved, values, not notes, "; ".join(dict.fromkeys(notes)))


def serve_capacity(request: CapacityRequest, progress: Progress = Progress()) -> CapacityResult:
    """Each runner's search, one runner after the other (they may share a device); a runner that fails is named in
    the failures and the others' searches kept."""
    results_store = ResultStore(request.store)

    def search_runner(name: str, address: str, transport, task) -> CapacitySearch:
        searched_at_unix_s = time.time()
        probes: list[Probe] = []
        kept: list[RunResult] = []

        def meets(target_qps: float) -> bool:
            spec = replace(request.spec, target_qps=target_qps)
            runs = []
            for repetition in range(request.repetitions):
                progress.update(task, description=f"{name}: {target_qps:g} qps, run {repetition + 1}")
                sent = wire.to_request(spec)
                run = jobs.run_job(name, address, transport, sent, repetition=repetition)
                config = {
                    "serve_capacity": searched_at_unix_s,
                    **MessageToDict(sent),
                    "runner": name,
                    "repetition": repetition,
                }
                records.store_result(results_store, new_run_id(), config, run, sent)
                runs.append(run)
            probes.append(judge_probe(target_qps, runs, request.percentile, request.latency_budget_ms))
            kept.extend(runs)
            return probes[-1].meets

        capacity = RateSearch(meets, request.start_qps, request.max_qps, request.resolution).highest()
        found = CapacitySearch(name, capacity, capacity == request.max_qps, sorted(probes, key=lambda p: p.target_qps))
        _store(results_store, request, found, kept[0], searched_at_unix_s)
        return found

    searched = search_each_runner(
        request.runners, wire.to_request(request.spec), search_runner, progress, request.spec.startup
    )
    return CapacityResult(searched.found, searched.failures)


def probes_text(probes: list[Probe], percentile: str) -> str:
    """Every probe in a line: "10 qps: p99 4.1 ms; 20 qps: p99 not supported; ..."."""

    def figure(value: float | None) -> str:
        return "not supported" if value is None else f"{value * 1e3:.3g} ms"

    return "; ".join(
        f"{p.target_qps:g} qps: {percentile} {', '.join(figure(v) for v in p.latency_s)}"
        f"{'' if p.meets else ' (misses)'}"
        for p in probes
    )


def _store(
    results_store: ResultStore,
    request: CapacityRequest,
    search: CapacitySearch,
    first: RunResult,
    searched_at_unix_s: float,
) -> None:
    """The search as frame serve_capacity, its configuration as the probes' summary rows name it (defaults
    resolved), so that it lines up with them."""
    resolved = records.summary_frame("", [first], []).iloc[0]
    identity = {column: resolved[column] for column in (*MAX_BATCH_KEY_COLUMNS, "batch_size")}
    note = (
        "even the start load missed the budget"
        if search.capacity_qps is None
        else "the highest load asked for met the budget: the capacity is at least that"
        if search.capped
        else ""
    )
    row = {
        **identity,
        "framework": resolved["framework"],
        "framework_version": resolved["framework_version"],
        "percentile": request.percentile,
        "latency_budget_ms": request.latency_budget_ms,
        "capacity_qps": search.capacity_qps,
        "resolution": request.resolution,
        "capacity_note": note,
        "probes": probes_text(search.probes, request.percentile),
        "searched_at_unix_s": searched_at_unix_s,
    }
    config = {
        "serve_capacity": searched_at_unix_s,
        **{k: str(v) for k, v in identity.items()},
        "percentile": request.percentile,
        "latency_budget_ms": request.latency_budget_ms,
    }
    manifest = {"command": sys.argv, "runner_address": first.address}
    results_store.append(
        new_run_id(), config, {SERVE_CAPACITY_FRAME: pd.DataFrame([row], columns=SERVE_CAPACITY_COLUMNS)}, manifest
    )
