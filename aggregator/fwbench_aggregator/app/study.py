"""A study (fwbench sweep): a grid of configurations checked on every runner first, then run one at a time per
device, each run stored the moment it completes, resumable from the store; then the report over the store. Under
repetitions auto each point stops once its verdict is settled or its share of the time budget is spent
(app.sweep_rounds)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..base.progress import Progress
from ..plan.keys import new_run_id
from ..plan.spec import StartupSettings
from ..plan.study import Configuration, Sweep
from ..run import jobs, wire
from ..run.client import RunnerClient, RunnerFailure, RunResult
from ..run.connection import Transport
from ..run.gate import Gate
from ..run.study import StoreFailure, StoreRun, run_sweep
from ..store import records
from ..store.config_keys import runs_by_config, unread_runs_of
from ..store.lock import StoreBusy, store_lock
from ..store.migrations import CONFIG_KEY
from ..store.results_store import AlreadyStored, ResultStore
from . import preflight
from .best import DEFAULT_SEARCH_REPETITIONS
from .best_study import choose_best_settings
from .errors import UsageError
from .facts import record_model_facts
from .report import REPORT_FOLDER, ReportResult, store_report
from .runners import RunnerChoice, runners_for
from .sweep_rounds import PointOutcome, looks_for

# (key, configuration): for a run to do, its configuration's key (plan.study.Configuration.config_key); for a stored
# run, its id (each stored run of the configuration once).
Pending = list[tuple[str, Configuration]]


@dataclass(frozen=True, kw_only=True)  # built from keywords: a new option is one more keyword
class StudyRequest:
    sweep: Sweep
    runners: RunnerChoice
    store: Path = Path("results/store")
    resume: bool = False
    report: bool = True
    latency_budget_ms: float | None = None
    allow_different_models: bool = False  # a plug-in whose runners build different parameter counts
    search_repetitions: int = DEFAULT_SEARCH_REPETITIONS  # the best profile's runs per candidate setting
    wait_for_quiet_s: float = 0.0  # before each run, wait up to this long for a quiet host (run.gate)


@dataclass
class StudyResult:
    store: Path
    to_do: int = 0
    done_before: int = 0
    failures: list[RunnerFailure] = field(default_factory=list)
    # Runs that ran out of memory: stored as such (a report's missing points), not failures of the study.
    out_of_memory: list[RunnerFailure] = field(default_factory=list)
    interrupted: KeyboardInterrupt | None = None
    stored: int = 0  # runs of this study's configurations the store holds once it ends
    stored_now: int = 0  # of them, those this sitting stored
    store_runs: int = 0  # runs the whole store holds (other studies' and compares' too)
    report: ReportResult | None = None
    auto: bool = False  # repetitions auto: to_do is the most the points may take
    unresolved: list[PointOutcome] = field(default_factory=list)  # under auto: the points left unsettled, and why


def pending_runs(
    configurations: Sequence[Configuration], results_store: ResultStore, startup: StartupSettings
) -> tuple[Pending, Pending]:
    """(configuration key, configuration) of the runs still to do, and (run id, configuration) of those the store
    already holds: found by the configuration key each run recorded, never by an id (a run's id is its own)."""
    stored = runs_by_config(results_store, (c.config_key(startup) for c in configurations))
    pending, done = [], []
    for c in configurations:
        key = c.config_key(startup)
        if key in stored:
            done += [(run_id, c) for run_id in stored[key]]
        else:
            pending.append((key, c))
    return pending, done


def own_run_ids(
    results_store: ResultStore, configurations: Sequence[Configuration], startup: StartupSettings
) -> set[str]:
    """The ids of the runs the store holds for these configurations."""
    stored = runs_by_config(results_store, (c.config_key(startup) for c in configurations))
    return {run_id for c in configurations for run_id in stored.get(c.config_key(startup), [])}


def refuse_unless_resuming(done_before: Pending, store: Path, resume: bool) -> None:
    if done_before and not resume:
        _, c = done_before[0]
        raise UsageError(f"{store} already holds {c.runner} {c.model}; use --resume to skip what is done", "--store")


def set_aside_superseded(pending: Pending, results_store: ResultStore, progress: Progress = Progress()) -> None:
    """A pending run whose configuration has a damaged entry (a file that cannot be read) or an old record (a refusal
    an older fwbench stored as a run) is rerun: the entry is moved aside first, never deleted, and a damaged one
    named."""
    taken = unread_runs_of(results_store, (key for key, _ in pending))
    damaged = [key for key in taken if results_store.damage(key)]
    if damaged:
        files = "".join(f"\n  {d.path}: {d.reason}" for key in damaged for d in results_store.damage(key))
        folder = results_store.set_damaged_aside(damaged)
        progress.note(f"{len(damaged)} damaged run(s) run again; their files are kept in {folder}:{files}", "warning")
    for key in taken:
        if key not in damaged:
            results_store.set_aside(key, "an older fwbench stored a refused request as a run; rerun by a resume")


def check_study(
    pending: Pending, endpoints: dict[str, str], transport: Transport, startup: StartupSettings
) -> list[RunnerFailure]:
    """Every distinct request of the study asked of its runner before anything runs (preflight.checked); a refused
    one refuses the study, naming each configuration's problem."""
    requests: dict[tuple[str, bytes], tuple[str, wire.Request]] = {}
    for _, c in pending:
        if c.runner in endpoints:
            request = wire.to_request(c.run_spec(startup))
            requests.setdefault((c.runner, request.SerializeToString(deterministic=True)), (c.runner, request))
    _, failures = preflight.check_all(endpoints, transport, list(requests.values()), "the study")
    return failures


def check_same_networks(
    pending: Pending, endpoints: dict[str, str], transport: Transport, startup: StartupSettings, allow_different: bool
) -> None:
    """preflight.same_network for every model, shape and options of the study that more than one runner runs."""
    points: dict[tuple, dict[str, wire.Request]] = {}
    for _, c in pending:
        if c.runner in endpoints:
            request = wire.to_request(c.run_spec(startup))
            point = (request.model, tuple(request.input_shape), tuple(sorted(request.model_options.items())))
            points.setdefault(point, {}).setdefault(c.runner, request)
    for requests in points.values():
        if len(requests) > 1:
            preflight.same_network(endpoints, transport, requests, allow_different)


def refuse_changed_plugins(
    endpoints: dict[str, str], transport: Transport, results_store: ResultStore, done_before: Pending
) -> None:
    """A resume whose plug-in models changed since the store's runs of them (another content hash) is refused: the
    runs of two versions of a model would be pooled into one verdict."""
    stored = stored_summaries(results_store, [key for key, _ in done_before])
    if stored.empty or "model_hash" not in stored:
        return
    stored = stored[stored["model_hash"].fillna("") != ""]
    for name, address in endpoints.items():
        with RunnerClient(name, jobs.addresses_of(address)[0], transport) as client:
            now = {m.name: m.content_hash for m in client.list_models() if m.source_folder}
        mine = stored[stored["runner"] == name]
        for model, then in mine.groupby("model")["model_hash"]:
            changed = sorted(set(then) - {now.get(model)})
            if changed:
                raise UsageError(
                    f"plug-in {model} changed since this store's runs of it on {name} ({changed[0][:19]} then, "
                    f"{(now.get(model) or 'none')[:19]} now): a resume would pool two versions of the model; restore "
                    "the plug-in, or run the study into a new --store",
                    "--store",
                )


def store_callbacks(
    results_store: ResultStore, progress: Progress = Progress(), max_repetitions: int = 0
) -> tuple[StoreRun, StoreFailure]:
    """What a study's runs are stored with: a completed run's frames (with the budget of the sequential design it was
    made under, 0 for a fixed number of runs), or its running out of memory, each under a new id of its own with its
    configuration's key in its manifest (what a resume looks for). An id another writer stored first is said, the run
    kept in the store's duplicates/ (never lost)."""

    def said(write: Callable[[], None]) -> None:
        try:
            write()
        except AlreadyStored as taken:
            progress.note(str(taken), "warning")

    def store(key: str, c: Configuration, run: RunResult, sent: wire.Request, context: dict) -> None:
        said(
            lambda: records.store_result(
                results_store,
                new_run_id(),
                c.key_fields(),
                run,
                sent,
                {**context, CONFIG_KEY: key},
                max_repetitions=max_repetitions,
            )
        )

    def store_failure(key: str, c: Configuration, failure: RunnerFailure, columns: dict, context: dict) -> None:
        said(
            lambda: records.store_out_of_memory(
                results_store, new_run_id(), c.key_fields(), failure, columns, {**context, CONFIG_KEY: key}
            )
        )

    return store, store_failure


def stored_summaries(results_store: ResultStore, keys: Iterable[str]):
    return results_store.load("summary", keys)


def study(request: StudyRequest, progress: Progress = Progress()) -> StudyResult:
    """Run every pending run of the study into the store (a UsageError where the store holds runs of it and this is
    no resume, a runner refuses part of it, or another sweep is writing the store); then count the models' FLOPs and
    write the report. The store's writer lock is held throughout (store.lock), taken once the runners' settings are
    known to be usable, so that a refused study leaves nothing behind."""
    request.runners.startup(StartupSettings(models_dirs=request.sweep.models_dirs))
    try:
        with store_lock(request.store, progress):
            return _study(request, progress)
    except StoreBusy as busy:
        raise UsageError(str(busy), "--store") from None


def _study(request: StudyRequest, progress: Progress) -> StudyResult:
    results_store = ResultStore(request.store)
    results_store.clean_partials()
    startup = StartupSettings(models_dirs=request.sweep.models_dirs)
    configurations = request.sweep.configurations()
    pending, done_before = pending_runs(configurations, results_store, startup)
    refuse_unless_resuming(done_before, request.store, request.resume)
    result = StudyResult(request.store, len(pending), len(done_before), auto=request.sweep.auto)
    up_to = "up to " if request.sweep.auto else ""
    progress.note(f"{up_to}{len(pending)} runs to do, {len(done_before)} already in {request.store}")
    if pending:
        names = ",".join(sorted({c.runner for _, c in pending}))
        choice = replace(request.runners, frameworks=names)
        with runners_for(choice, progress, startup, request.store / "logs") as runners:
            result.failures += runners.failures
            result.failures += check_study(pending, runners.endpoints, runners.transport, startup)
            reachable = {
                name: address
                for name, address in runners.endpoints.items()
                if name not in {f.runner for f in result.failures}
            }
            check_same_networks(pending, reachable, runners.transport, startup, request.allow_different_models)
            refuse_changed_plugins(reachable, runners.transport, results_store, done_before)
            set_aside_superseded(pending, results_store, progress)
            pending, unsearched = choose_best_settings(
                pending,
                done_before,
                results_store,
                reachable,
                runners.transport,
                startup,
                request.search_repetitions,
                progress,
            )
            result.failures += unsearched
            looks = looks_for(request.sweep, pending, done_before, results_store, list(reachable))
            failures, result.interrupted = run_sweep(
                pending,
                reachable,
                runners.transport,
                startup,
                *store_callbacks(results_store, progress, request.sweep.design_budget),
                request.sweep.cooldown_s,
                progress,
                gate=Gate(request.wait_for_quiet_s),
                looks=looks,
            )
            if looks is not None and result.interrupted is None:
                result.unresolved = looks.unresolved()
            result.out_of_memory = [f for f in failures if f.out_of_memory]
            result.failures += [f for f in failures if not f.out_of_memory]
            if result.interrupted is None:
                # The whole study's runs: those a killed study completed have no FLOP counts yet.
                ran = stored_summaries(results_store, own_run_ids(results_store, configurations, startup))
                record_model_facts(reachable, runners.transport, results_store, ran, progress)
    result.stored = len(own_run_ids(results_store, configurations, startup))
    result.stored_now = result.stored - len(done_before)
    result.store_runs = len(results_store.run_keys())
    if request.report and result.store_runs and result.interrupted is None:
        result.report = store_report(
            results_store,
            request.store / REPORT_FOLDER,
            request.latency_budget_ms,
            not_run=[p.label for p in result.unresolved if p.runs == 0],
        )
    return result
