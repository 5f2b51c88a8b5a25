"""Max-batch: the largest batch each runner fits in device memory (doubling, then bisection on out-of-memory
refusals), each runner's answer stored to line up with a study's runs of the same configuration."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..base.progress import Progress
from ..plan.bracket_search import BatchSearch
from ..plan.keys import new_run_id
from ..plan.spec import RunSpec
from ..run import jobs, wire
from ..run.client import RunnerClient, RunnerFailure
from ..run.runners import runner_facts
from ..store.results_store import ResultStore
from ..store.schema import MAX_BATCH_COLUMNS
from .runner_search import search_each_runner
from .runners import RunnerChoice


@dataclass(frozen=True)
class Search:
    runner: str
    largest: int | None  # None: not even batch 1 fits
    tried: dict[int, bool]  # batch -> fits


@dataclass
class MaxBatchResult:
    searches: list[Search] = field(default_factory=list)
    failures: list[RunnerFailure] = field(default_factory=list)


def max_batch(
    spec: RunSpec, limit: int, runners: RunnerChoice, store: Path, progress: Progress = Progress()
) -> MaxBatchResult:
    """Each runner's search, one runner after the other (they may share a device). `spec` is one step, no warm-up,
    no power: the question is only whether a batch fits."""
    results_store = ResultStore(store)
    request = wire.to_request(spec)

    def search_runner(name: str, address: str, transport, task) -> Search:
        searched_at_unix_s = time.time()

        def fits(batch: int) -> bool:
            request.batch_size = batch
            try:
                jobs.run_job(name, address, transport, request)
            except RunnerFailure as failure:
                if failure.out_of_memory:
                    return False
                raise  # a busy runner, or any other refusal, says nothing about the batch
            return True

        search = BatchSearch(fits, limit=limit)
        largest = search.largest()
        _store(results_store, spec, name, address, transport, limit, largest, search, searched_at_unix_s)
        return Search(name, largest, dict(sorted(search.tried.items())))

    searched = search_each_runner(runners, wire.to_request(spec), search_runner, progress)
    return MaxBatchResult(searched.found, searched.failures)


def _store(
    results_store: ResultStore,
    spec: RunSpec,
    name: str,
    address: str,
    transport,
    limit: int,
    largest: int | None,
    search: BatchSearch,
    searched_at_unix_s: float,
) -> None:
    """The search as frame max_batch, its configuration as a run's summary row names it (defaults resolved: the
    runner's default device and shape, every option), so that it lines up with runs of it."""
    first = jobs.addresses_of(address)[0]
    facts = runner_facts(name, first, transport)
    where = facts.failure_columns(spec.model, spec.device, spec.shape)
    with RunnerClient(name, first, transport) as client:
        (listed,) = [m for m in client.list_models() if m.name == spec.model]  # the search found it
    defaults = {o.name: o.default for o in listed.options}
    searched = {
        "model": spec.model,
        "model_options": ";".join(f"{k}={v}" for k, v in sorted({**defaults, **dict(spec.model_options)}.items())),
        "mode": spec.mode.value,
        "input_shape": where["input_shape"],
        "precision": spec.precision.value,
        "device": where["device"],
        "runner": name,
    }
    tried = ", ".join(f"{b}{'' if ok else ' (OOM)'}" for b, ok in sorted(search.tried.items()))
    row = {
        **searched,
        "framework": where["framework"],
        "framework_version": where["framework_version"],
        "largest_batch": -1 if largest is None else largest,
        "limit": limit,
        "capped": largest == limit,
        "batches_tried": tried,
        "searched_at_unix_s": searched_at_unix_s,
    }
    config = {"max_batch": searched_at_unix_s, **searched, "limit": limit}
    manifest = {"command": sys.argv, "runner_address": address, "runner_options": facts.options}
    results_store.append(new_run_id(), config, {"max_batch": pd.DataFrame([row], columns=MAX_BATCH_COLUMNS)}, manifest)
