"""A study under the best profile: before its runs, the runners of each point search their settings (app.best), and
every run of the point is made at its runner's choice.

A point is a configuration less its runner and repetition: each batch size is a point of its own, since the fastest
settings may change with the batch. A resumed study keeps the settings its stored runs of a point were made with,
so that one configuration's runs are never made at two settings; a point with none stored is searched afresh. The
search's runs are stored under their own profile label, as `compare --profile best` stores them."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pandas as pd
from google.protobuf.json_format import MessageToDict

from ..base.progress import Progress
from ..plan.keys import new_run_id
from ..plan.spec import StartupSettings
from ..plan.study import Configuration
from ..run import wire
from ..run.client import RunnerFailure
from ..run.connection import Transport
from ..store import records
from ..store.results_store import ResultStore
from ..store.run_columns import BEST_SEARCH_PROFILE
from .best import SEARCHED, search

Pending = list[tuple[str, Configuration]]


def is_best(c: Configuration) -> bool:
    return c.profile is not None and c.profile.value == "best"


def point_of(c: Configuration) -> Configuration:
    return replace(c, runner="", repetition=0, reuse_chain="", settings=())


def stored_settings(summary: pd.DataFrame, keys: list[str]) -> tuple[tuple[str, str], ...]:
    """The searched settings the stored runs under `keys` were made with (their first successful run's)."""
    if summary.empty:
        return ()
    runs = summary[summary["run_key"].isin(keys) & (summary["status"] == "ok")]
    if runs.empty:
        return ()
    first = runs.iloc[0]
    return tuple((name, str(first[name])) for name in SEARCHED if name in runs and str(first[name]) not in ("", "nan"))


def choose_best_settings(
    pending: Pending,
    done_before: Pending,
    results_store: ResultStore,
    endpoints: dict[str, str],
    transport: Transport,
    startup: StartupSettings,
    search_repetitions: int,
    progress: Progress = Progress(),
) -> tuple[Pending, list[RunnerFailure]]:
    """The pending runs, those under the best profile with their runner's chosen settings; and the runners whose
    search failed (their runs of the point are left out)."""
    if not any(is_best(c) for _, c in pending):
        return pending, []
    summary = results_store.load("summary")
    done: dict[tuple, list[str]] = {}
    for key, c in done_before:
        if is_best(c):
            done.setdefault((point_of(c), c.runner), []).append(key)
    chosen = {place: stored_settings(summary, keys) for place, keys in done.items()}
    chosen = {place: settings for place, settings in chosen.items() if settings}
    to_search: dict[Configuration, dict[str, Configuration]] = {}
    for _, c in pending:
        if is_best(c) and c.runner in endpoints and (point_of(c), c.runner) not in chosen:
            to_search.setdefault(point_of(c), {}).setdefault(c.runner, c)
    failures: list[RunnerFailure] = []
    failed: set[tuple[Configuration, str]] = set()
    session = uuid.uuid4().hex[:8]
    for number, (point, runs) in enumerate(to_search.items()):
        progress.note(
            f"best profile: searching each runner's settings for {point.model} {point.mode.value} "
            f"b{point.batch_size} ({number + 1} of {len(to_search)})"
        )
        baselines = {runner: wire.to_request(c.run_spec(startup)) for runner, c in runs.items()}

        def keep(run, sent) -> None:
            config = {"best_search": session, **MessageToDict(sent), "runner": run.runner, "repetition": run.repetition}
            records.store_result(results_store, new_run_id(), config, run, sent, profile=BEST_SEARCH_PROFILE)

        found = search(
            {runner: endpoints[runner] for runner in runs}, transport, baselines, search_repetitions, keep, progress
        )
        failures += found.failures
        failed |= {(point, failure.runner) for failure in found.failures}
        for runner, choice in found.choices.items():
            chosen[(point, runner)] = choice.settings
    return [
        (key, replace(c, settings=chosen.get((point_of(c), c.runner), ())) if is_best(c) else c)
        for key, c in pending
        if not (is_best(c) and (point_of(c), c.runner) in failed)
    ], failures
