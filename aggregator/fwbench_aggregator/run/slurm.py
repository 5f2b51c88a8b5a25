"""Studies on a Slurm cluster, through Slurm's own command lines (sbatch, srun, scontrol).

`fwbench slurm` checks the study, writes a submission folder in the store (the batch script, a copy of the study,
the options, the runners' token) and submits the script with sbatch. In the allocation the script runs
`fwbench slurm-job` (app.slurm.run_job), which starts one srun step per node (`fwbench slurm-node`: that node's
runners, one per framework, or one per framework and GPU), waits until every node has registered its runners'
addresses in the job's folder, runs the study over the nodes (run.study.run_sweep_on_pool) into the store, and
stops the steps. The
store and the environments live on the cluster's shared file system, at the same path on every node.

    STORE/slurm/<submission>/job.sh, study.yaml, submission.json, token
    STORE/slurm/<submission>/slurm-<job id>.out            the job's output
    STORE/slurm/<submission>/job-<job id>/nodes/<node>.json each node's runners, as it registered them
    STORE/slurm/<submission>/job-<job id>/logs/             each node's step and runners
    STORE/slurm/<submission>/job-<job id>/job.json          the job: nodes, nodes lost, runs done, failed, left
    STORE/slurm/<submission>/job-<job id>-restart<n>/       the same for the n-th start of a requeued job
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ..plan.spec import StartupSettings
from .connection import RUNNER_ACCESS_ENVS, RUNNER_TOKEN_ENV, Transport
from .launch import START_TIMEOUT_S, LocalRunner, RunnerStartError, embedded_command
from .runners import stop_all

FOLDER = "slurm"
# Pings every few seconds: a node that vanishes is noticed within two of them (connection.Transport).
KEEPALIVE_S = 5.0
# How long a node may take to start its runners and register them (TensorFlow's import takes the longest).
REGISTER_TIMEOUT_S = START_TIMEOUT_S + 60.0
LIVENESS_TIMEOUT_S = 5.0
STOP_FILE = "stop"
POLL_S = 0.5
WAIT_POLL_S = 2.0
FINISHED_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
}


class SlurmError(RuntimeError):
    """sbatch, srun or scontrol missing or refusing; the message says which and why."""


@dataclass(frozen=True)
class SlurmOptions:
    """What the user asked Slurm for; recorded in every run's manifest."""

    nodes: int = 1
    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None
    gpus_per_node: int = 0
    exclusive: bool = True
    extra: tuple[str, ...] = ()  # further sbatch options, as given

    def directives(self) -> list[str]:
        """The #SBATCH lines. One task per node, the nodes to ourselves (a benchmark shares no machine), and
        --no-kill: a node that fails ends the runs on it, not the whole study."""
        lines = [f"--nodes={self.nodes}", "--ntasks-per-node=1", "--no-kill"]
        lines += ["--exclusive"] if self.exclusive else []
        lines += [f"--partition={self.partition}"] if self.partition else []
        lines += [f"--account={self.account}"] if self.account else []
        lines += [f"--time={self.time_limit}"] if self.time_limit else []
        lines += [f"--gpus-per-node={self.gpus_per_node}"] if self.gpus_per_node else []
        return [*lines, *self.extra]


@dataclass(frozen=True)
class Submission:
    """Everything the job needs, written as submission.json beside the batch script."""

    store: str
    frameworks: list[str]
    venvs: str
    slurm: dict
    runner_per_gpu: bool
    rendezvous_port: int = 29500
    report: bool = True
    latency_budget_ms: float | None = None
    study_folder: str = ""  # where the user's sweep file was: its relative models_dir is read from there

    @classmethod
    def read(cls, folder: Path) -> Submission:
        return cls(**json.loads((folder / "submission.json").read_text()))


def command(name: str) -> str:
    """The path of a Slurm command, or SlurmError saying that this is no Slurm login node."""
    path = shutil.which(name)
    if path is None:
        raise SlurmError(f"{name} is not on PATH: run fwbench slurm on a Slurm login node (slurm-client installed)")
    return path


def batch_script(folder: Path, options: SlurmOptions, python: str) -> str:
    directives = "\n".join(f"#SBATCH {shlex.quote(line)}" for line in options.directives())
    return (
        "#!/bin/bash\n"
        f"# fwbench slurm: a study on {options.nodes} node(s). Submit again with: sbatch {shlex.quote(str(folder / 'job.sh'))}\n"
        "#SBATCH --job-name=fwbench\n"
        f"#SBATCH --output={shlex.quote(str(folder / 'slurm-%j.out'))}\n"
        f"{directives}\n"
        f"exec {shlex.quote(python)} -m fwbench_aggregator slurm-job {shlex.quote(str(folder))}\n"
    )


def prepare(study_file: Path, store: Path, options: SlurmOptions, submission: Submission) -> Path:
    """The submission folder, written: batch script, study, options and a fresh token (readable by its owner only)."""
    folder = store / FOLDER / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{secrets.token_hex(3)}")
    folder.mkdir(parents=True)
    (folder / "study.yaml").write_text(study_file.read_text())
    (folder / "submission.json").write_text(json.dumps(asdict(submission), indent=2, sort_keys=True))
    token = folder / "token"
    token.touch(mode=0o600)
    token.write_text(secrets.token_urlsafe(32))
    script = folder / "job.sh"
    script.write_text(batch_script(folder, options, str(Path(sys.executable).absolute())))
    script.chmod(0o755)
    return folder


def submit(folder: Path) -> str:
    """sbatch the folder's script; the job id."""
    done = subprocess.run(
        [command("sbatch"), "--parsable", str(folder / "job.sh")], capture_output=True, text=True, check=False
    )
    job_id = done.stdout.strip().split(";")[0]
    if done.returncode != 0 or not job_id.isdigit():
        raise SlurmError(
            f"sbatch refused the job (exit {done.returncode}): {(done.stdout + ' ' + done.stderr).strip()}"
        )
    return job_id


def record_of(folder: Path, job_id: str) -> Path | None:
    """The job's record (its last start's, if it was requeued), once it has written one."""
    records = sorted(folder.glob(f"job-{job_id}*/job.json"), key=lambda path: path.stat().st_mtime)
    return records[-1] if records else None


def wait_for(folder: Path, job_id: str) -> tuple[int, str]:
    """Wait until the job ends; its exit status and, where Slurm still knows it, how it ended ("" where it ended
    COMPLETED or Slurm has forgotten it). `scontrol show job` every few seconds (sbatch --wait backs off to 32 s
    between looks); a job Slurm has already forgotten is judged by the record it wrote."""
    while True:
        done = subprocess.run(
            [command("scontrol"), "--oneliner", "show", "job", job_id], capture_output=True, text=True, check=False
        )
        fields = dict(item.split("=", 1) for item in done.stdout.split() if "=" in item)
        state = fields.get("JobState", "")
        if done.returncode != 0 or state in FINISHED_STATES:
            break
        time.sleep(WAIT_POLL_S)
    if state in FINISHED_STATES:
        status, _, signal_number = fields.get("ExitCode", "1:0").partition(":")
        ended = (
            ""
            if state == "COMPLETED"
            else f"Slurm job {job_id} ended {state} (exit code {fields.get('ExitCode', '?')})"
        )
        return int(status) or (1 if state != "COMPLETED" or signal_number not in ("", "0") else 0), ended
    record = record_of(folder, job_id)
    return (0 if record is not None and not json.loads(record.read_text())["left"] else 1), ""


def hostnames(nodelist: str) -> list[str]:
    """A Slurm node list ("node[1-3],gpu7") as names, in Slurm's order (the ranks of a job across them)."""
    done = subprocess.run(
        [command("scontrol"), "show", "hostnames", nodelist], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SlurmError(f"scontrol show hostnames {nodelist}: {done.stderr.strip()}")
    return done.stdout.split()


# --- in the allocation: the job ----------------------------------------------------------------------------


class NodeSteps:
    """One srun step per node, each `fwbench slurm-node`; a node whose step ended is gone."""

    def __init__(self, run_dir: Path, nodes: list[str], gpus_per_node: int) -> None:
        self.run_dir, self.processes = run_dir, {}
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        (run_dir / "nodes").mkdir(exist_ok=True)
        for node in nodes:
            args = [
                command("srun"),
                "--nodes=1",
                "--ntasks=1",
                f"--nodelist={node}",
                "--kill-on-bad-exit=0",
                # Beside the batch script and the other steps at once, whatever CPUs the allocation counts (without
                # it a step waits for CPUs another holds); the node's GPUs for its runners.
                "--overlap",
                *([f"--gpus-per-node={gpus_per_node}"] if gpus_per_node else []),
                f"--output={run_dir / 'logs' / f'{node}-step.log'}",
                sys.executable,
                "-m",
                "fwbench_aggregator",
                "slurm-node",
                str(run_dir),
            ]
            self.processes[node] = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)

    def ended(self, node: str) -> int | None:
        return self.processes[node].poll()

    def stop(self) -> None:
        """Tell every node to stop its runners (the stop file), then end the steps that are still there."""
        (self.run_dir / STOP_FILE).touch()
        deadline = time.monotonic() + 30
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGTERM)  # srun passes it to the task
        for process in self.processes.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_for_nodes(steps: NodeSteps, nodes: list[str]) -> tuple[dict[str, dict], dict[str, str]]:
    """Each node's registration, and why each other node has none (its step ended, its runners failed, or it
    took too long)."""
    registered: dict[str, dict] = {}
    missing: dict[str, str] = {}
    deadline = time.monotonic() + REGISTER_TIMEOUT_S
    while len(registered) + len(missing) < len(nodes):
        for node in nodes:
            if node in registered or node in missing:
                continue
            path = steps.run_dir / "nodes" / f"{node}.json"
            if path.exists():
                registration = json.loads(path.read_text())
                if registration["failures"]:
                    missing[node] = "; ".join(registration["failures"])
                else:
                    registered[node] = registration
            elif steps.ended(node) is not None:
                missing[node] = f"its srun step ended (exit {steps.ended(node)}) before its runners registered"
            elif time.monotonic() > deadline:
                missing[node] = f"its runners did not register within {REGISTER_TIMEOUT_S:.0f} s"
        time.sleep(POLL_S)
    return registered, missing


def job_context(job_id: str, nodes: list[str], submission: Submission) -> dict:
    return {
        "slurm": {
            "job_id": job_id,
            "nodes": nodes,
            "options": submission.slurm,
            "runner_per_gpu": submission.runner_per_gpu,
        }
    }


def write_record(run_dir: Path, record: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "job.json").write_text(json.dumps(record, indent=2, sort_keys=True))


# --- in the allocation: one node -----------------------------------------------------------------------------


def visible_gpus(gpus_per_node: int) -> list[str]:
    """The GPUs Slurm gave this step (CUDA_VISIBLE_DEVICES, as Slurm numbers them), else the first ones."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [g for g in given.split(",") if g] or [str(i) for i in range(gpus_per_node)]


def serve_node(run_dir: Path) -> int:
    """Start this node's runners on every interface with the job's token, register them, and keep them until
    the job says stop (or the step is ended)."""
    folder = run_dir.parent
    submission = Submission.read(folder)
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    token = (folder / "token").read_text().strip()
    startup = StartupSettings(**json.loads((run_dir / "startup.json").read_text()))
    gpus_per_node = submission.slurm.get("gpus_per_node", 0)
    places = (
        [(f"{node}/gpu:{gpu}", gpu) for gpu in visible_gpus(gpus_per_node)]
        if submission.runner_per_gpu
        else [(node, None)]
    )
    env = {**{name: "" for name in RUNNER_ACCESS_ENVS}, RUNNER_TOKEN_ENV: token}
    runners = {
        (slot, name): LocalRunner(
            name,
            embedded_command(name, Path(submission.venvs), startup, address="0.0.0.0:0"),
            run_dir / "logs" / f"{slot.replace('/', '-').replace(':', '')}-{name}-runner.log",
            env={**env, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {})},
            transport=Transport(token=token),
        )
        for slot, gpu in places
        for name in submission.frameworks
    }
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    failures: list[str] = []
    slots = {slot: {"slot": slot, "endpoints": {}} for slot, _ in places}
    try:
        with ThreadPoolExecutor(max_workers=len(runners)) as pool:
            started = {key: pool.submit(runner.start) for key, runner in runners.items()}
            for (slot, name), future in started.items():
                try:
                    port = future.result().rsplit(":", 1)[1]
                    slots[slot]["endpoints"][name] = f"{node}:{port}"
                except RunnerStartError as error:
                    failures.append(f"{name} runner on {slot}: {error}")
        registration = run_dir / "nodes" / f"{node}.json"
        partial = registration.with_suffix(".partial")
        partial.write_text(json.dumps({"node": node, "slots": list(slots.values()), "failures": failures}))
        partial.rename(registration)  # whole or not at all: the job reads it the moment it appears
        while not stop.is_set() and not (run_dir / STOP_FILE).exists():
            stop.wait(POLL_S)
    finally:
        stop_all(list(runners.values()))
    return 1 if failures else 0
