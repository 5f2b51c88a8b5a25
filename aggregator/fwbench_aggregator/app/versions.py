"""Versions side by side (docs/versions.md): a study's version matrix brought up in containers and taken down, its
regressions confirmed by a second round, and the version report over any store.

A version's failure (a tag that does not exist, a build that fails, a runner that never answers) names its tag and
never stops the others: their runners still come up and run, and their results are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from ..analyse.versions import changes_between_versions, regressions_to_confirm, versioned
from ..base.progress import Progress
from ..base.vocabulary import Mode, Precision, Profile
from ..plan.study import Sweep
from ..plan.study_file import load_sweep
from ..plan.versions import VersionMatrix, load_versions
from ..present.versions import write_version_report
from ..run.client import RunnerFailure
from ..run.compose_versions import BUILD_TIMEOUT_S, Compose, base_image_digest, image_digest, output_tail, override_text
from ..store.results_store import ResultStore
from ..store.selection import Selection
from .errors import UsageError
from .report import CONFIRMATION_FOLDER, REPORT_FOLDER, selected_frames, stored_run_medians, version_tables
from .study import StudyRequest, study


def override_path(store: Path) -> Path:
    """Where `versions up` writes the Compose override: beside the store, named after it."""
    return store.parent / f"{store.name}.versions.compose.yaml"


def study_matrix(study_file: Path) -> VersionMatrix:
    """The sweep file's version matrix, the file checked whole first (a SweepError names every mistake)."""
    load_sweep(study_file)
    return load_versions(study_file)


def container_runners(matrix: VersionMatrix) -> list[str]:
    """--runner values that reach the matrix's containers on their published ports; none for embedded versions."""
    return [] if matrix.embedded else [v.runner_value for v in matrix.versions]


def with_tags(failures: list[RunnerFailure], matrix: VersionMatrix) -> list[RunnerFailure]:
    """Each failure of a version's runner, its message naming the version's image tag."""
    return [
        RunnerFailure(f.runner, f.code, f"image tag {matrix.tag_of(f.runner)}: {f.message}", f.reason)
        if matrix.tag_of(f.runner)
        else f
        for f in failures
    ]


@dataclass
class VersionsUp:
    override: Path
    runners: list[str] = field(default_factory=list)  # --runner values of the versions that came up
    failures: list[RunnerFailure] = field(default_factory=list)  # versions that did not, each naming its tag


def _compose(study_file: Path, store: Path, compose_file: Path, cpu: bool) -> tuple[VersionMatrix, Compose]:
    matrix = study_matrix(study_file)
    if not matrix.versions:
        raise UsageError(f"{study_file} has no versions field; give e.g. versions: {{torch: [TAG, TAG]}}", "STUDY")
    if matrix.embedded:
        raise UsageError(
            f"{study_file} runs its versions embedded (versions.embedded: true): fwbench sweep starts them "
            "from .venvs/FRAMEWORK@VERSION; there is no container to bring up",
            "STUDY",
        )
    if not compose_file.is_file():
        raise UsageError(f"{compose_file} is not a file; give the repository's compose.yaml", "--compose-file")
    path = override_path(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(override_text(matrix, str(study_file), str(path), cpu))
    return matrix, Compose((compose_file, path))


def versions_up(
    study_file: Path, store: Path, compose_file: Path, cpu: bool = False, progress: Progress = Progress()
) -> VersionsUp:
    """Write the Compose override, build each version's image (one failing names its tag, the others go on), record
    both digests of each in the override, and start every version that built, waiting until it is healthy."""
    matrix, compose = _compose(study_file, store, compose_file, cpu)
    result = VersionsUp(compose.files[1])
    config, refused = compose.config()
    if not config:
        raise UsageError(f"Compose refuses {compose.files[1]} over {compose_file}: {refused}", "--compose-file")
    digests, built = {}, []
    for version in matrix.versions:
        progress.note(f"building {version.label} from tag {version.tag}")
        done = compose.run("build", version.service, timeout_s=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            result.failures.append(
                RunnerFailure(
                    version.label,
                    "UNAVAILABLE",
                    f"image tag {version.tag}: building it failed (does the tag exist?): {output_tail(done)}",
                )
            )
            continue
        service = config["services"][version.service]
        digests[version.label] = (
            image_digest(service["image"]),
            base_image_digest(service["build"]["args"]["BASE_IMAGE"]),
        )
        built.append(version)
    compose.files[1].write_text(override_text(matrix, str(study_file), str(compose.files[1]), cpu, digests))
    if built:
        progress.note(f"starting {', '.join(v.label for v in built)}; waiting until healthy")
        together = compose.run("up", "-d", "--wait", *(v.service for v in built))
        for version in built:
            # All at once first; where that failed, each alone, so that the failure names its version.
            alone = together if together.returncode == 0 else compose.run("up", "-d", "--wait", version.service)
            if alone.returncode == 0:
                result.runners.append(version.runner_value)
            else:
                result.failures.append(
                    RunnerFailure(
                        version.label,
                        "UNAVAILABLE",
                        f"image tag {version.tag}: its runner did not come up healthy: {output_tail(alone)}",
                    )
                )
    return result


def versions_down(study_file: Path, store: Path, compose_file: Path, progress: Progress = Progress()) -> list[str]:
    """Stop and remove every version's runner container; the services removed."""
    matrix, compose = _compose(study_file, store, compose_file, cpu=False)
    services = [v.service for v in matrix.versions]
    progress.note(f"stopping and removing {', '.join(services)}")
    done = compose.run("rm", "--stop", "--force", *services)
    if done.returncode != 0:
        raise UsageError(f"Compose could not remove {', '.join(services)}: {output_tail(done)}", "STUDY")
    return services


def _first(runners: str) -> str:
    return runners.split(" | ")[0]


def narrowed(sweep: Sweep, row: dict) -> Sweep | None:
    """The study cut to one regression: its configuration, on the runners of its two versions; None where that cannot
    be run again as it was (one runner ran both versions, rebuilt in between; a run over several devices)."""
    runners = (_first(row["runners_from"]), _first(row["runners_to"]))
    if runners[0] == runners[1] or int(row["world_size"]) > 1 or int(row["nodes"]) > 1:
        return None
    model = row["model"]
    options = dict(pair.split("=", 1) for pair in str(row["model_options"]).split(";") if "=" in pair)
    return replace(
        sweep,
        models=(model,),
        runners=runners,
        modes=(Mode(row["mode"]),),
        batch_sizes=(int(row["batch_size"]),),
        shapes={model: (row["input_shape"] or None,)},
        precisions=(Precision(row["precision"]),),
        devices=(row["device"] or None,),
        options={model: options} if options else {},
        profiles=(None if row["profile"] in ("", "equal") else Profile(row["profile"]),),
        compilation={r: v for r, v in sweep.compilation.items() if r in runners},
        strategies={r: v for r, v in sweep.strategies.items() if r in runners},
    )


def confirm_regressions(request: StudyRequest, progress: Progress = Progress()) -> list[RunnerFailure]:
    """A confirmation round for every regression the study's runs call: fresh runs of both versions of its
    configuration, interleaved (A B, B A, ...), into the store's confirmation folder; the runners that failed."""
    results_store = ResultStore(request.store)
    summary = results_store.load("summary")
    runs = versioned(summary, stored_run_medians(results_store, summary))
    changes = changes_between_versions(runs, results_store.load("calibration"))
    failures: list[RunnerFailure] = []
    for row in regressions_to_confirm(changes):
        sweep = narrowed(request.sweep, row)
        if sweep is None:
            continue
        progress.note(
            f"confirming {row['framework']} {row['version_from']} → {row['version_to']} on {row['model']}: "
            "a second round of fresh runs of both versions, interleaved"
        )
        done = study(
            replace(request, sweep=sweep, store=request.store / CONFIRMATION_FOLDER, resume=True, report=False),
            progress,
        )
        failures += done.failures
        if done.interrupted is not None:
            raise done.interrupted
    return failures


@dataclass(frozen=True)
class VersionReport:
    changes: pd.DataFrame
    points: pd.DataFrame
    path: Path  # versions.html


def version_report(
    store: Path, out: Path | None = None, required: bool = True, selection: Selection = Selection()
) -> VersionReport | None:
    """Each version against the previous one over everything the store holds (a confirmation round's verdicts beside
    its regressions), written into `out` (default STORE/report). Where the store holds no two versions of a
    configuration: a UsageError where the report was asked for (`required`), else None."""
    results_store = ResultStore(store)
    if not results_store.run_keys() and required:
        raise UsageError(f"{store} holds no readable runs", "--store")
    summary = selected_frames(results_store, ("summary",), selection)["summary"]
    tables = version_tables(results_store, summary, stored_run_medians(results_store, summary))
    if tables is None:
        if not required:
            return None
        raise UsageError(
            f"{store} holds one version per framework and configuration; a version report needs runs of "
            "two versions of a configuration (a sweep with versions, or runs added after a new tag)",
            "--store",
        )
    return VersionReport(tables.changes, tables.points, write_version_report(tables, out or store / REPORT_FOLDER))
