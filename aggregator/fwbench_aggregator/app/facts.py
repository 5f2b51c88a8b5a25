"""Each model's FLOP count as the runner that ran it counts it, stored once per identity: with it a report turns
step times into achieved FLOP/s. Asked of the runners while they are still up, after the runs."""

from __future__ import annotations

import time
from collections.abc import Mapping

import pandas as pd

from ..base.progress import Progress
from ..plan.keys import config_key
from ..run.connection import Transport
from ..run.inspect import Inspected, inspect_models
from ..store.results_store import ResultStore
from ..store.schema import MODEL_FACT_IDENTITY, MODEL_FACTS_COLUMNS, MODEL_FACTS_FRAME


def fact_key(identity: Mapping[str, str]) -> str:
    # Content-addressed: a FLOP count is a fact of its identity (runner, framework version, model, options, shape),
    # the same wherever it is counted, so one entry per identity is right, and a store add skips an identical one.
    return config_key({MODEL_FACTS_FRAME: {name: identity[name] for name in MODEL_FACT_IDENTITY}})


def missing_facts(summary: pd.DataFrame, results_store: ResultStore) -> list[dict[str, str]]:
    """The distinct identities of the summary's successful runs that the store holds no fact for."""
    ran = summary[summary["status"] == "ok"] if "status" in summary else summary.iloc[0:0]
    if ran.empty:
        return []  # failed runs' rows may lack the identity's columns
    ran = ran[list(MODEL_FACT_IDENTITY)].fillna("").astype(str).drop_duplicates()
    return [identity for identity in ran.to_dict("records") if not results_store.has(fact_key(identity))]


def record_model_facts(
    endpoints: Mapping[str, str],
    transport: Transport,
    results_store: ResultStore,
    summary: pd.DataFrame,
    progress: Progress = Progress(),
) -> list[str]:
    """Inspect each model of the summary's successful runs that the store has no fact for, on the runner that ran
    it, and store the fact; returns the keys stored."""
    wanted: dict[str, list[dict[str, str]]] = {}
    for identity in missing_facts(summary, results_store):
        wanted.setdefault(identity["runner"], []).append(identity)
    return [
        key
        for inspected in inspect_models(endpoints, transport, wanted, progress)
        if (key := _store(results_store, inspected))
    ]


def _store(results_store: ResultStore, inspected: Inspected) -> str | None:
    """The fact as one store entry; its key, or None where another study into this store stored it first."""
    identity, report = inspected.identity, inspected.report
    key = fact_key(identity)
    row = {
        **identity,
        "forward_flops": float(report.forward_flops),
        "parameter_count": int(report.parameter_count),
        "flops_method": report.flops_method,
    }
    manifest = {
        "address": inspected.address,
        "build_time_s": report.build_time_s,
        "inspected_at_unix_s": time.time(),
        "output_shape": list(report.output_shape),
    }
    try:
        results_store.append(
            key,
            {MODEL_FACTS_FRAME: identity},
            {MODEL_FACTS_FRAME: pd.DataFrame([row], columns=MODEL_FACTS_COLUMNS)},
            manifest,
        )
    except ValueError:
        if not results_store.has(key):
            raise
        return None
    return key
