"""Parity: evidence that the runners build the same networks as the first one, the reference: parameters, FLOPs,
output shapes and, where a runner can load the reference's weights, the same output for the same input. The weights
pass through the runners' reference folder: runners started here share a temporary one."""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import NamedTuple

import pandas as pd

from ..analyse.parity import judged
from ..base.progress import Progress
from ..base.suggest import did_you_mean
from ..plan.keys import config_key
from ..plan.spec import StartupSettings
from ..run.client import RunnerClient, RunnerFailure
from ..run.parity import gather
from ..store.results_store import ResultStore
from ..store.schema import PARITY_COLUMNS, PARITY_FRAME
from .errors import UsageError
from .runners import RunnerChoice, runners_for


class ParityTable(NamedTuple):
    reference: str
    other: str
    table: pd.DataFrame  # analyse.parity.judged
    only_reference: list[str]  # models the other runner does not build: not checked


@dataclass
class ParityResult:
    tables: list[ParityTable] = field(default_factory=list)
    path: Path | None = None  # parity.csv
    failures: list[RunnerFailure] = field(default_factory=list)

    @property
    def differ(self) -> bool:
        return any((t.table["verdict"] != "same").any() for t in self.tables if len(t.table))


def store_checks(results_store: ResultStore, tables: list[ParityTable], hashes: dict[str, str]) -> None:
    """Each checked variant as a row of the store's parity frame, so that a comparison or report of a plug-in says
    whether its runners were shown to build the same network (at the plug-in's hash)."""
    checked_at = time.time()
    for t in tables:
        for row in t.table.itertuples(index=False):
            model = row.model.split(" ", 1)[0]
            entry = {
                "model": model,
                "variant": row.model,
                "model_hash": hashes.get(model, ""),
                "reference_runner": t.reference,
                "runner": t.other,
                "verdict": row.verdict,
                "numeric": row.numeric,
                "checked_at_unix_s": checked_at,
            }
            # Content-addressed: the whole row (its time included) is the evidence, so the same row is the same entry.
            key = config_key({PARITY_FRAME: entry})
            results_store.append(
                key,
                {PARITY_FRAME: {k: entry[k] for k in ("model", "variant", "model_hash")}},
                {PARITY_FRAME: pd.DataFrame([entry], columns=PARITY_COLUMNS)},
                {},
            )


def check_generating(listed: list, models: list[str] | None, token_precision: str) -> None:
    """A lower token precision checks generating models: a UsageError where none of those asked for generates."""
    generating = [m.name for m in listed if m.generates]
    asked = models or [m.name for m in listed]
    others = [name for name in asked if name not in generating]
    if models and others or not generating:
        raise UsageError(
            f"--precision {token_precision} is the precision generating models' tokens are compared in, and "
            f"{', '.join(others) or 'no model listed'} does not generate; the models that do: "
            f"{', '.join(generating) or 'none'}",
            "--precision",
        )


def parity(
    runners: RunnerChoice,
    models: list[str] | None,
    out: Path,
    progress: Progress = Progress(),
    store: Path | None = None,
    token_precision: str = "",
) -> ParityResult:
    """Each other runner against the reference, over `models` (None: every model both list); with a lower
    `token_precision`, the generating models only, their greedy tokens generated in it (the outputs are still compared
    in fp32), each row saying where the tokens first diverge."""
    token_precision = "" if token_precision == "fp32" else token_precision
    reference_name, *other_names = runners.frameworks.split(",")
    if not other_names:
        raise UsageError(
            f"{runners.frameworks!r}: give the reference and at least one runner to check against it", "--frameworks"
        )
    result = ParityResult()
    run_dir = out / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-parity")
    with ExitStack() as stack:
        # Entered before the runners start, so that it is removed only after they stop.
        shared = StartupSettings(reference_dir=stack.enter_context(TemporaryDirectory(prefix="fwbench-references-")))
        found = stack.enter_context(runners_for(runners, progress, shared))
        result.failures += found.failures
        if reference_name not in found.endpoints:
            return result
        reference = stack.enter_context(RunnerClient(reference_name, found.endpoints[reference_name], found.transport))
        listed = reference.list_models()
        known = [m.name for m in listed]
        hashes = {m.name: m.content_hash for m in listed}
        unknown = sorted(set(models or []) - set(known))
        if unknown:
            hints = "".join(did_you_mean(name, known) for name in unknown)
            raise UsageError(
                f"unknown model(s) {', '.join(unknown)}{hints}; known models: {', '.join(known)}", "--models"
            )
        if token_precision:
            check_generating(listed, models, token_precision)
        for other_name in other_names:
            if other_name not in found.endpoints:
                continue
            other = stack.enter_context(RunnerClient(other_name, found.endpoints[other_name], found.transport))
            task = progress.add_task(f"checking parity with {other_name}")
            try:
                rows, only_reference = gather(
                    reference,
                    other,
                    models,
                    lambda v, task=task, other_name=other_name: progress.update(
                        task, description=f"checking {v.label} on {other_name}"
                    ),
                    token_precision,
                )
            except RunnerFailure as failure:
                result.failures.append(failure)
                continue
            finally:
                progress.remove_task(task)
            result.tables.append(
                ParityTable(reference_name, other_name, judged(rows, reference_name, other_name), only_reference)
            )
    if result.tables:
        if store is not None:
            store_checks(ResultStore(store), result.tables, hashes)
        run_dir.mkdir(parents=True, exist_ok=True)
        result.path = run_dir / "parity.csv"
        pd.concat([t.table.assign(other=t.other) for t in result.tables], ignore_index=True).to_csv(
            result.path, index=False
        )
    return result
