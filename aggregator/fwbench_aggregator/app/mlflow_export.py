"""fwbench export mlflow: a store's comparisons into an MLflow tracking store (a folder here, or a server), where users
of experiment trackers keep their results.

Each comparison (a configuration and the runners judged together in one block of alike runs) becomes one MLflow run:
its configuration and settings as parameters, each runner's figures as metrics, the verdicts as tags, its table as an
artifact. The export's report (report.html and its files) goes on a parent run the comparisons are nested under. A
comparison is known by the runs it pooled: exporting again adds only comparisons MLflow does not hold yet.

MLflow is an optional extra (`pip install 'fwbench-aggregator[mlflow]'`), imported only here and only when asked."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pandas as pd

from ..analyse.alike import keyed, labelled
from ..analyse.comparison import with_status
from ..analyse.generation import TIME_TO_FIRST_TOKEN
from ..base.write_paths import write_path_problem
from ..present.titles import configuration_title
from ..store.results_store import ResultStore
from ..store.run_columns import CONFIG_COLUMNS
from ..store.selection import Selection
from .errors import UsageError
from .report import store_report

EXPERIMENT = "fwbench"
COMPARISON_TAG = (
    "fwbench.comparison"  # the comparison's identity (comparison_ids): what makes a second export add nothing
)
EXPORT_TAG = "fwbench.export"  # on the parent run of one export: the store it came from
INSTALL = "pip install 'fwbench-aggregator[mlflow]' (MLflow's client, with SQLite support for a local folder)"
LOCAL_DATABASE = "mlflow.db"  # a local folder's tracking database; its artifacts go beside it
ARTIFACTS = "artifacts"
# A runner's settings, as parameters: what sets its runs apart when comparisons are read side by side in MLflow.
SETTINGS = (
    "framework",
    "framework_version",
    "container_image",
    "device_name",
    "layout",
    "compilation",
    "cudnn_autotune",
    "tf32",
    "intra_op_threads",
    "inter_op_threads",
    "strategy",
    "model_hash",
)
# A runner's figures, as metrics.
FIGURES = (
    "runs",
    "failed_runs",
    "median_step_ms",
    "p5_step_ms",
    "p95_step_ms",
    "run_spread",
    "ms_per_sample",
    "throughput_samples_per_s",
    "energy_per_sample_j",
    "mean_power_w",
    "ratio_to_fastest",
    "ratio_ci_low",
    "ratio_ci_high",
    "p_value",
    "resolvable",
    "noise_floor",
)
# MLflow's keys take letters, digits and _ - . space /: a runner's label ("torch (version 2.15.0)") is cut to those.
_KEY_CHARACTERS = re.compile(r"[^\w\-. /]+")


@dataclass(frozen=True)
class Exported:
    tracking_uri: str
    experiment: str
    added: int  # comparisons written as new MLflow runs
    skipped: int  # comparisons MLflow held already (exported before)
    parent_run_id: str | None  # the run holding this export's report; None where nothing was added


def _checked(path: Path, want: str) -> None:
    problem = write_path_problem(path, want, why_not_there="fwbench writes nothing there")
    if problem:
        raise UsageError(
            f"{problem}; give a folder (an MLflow store is made in it) or a tracking URI such as "
            "http://host:5000 or sqlite:///path/mlflow.db",
            "--tracking-uri",
        )


def _local_target(uri: str) -> tuple[Path, str] | None:
    """What a local tracking URI writes: an SQLite URI's database file, a file: URI's folder; None for a server's."""
    parts = urlsplit(uri)
    if parts.scheme == "sqlite" and parts.path not in ("", "/", "/:memory:"):
        return Path(unquote(parts.path.removeprefix("/"))), "file"  # sqlite:///relative, sqlite:////absolute
    if parts.scheme == "file":
        return Path(unquote(parts.path)), "folder"
    return None


def tracking_uri_of(target: str) -> tuple[str, str | None]:
    """The tracking URI MLflow is given, and the artifact location of a new experiment: a URI with a scheme
    (http://, https://, sqlite:///, databricks, file:) as written, with MLflow's own artifact location; a folder as
    an SQLite database in it, its artifacts beside it (MLflow 3 keeps new local stores in SQLite). What a local one
    writes is checked by the rule for every path fwbench writes (base.write_paths) before anything is written."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not re.match(r"^[a-zA-Z]:[\\/]", target):
        local = _local_target(target)
        if local:
            _checked(*local)
        return target, None
    folder = Path(target).expanduser()
    for path, want in ((folder, "folder"), (folder / LOCAL_DATABASE, "file"), (folder / ARTIFACTS, "folder")):
        _checked(path, want)
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / LOCAL_DATABASE}", (folder / ARTIFACTS).as_uri()


def comparison_ids(summary: pd.DataFrame) -> dict[tuple, str]:
    """Each comparison's identity, by (configuration values..., group): a hash of its configuration, its block and the
    run ids it pooled under each runner label (alike.labelled, as comparison_rows pools them)."""
    runs = labelled(keyed(with_status(summary)), CONFIG_COLUMNS)
    runs = runs[runs["status"] == "ok"]
    ids = {}
    for key, block in runs.groupby([*CONFIG_COLUMNS, "group"], sort=False):
        pooled = sorted(zip(block["label"], block["run_id"].astype(str), block["repetition"].astype(int)))
        text = json.dumps([[str(v) for v in key], pooled], sort_keys=True)
        ids[tuple(str(v) for v in key)] = hashlib.sha256(text.encode()).hexdigest()[:20]
    return ids


def _key(text: str) -> str:
    return _KEY_CHARACTERS.sub("_", str(text)).strip("_ ") or "runner"


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _generation_record(generation: pd.DataFrame) -> tuple[dict, dict]:
    """A generation comparison's figures per runner as metrics (time to first token, decode per token and tokens per
    second), their verdicts as tags."""
    metrics, tags = {}, {}
    for row in generation.to_dict("records"):
        name, figure = _key(row["runner"]), "ttft" if row["figure"] == TIME_TO_FIRST_TOKEN else "decode"
        values = {f"{figure}_ms": row["value_ms"], f"{figure}_ratio_to_fastest": row["ratio_to_fastest"]}
        if figure == "decode":
            values["decode_tokens_per_s"] = row["decode_tokens_per_s"]
        metrics.update({f"{name}.{k}": n for k, v in values.items() if (n := _number(v)) is not None})
        tags[f"fwbench.verdict.{figure}.{name}"] = str(row["verdict"])
    return metrics, tags


def comparison_record(rows: pd.DataFrame, generation: pd.DataFrame | None = None) -> dict:
    """One comparison's rows (one per runner) as an MLflow run's name, parameters, metrics and tags; in mode generate
    with its generation rows' figures too."""
    first = rows.iloc[0]
    params = {column: str(first[column]) for column in CONFIG_COLUMNS if str(first[column]) not in ("", "nan")}
    if first["group"]:
        params["block"] = str(first["group"])
    params["runners"] = ", ".join(rows["runner"])
    metrics, tags = {}, {}
    for row in rows.to_dict("records"):
        name = _key(row["runner"])
        params.update(
            {f"{name}.{c}": str(row[c]) for c in SETTINGS if c in row and str(row[c]) not in ("", "nan", "None")}
        )
        metrics.update({f"{name}.{c}": v for c in FIGURES if c in row and (v := _number(row[c])) is not None})
        tags[f"fwbench.verdict.{name}"] = str(row["verdict"])
        tags[f"fwbench.status.{name}"] = str(row["status"])
    fastest = rows[rows["ratio_to_fastest"] == 1.0]["runner"] if "ratio_to_fastest" in rows else []
    if len(fastest):
        tags["fwbench.fastest"] = str(fastest.iloc[0])
    if generation is not None and len(generation):
        more_metrics, more_tags = _generation_record(generation)
        metrics.update(more_metrics)
        tags.update(more_tags)
    return {"name": configuration_title(first), "params": params, "metrics": metrics, "tags": tags}


def _client(tracking_uri: str):
    try:
        from mlflow import MlflowClient
    except ImportError:
        raise UsageError(
            f"MLflow is not installed in this environment; install it with: {INSTALL}", "export mlflow"
        ) from None
    # MLflow logs its database set-up at INFO: lines that would interleave with fwbench's own.
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    return MlflowClient(tracking_uri=tracking_uri)


def _experiment_id(client, name: str, artifact_location: str | None) -> str:
    found = client.get_experiment_by_name(name)
    return found.experiment_id if found else client.create_experiment(name, artifact_location=artifact_location)


def _exported_ids(client, experiment_id: str) -> set[str]:
    """The comparison ids the experiment's runs carry, every page of them."""
    ids, token = set(), None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        ids |= {run.data.tags[COMPARISON_TAG] for run in page if COMPARISON_TAG in run.data.tags}
        token = page.token
        if not token:
            return ids


def export_mlflow(
    store: Path, target: str, experiment: str = EXPERIMENT, selection: Selection = Selection()
) -> Exported:
    """Every comparison of the store (or of the runs `selection` chooses) that the experiment lacks, as MLflow runs
    nested under one run holding this export's report."""
    results_store = ResultStore(store)
    if not results_store.run_keys():
        raise UsageError(f"{store} holds no readable runs", "--store")
    tracking_uri, artifact_location = tracking_uri_of(target)
    client = _client(tracking_uri)
    try:
        experiment_id = _experiment_id(client, experiment, artifact_location)
        done = _exported_ids(client, experiment_id)
    except Exception as exc:  # MLflow raises its own errors and the transport's: each names the store it could not use
        raise UsageError(f"MLflow could not open {tracking_uri}: {exc}", "--tracking-uri") from None
    with tempfile.TemporaryDirectory(prefix="fwbench-mlflow-") as folder:
        report = store_report(results_store, Path(folder) / "report", selection=selection)
        rows = report.analysis.rows
        ids = comparison_ids(report.summary)
        blocks = [
            (ids.get(tuple(str(v) for v in key)), block)
            for key, block in rows.groupby([*CONFIG_COLUMNS, "group"], sort=False)
        ]
        new = [(comparison_id, block) for comparison_id, block in blocks if comparison_id and comparison_id not in done]
        if not new:
            return Exported(tracking_uri, experiment, 0, len(blocks), None)
        parent = client.create_run(
            experiment_id,
            run_name=f"fwbench export {datetime.now(UTC):%Y-%m-%d %H:%M UTC}",
            tags={EXPORT_TAG: str(store.resolve())},
        )
        client.log_artifacts(parent.info.run_id, str(report.path.parent), "report")
        for comparison_id, block in new:
            generation = _generation_of(report.analysis.generation, block)
            _log_comparison(client, experiment_id, parent.info.run_id, comparison_id, block, generation, Path(folder))
        client.set_terminated(parent.info.run_id)
    return Exported(tracking_uri, experiment, len(new), len(blocks) - len(new), parent.info.run_id)


def _generation_of(generation: pd.DataFrame, block: pd.DataFrame) -> pd.DataFrame:
    """The generation rows of one comparison (its configuration and block); empty outside mode generate."""
    if generation.empty:
        return generation
    key = [*CONFIG_COLUMNS, "group"]
    return generation.merge(block[key].drop_duplicates(), on=key)


def _log_comparison(
    client,
    experiment_id: str,
    parent_id: str,
    comparison_id: str,
    rows: pd.DataFrame,
    generation: pd.DataFrame,
    folder: Path,
) -> None:
    from mlflow.entities import Metric, Param

    record = comparison_record(rows, generation)
    tags = {**record["tags"], COMPARISON_TAG: comparison_id, "mlflow.parentRunId": parent_id}
    run = client.create_run(experiment_id, run_name=record["name"], tags=tags)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    client.log_batch(
        run.info.run_id,
        metrics=[Metric(k, v, now_ms, 0) for k, v in record["metrics"].items()],
        params=[Param(k, v[:6000]) for k, v in record["params"].items()],
    )
    table = folder / comparison_id / "comparison.csv"
    table.parent.mkdir(parents=True)
    rows.to_csv(table, index=False)
    client.log_artifact(run.info.run_id, str(table))
    if len(generation):
        generation.to_csv(table.with_name("generation.csv"), index=False)
        client.log_artifact(run.info.run_id, str(table.with_name("generation.csv")))
    client.set_terminated(run.info.run_id)
