"""Each model's forward FLOPs per sample and parameters, as the runner that ran it counts them (InspectModel),
kept in the results store as frame `model_facts`: with them a report turns step times into achieved FLOP/s.

One entry per (runner, framework version, model, model options, input shape), keyed by those fields, so a
model already inspected is never inspected again. Inspecting builds the model on the runner's CPU (0.1-2 s)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
from rich.markup import escape

from . import jobs
from . import store as store_mod
from .client import RunnerClient, RunnerFailure
from .connection import Transport
from .console import err_console
from .vocabulary import shape_dims

FRAME = "model_facts"
# What identifies a fact; summary frames hold these columns for every successful run.
IDENTITY = ("runner", "framework", "framework_version", "model", "model_options", "input_shape")


def fact_key(identity: Mapping[str, str]) -> str:
    return store_mod.run_key({FRAME: {name: identity[name] for name in IDENTITY}})


def _options(text: str) -> dict[str, str]:
    """"head=mlm;size=base" (as results.py writes model_options) -> {"head": "mlm", "size": "base"}."""
    return dict(pair.split("=", 1) for pair in text.split(";") if pair)


def missing_facts(summary: pd.DataFrame, results_store: store_mod.ResultStore) -> list[dict[str, str]]:
    """The distinct identities of the summary's successful runs that the store holds no fact for."""
    ran = summary[summary["status"] == "ok"] if "status" in summary else summary.iloc[0:0]
    if ran.empty:
        return []  # failed runs' rows may lack the identity's columns
    ran = ran[list(IDENTITY)].fillna("").astype(str).drop_duplicates()
    return [identity for identity in ran.to_dict("records") if not results_store.has(fact_key(identity))]


def record_model_facts(
    endpoints: Mapping[str, str], transport: Transport, results_store: store_mod.ResultStore, summary: pd.DataFrame,
) -> list[str]:
    """Inspect, on its runner, each model of the summary's successful runs that the store has no fact for, and
    store the fact; returns the keys stored. The runners inspect at once (after the runs, nothing is timed). A
    runner that cannot inspect one is warned about and skipped: the runs are stored already, and only this
    model's FLOPs are missing from the report."""
    by_runner: dict[str, list[dict[str, str]]] = {}
    for identity in missing_facts(summary, results_store):
        if identity["runner"] in endpoints:
            by_runner.setdefault(identity["runner"], []).append(identity)
    if not by_runner:
        return []
    with err_console.status(f"counting model FLOPs on {', '.join(by_runner)}"), ThreadPoolExecutor(len(by_runner)) as pool:
        # A job across machines is inspected on its first node.
        done = [pool.submit(_record_runner, runner, jobs.addresses_of(endpoints[runner])[0], identities, transport,
                            results_store) for runner, identities in by_runner.items()]
        stored = [key for future in done for key in future.result()]
    if stored:
        err_console.print(f"forward FLOPs of {len(stored)} model(s) stored in {results_store.root}")
    return stored


def _record_runner(
    runner: str, address: str, identities: list[dict[str, str]], transport: Transport, results_store: store_mod.ResultStore,
) -> list[str]:
    """One runner's inspections, one model after the other (it takes its CPU lock for each)."""
    stored = []
    try:
        with RunnerClient(runner, address, transport) as client:
            version = client.describe().framework_version
            for identity in identities:
                if version != identity["framework_version"]:
                    continue  # run by another version of the framework: not this runner's to count
                model = identity["model"]
                try:
                    report = client.inspect(model, shape_dims(identity["input_shape"]), _options(identity["model_options"]))
                except RunnerFailure as failure:
                    _warn(runner, model, failure)
                    continue
                key = _store(results_store, identity, report, address)
                if key:
                    stored.append(key)
    except RunnerFailure as failure:
        _warn(runner, ", ".join(sorted({i["model"] for i in identities})), failure)
    return stored


def _warn(runner: str, models: str, failure: RunnerFailure) -> None:
    err_console.print(f"[yellow]warning: {runner} could not inspect {escape(models)}, so its FLOPs are not "
                      f"stored[/]: {failure.code}: {escape(failure.message)}")


def _store(results_store: store_mod.ResultStore, identity: dict[str, str], report, address: str) -> str | None:
    """The fact as one store entry; its key, or None where another sweep into this store stored it first."""
    key = fact_key(identity)
    row = {**identity, "forward_flops": float(report.forward_flops), "parameter_count": int(report.parameter_count),
           "flops_method": report.flops_method}
    manifest = {"address": address, "build_time_s": report.build_time_s, "inspected_at_unix_s": time.time(),
                "output_shape": list(report.output_shape)}
    try:
        results_store.append(key, {FRAME: identity}, {FRAME: pd.DataFrame([row])}, manifest)
    except ValueError:
        if not results_store.has(key):
            raise
        return None
    return key
