"""fwbench slurm: a study on a Slurm cluster; and the job's hidden commands, run inside the allocation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..app.slurm import SlurmRequest, run_job, submit
from ..plan import spec as plan
from ..present import listings
from ..present.health import print_left_out
from ..present.report import print_report
from ..run import jobs
from ..run import slurm as slurm_run
from . import app
from .common import run
from .path_option_types import parse_store
from .progress import TerminalProgress
from .runner_option_types import VenvsOption
from .serving_option_types import LatencyBudgetOption


@app.command("slurm")
def slurm_command(
    file: Annotated[Path, typer.Argument(help="the study: a sweep file (YAML)")],
    store: Annotated[
        Path, typer.Option(callback=parse_store, help="the results store, on the file system every node shares")
    ] = Path("results/store"),
    nodes: Annotated[int, typer.Option(min=1, max=plan.MAX_NODES, help="nodes to allocate")] = 1,
    partition: Annotated[str | None, typer.Option(help="Slurm partition (default: the cluster's)")] = None,
    account: Annotated[str | None, typer.Option(help="Slurm account to charge")] = None,
    time_limit: Annotated[
        str | None, typer.Option("--time", help="the job's time limit, as sbatch takes it: 30, 4:00:00, 1-12")
    ] = None,
    gpus_per_node: Annotated[
        int, typer.Option(min=0, max=64, help="GPUs to allocate on each node (0: a CPU study)")
    ] = 0,
    runner_per_gpu: Annotated[
        bool | None,
        typer.Option(
            "--runner-per-gpu/--runner-per-node",
            help="start each framework's runner once per GPU (each its own place for the study's runs) or once per node "
            "(all its GPUs). Default: per GPU, unless a run spans several devices or nodes",
        ),
    ] = None,
    exclusive: Annotated[
        bool,
        typer.Option(
            "--exclusive/--shared-nodes", help="the nodes to this job alone (default), or shared with other jobs"
        ),
    ] = True,
    sbatch_option: Annotated[
        list[str], typer.Option(help="a further sbatch option, e.g. --sbatch-option=--qos=long; repeat for each")
    ] = [],  # noqa: B006 - typer's default for a repeatable option; it makes a new list for each call
    resume: Annotated[bool, typer.Option(help="run only what the store does not hold yet")] = False,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="wait for the job to end, and exit with its status")
    ] = False,
    rendezvous_port: Annotated[
        int, typer.Option(min=1, max=65535, help="first rendezvous port of a run across nodes (node i uses PORT + i)")
    ] = jobs.DEFAULT_RENDEZVOUS_PORT,
    report: Annotated[bool, typer.Option(help="write the HTML report from the store when the study ends")] = True,
    latency_budget_ms: LatencyBudgetOption = None,
    venvs: VenvsOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="write the batch script and show it; submit nothing")
    ] = False,
) -> None:
    """Run a study on a Slurm cluster: one job of NODES nodes, each node's runners started by srun.

    The study's runs are spread over the nodes, every run stored the moment it completes. A node that fails ends its
    run in flight (named, and left for --resume); the study goes on with the others.
    """
    options = slurm_run.SlurmOptions(
        nodes, partition, account, time_limit, gpus_per_node, exclusive, tuple(sbatch_option)
    )
    request = SlurmRequest(
        study_file=file,
        store=store,
        options=options,
        runner_per_gpu=runner_per_gpu,
        resume=resume,
        report=report,
        latency_budget_ms=latency_budget_ms,
        venvs=venvs,
        rendezvous_port=rendezvous_port,
        dry_run=dry_run,
    )
    submitted = run(lambda progress: submit(request))
    listings.print_submitted(submitted, dry_run)
    if dry_run or not wait or not submitted.job_id:
        return
    status, ended = slurm_run.wait_for(submitted.folder, submitted.job_id)
    record = slurm_run.record_of(submitted.folder, submitted.job_id)
    listings.print_job_record(json.loads(record.read_text()) if record else None, ended)
    if status:
        raise typer.Exit(status)


@app.command("slurm-job", hidden=True)
def slurm_job(folder: Annotated[Path, typer.Argument(help="the submission folder fwbench slurm wrote")]) -> None:
    """Inside the allocation (the batch script): the runners on every node, then the study."""
    with TerminalProgress() as progress:
        result = run_job(folder, progress)
    if result.report is not None:
        print_report(result.report.analysis, result.report.path)
        print_left_out(result.report.left_out)
    for failure in result.failures:
        listings.print_failure(failure)
    raise typer.Exit(result.status)


@app.command("slurm-node", hidden=True)
def slurm_node(run_dir: Annotated[Path, typer.Argument(help="the job's folder")]) -> None:
    """On one node (an srun step): its runners, until the job ends."""
    raise typer.Exit(slurm_run.serve_node(run_dir))
