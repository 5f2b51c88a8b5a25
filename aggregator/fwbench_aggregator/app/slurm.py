"""A study on a Slurm cluster: submitting it (fwbench slurm), and the job's own body in the allocation (fwbench
slurm-job): runners on every node, the study over them into the shared store, the record of what happened."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..base.frameworks import names as framework_names
from ..base.progress import Progress
from ..plan.spec import StartupSettings
from ..plan.study_file import load_sweep
from ..run import slurm as slurm_run
from ..run.client import RunnerFailure
from ..run.connection import Transport
from ..run.launch import RunnerStartError, default_venvs, embedded_command, wait_until_serving
from ..run.study import Pool, Slot, run_sweep_on_pool
from ..store.config_keys import runs_by_config
from ..store.location import StorePathError
from ..store.lock import StoreBusy, store_lock
from ..store.results_store import ResultStore
from .errors import UsageError
from .facts import record_model_facts
from .report import REPORT_FOLDER, ReportResult, store_report
from .study import (
    check_study,
    own_run_ids,
    pending_runs,
    refuse_unless_resuming,
    set_aside_superseded,
    store_callbacks,
    stored_summaries,
)
from .sweep_rounds import looks_for


@dataclass(frozen=True, kw_only=True)  # built from keywords: a new option is one more keyword
class SlurmRequest:
    study_file: Path
    store: Path
    options: slurm_run.SlurmOptions
    runner_per_gpu: bool | None = None  # None: per GPU unless a run spans several devices or nodes
    resume: bool = False
    report: bool = True
    latency_budget_ms: float | None = None
    venvs: Path | None = None
    rendezvous_port: int = 29500
    dry_run: bool = False


@dataclass
class Submitted:
    folder: Path  # the submission folder: job.sh, study.yaml, submission.json, token
    to_do: int
    done_before: int
    job_id: str = ""  # "" for a dry run, or where nothing was left to do


def _whole_node_runs(configurations) -> bool:
    """A runner per GPU sees one GPU, its gpu:0: runs across devices or nodes, or on a named GPU, need one per node."""
    return any(
        c.devices or c.nodes > 1 or (c.device or "gpu").split(":")[-1] not in ("gpu", "cpu", "0")
        for c in configurations
    )


def submit(request: SlurmRequest) -> Submitted:
    """Check the study and the environments, write the submission folder and, unless a dry run, sbatch it."""
    study = load_sweep(request.study_file, framework_names())  # the runners a node can start: the declared frameworks
    configurations = study.configurations()
    if any(c.profile is not None and c.profile.value == "best" for c in configurations):
        # The search runs on one node's runners before the study's runs; the job spreads runs over its nodes.
        raise UsageError(
            "the best profile searches each runner's settings on one machine first: run it with "
            "fwbench sweep; fwbench slurm takes the equal and native profiles",
            "profiles",
        )
    widest = max(c.nodes for c in configurations)
    if widest > request.options.nodes:
        raise UsageError(
            f"the study's nodes reach {widest}, but the job asks for {request.options.nodes}: give "
            f"--nodes {widest} or more",
            "--nodes",
        )
    venvs = (request.venvs or default_venvs()).absolute()
    for name in study.runners:
        try:
            embedded_command(name, venvs)
        except RunnerStartError as error:
            raise UsageError(
                f"{error}; the environments must be on the file system every node shares", "--venvs"
            ) from None
    store = request.store.absolute()
    pending, done_before = pending_runs(
        configurations, ResultStore(store), StartupSettings(models_dirs=study.models_dirs)
    )
    refuse_unless_resuming(done_before, store, request.resume)
    if not pending:
        return Submitted(store, 0, len(done_before))
    whole = _whole_node_runs(configurations)
    if request.runner_per_gpu and whole:
        raise UsageError(
            "the study has runs across several devices or nodes, or on a named GPU: they need a runner "
            "that sees all of a node's GPUs; give --runner-per-node",
            "--runner-per-gpu",
        )
    per_gpu = (
        (request.options.gpus_per_node > 1 and not whole) if request.runner_per_gpu is None else request.runner_per_gpu
    )
    submission = slurm_run.Submission(
        store=str(store),
        frameworks=list(study.runners),
        venvs=str(venvs),
        slurm=asdict(request.options),
        runner_per_gpu=per_gpu,
        rendezvous_port=request.rendezvous_port,
        report=request.report,
        latency_budget_ms=request.latency_budget_ms,
        study_folder=str(Path(request.study_file).resolve().parent),
    )
    if not request.dry_run:
        try:
            slurm_run.command("sbatch")
        except slurm_run.SlurmError as error:
            raise UsageError(str(error), "Slurm") from None
    folder = slurm_run.prepare(request.study_file, store, request.options, submission)
    submitted = Submitted(folder, len(pending), len(done_before))
    if not request.dry_run:
        try:
            submitted.job_id = slurm_run.submit(folder)
        except slurm_run.SlurmError as error:
            raise UsageError(str(error), "Slurm") from None
    return submitted


@dataclass
class JobResult:
    status: int  # the job's exit status: 0 when every run is done (or ran out of memory), 1 when runs are left
    record: dict = field(default_factory=dict)  # job.json
    failures: list[RunnerFailure] = field(default_factory=list)
    report: ReportResult | None = None


def run_job(folder: Path, progress: Progress = Progress()) -> JobResult:
    """The batch script's body: runners on every node, the study over them, the store written under the store's
    writer lock (the batch node is the job's one writer; another sweep on the store waits or refuses it)."""
    submission = slurm_run.Submission.read(folder)
    try:
        with store_lock(Path(submission.store), progress):
            return _run_job(folder, submission, progress)
    except (StoreBusy, StorePathError) as refused:
        raise slurm_run.SlurmError(str(refused)) from None


def _run_job(folder: Path, submission: slurm_run.Submission, progress: Progress) -> JobResult:
    job_id = os.environ.get("SLURM_JOB_ID")
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not job_id or not nodelist:
        raise slurm_run.SlurmError(
            "fwbench slurm-job runs inside a Slurm allocation (sbatch job.sh); SLURM_JOB_ID is not set"
        )
    nodes = slurm_run.hostnames(nodelist)
    # A requeued job (pre-empted with --requeue) starts again under its id: each start gets a folder of its own,
    # so no node reads the last start's registrations or stop file, and resumes from the store by itself.
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    run_dir = folder / (f"job-{job_id}" + (f"-restart{restart}" if restart else ""))
    study = load_sweep(folder / "study.yaml", base=Path(submission.study_folder) if submission.study_folder else None)
    results_store = ResultStore(Path(submission.store))
    results_store.clean_partials()
    # The runners' start-up settings, the same on every node: the batch node's core count stands for the
    # allocation's (a run's key records them).
    startup = StartupSettings(models_dirs=study.models_dirs)
    pending, done_before = pending_runs(study.configurations(), results_store, startup)
    progress.note(
        f"Slurm job {job_id} on {', '.join(nodes)}: {len(pending)} runs to do, {len(done_before)} already "
        f"in {submission.store}"
    )
    result = JobResult(
        0,
        {
            "job_id": job_id,
            "nodes": nodes,
            "lost": {},
            "failures": [],
            "left": [],
            "runs_done_before": len(done_before),
        },
    )
    if not pending:
        slurm_run.write_record(run_dir, result.record)
        return result
    set_aside_superseded(pending, results_store, progress)
    result.status, interrupted = _run_on_nodes(
        folder, run_dir, submission, nodes, study, pending, done_before, results_store, startup, result, progress
    )
    if interrupted:
        result.status = 128 + signal.SIGTERM
        return result
    # A run's id is its own: the sweep's runs are found by configuration, its own configurations only (each found run
    # is checked against its checksums: all of a store's would cost a second a thousand runs)
    stored = runs_by_config(results_store, [key for key, _ in pending])
    undone = [key for key, _ in pending if key not in stored]
    if submission.report and results_store.run_keys():
        result.report = store_report(
            results_store, Path(submission.store) / REPORT_FOLDER, submission.latency_budget_ms
        )
    if undone:
        progress.note(f"{len(undone)} runs are not done: submit again with --resume to run them", "warning")
        result.status = 1
    return result


def _run_on_nodes(
    folder, run_dir, submission, nodes, study, pending, done_before, results_store, startup, result, progress
) -> tuple[int, bool]:
    """Start every node's runners (srun steps), run the study over them, stop them; the record written whatever
    happens. Returns the status so far and whether the job was interrupted."""
    record = result.record
    transport = Transport(token=(folder / "token").read_text().strip(), keepalive_s=slurm_run.KEEPALIVE_S)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "startup.json").write_text(json.dumps(asdict(startup)))
    steps = slurm_run.NodeSteps(run_dir, nodes, submission.slurm.get("gpus_per_node", 0))
    interrupted = None
    try:
        registered, missing = slurm_run.wait_for_nodes(steps, nodes)
        for node, why in missing.items():
            progress.note(f"node {node} is left out: {why}", "error")
        record["lost"].update(missing)
        slots = [
            Slot(slot["slot"], node, slot["endpoints"])
            for node in nodes
            if node in registered
            for slot in registered[node]["slots"]
        ]
        if not slots:
            record["left"] = [key for key, _ in pending]
            return 1, False
        try:
            check_study(pending, slots[0].endpoints, transport, startup)
        except UsageError as error:
            progress.note(str(error), "error")
            record["refused"] = str(error)
            record["left"] = [key for key, _ in pending]
            return 2, False

        def lost(node: str) -> str | None:
            if node in missing:
                return missing[node]
            if steps.ended(node) is not None:
                return f"its srun step ended (exit {steps.ended(node)}): the node failed or was pre-empted"
            for slot in (s for s in slots if s.node == node):
                for address in slot.endpoints.values():
                    try:
                        wait_until_serving(address, slurm_run.LIVENESS_TIMEOUT_S, transport)
                    except RunnerStartError:
                        return f"its runner at {address} does not answer"
            return None

        pool = Pool(
            slots,
            lost,
            slurm_run.job_context(job_id=record["job_id"], nodes=nodes, submission=submission),
            submission.rendezvous_port,
        )
        failures, left, interrupted = run_sweep_on_pool(
            pending,
            pool,
            transport,
            startup,
            *store_callbacks(results_store, progress, study.design_budget),
            study.cooldown_s,
            progress,
            looks=looks_for(study, pending, done_before, results_store),
        )
        result.failures = failures
        record["failures"] = [{"runner": f.runner, "code": f.code, "message": f.message} for f in failures]
        record["left"] = [key for key, _ in left]
        record["lost"].update({node: why for node in nodes if node not in record["lost"] and (why := lost(node))})
        if interrupted is None:
            live = next((s for s in slots if s.node not in record["lost"]), None)
            if live is not None:
                ran = stored_summaries(results_store, own_run_ids(results_store, study.configurations(), startup))
                record_model_facts(live.endpoints, transport, results_store, ran, progress)
    finally:
        steps.stop()
        slurm_run.write_record(run_dir, record)
    return 0, interrupted is not None
