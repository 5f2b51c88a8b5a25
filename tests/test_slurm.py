"""`fwbench slurm` on a real Slurm: Debian's slurmctld, slurmd and munge in containers (tests/slurm/), one
controller (the login node) and two CPU compute nodes, the project and the store mounted at the same paths on
all three as a cluster's shared file system. A small study runs over both nodes; then a node is killed in the
middle of a second study, which finishes on the other node, and a second job resumes it; a requeued job
resumes by itself. Skipped, saying so in capitals, where no Docker engine answers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm import cluster as slurm_cluster
from support.docker import skip_without_docker_engine
from support.timings import timed

from fwbench_aggregator.store.results_store import ResultStore

ROOT = Path(__file__).resolve().parent.parent
FWBENCH = ROOT / ".venvs" / "aggregator" / "bin" / "fwbench"
JOB_TIMEOUT_S = 600
# Small runs, as every CPU test's: the point is where they run and what survives a lost node.
RUN_FIELDS = "modes: [infer]\nwarmup: 1\nwarmup_until_cv: 0\nsteps: 3\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    skip_without_docker_engine("SLURM")
    shared = tmp_path_factory.mktemp("slurm-shared")
    prefix = slurm_cluster.python_prefix_of(Path(sys.executable))
    started = slurm_cluster.Cluster("fwbench-slurm-test", ROOT, prefix, [shared])
    with timed("image", f"{slurm_cluster.IMAGE} (built where its recipe changed) and the cluster's start"):
        started.start()
    try:
        started.shared = shared
        yield started
    finally:
        started.stop()


def fwbench_slurm(cluster, *args: str) -> list[str]:
    """`fwbench slurm` as a user on the login node (the controller) types it."""
    return ["docker", "exec", "-w", str(ROOT), cluster.controller, str(FWBENCH), "slurm", *args]


def run_slurm(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(fwbench_slurm(cluster, *args), capture_output=True, text=True, timeout=JOB_TIMEOUT_S)


def nodes_of(store: ResultStore) -> dict[str, set[str]]:
    """Each run's node(s), from its manifest, by run key."""
    return {key: set(store.manifest(key)["run_nodes"]) for key in store.run_keys()}


def job_records(store_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(store_dir.glob("slurm/*/job-*/job.json"))]


def explain(done: subprocess.CompletedProcess, store_dir: Path) -> str:
    outputs = "\n".join(f"--- {p}\n{p.read_text()[-4000:]}" for p in store_dir.glob("slurm/*/slurm-*.out"))
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}\n{outputs}"


@pytest.mark.slurm
def test_a_study_runs_over_both_nodes_and_as_one_job_across_them_both_frameworks(cluster):
    study, store_dir = cluster.shared / "both.yaml", cluster.shared / "both-store"
    # Each point on one node, then each as one job across both: ranks, world size and rendezvous from the allocation.
    study.write_text(
        "runners: [torch, tensorflow]\nmodels: [resnet18, mobilenet_v2]\nbatch_sizes: [2]\n"
        "strategies: {torch: [ddp], tensorflow: [multi_worker_mirrored]}\ndevices: [cpu:0]\nnodes: [1, 2]\n"
        f"shapes: [3x32x32]\nrepetitions: 1\nmin_measure_s: 0\n{RUN_FIELDS}"
    )
    done = run_slurm(cluster, str(study), "--store", str(store_dir), "--nodes", "2", "--time", "20", "--wait")
    assert done.returncode == 0, explain(done, store_dir)
    store = ResultStore(store_dir)
    placed = nodes_of(store)
    summary = store.load("summary").set_index("run_key")
    assert len(placed) == 8 and set(summary["status"]) == {"ok"}
    single = {key: nodes for key, nodes in placed.items() if summary.loc[key, "nodes"] == 1}
    assert len(single) == 4 and all(len(nodes) == 1 for nodes in single.values())
    assert set().union(*single.values()) == set(cluster.node_names), "each node ran a point"
    across = summary[summary["nodes"] == 2]
    assert len(across) == 4 and set(across["world_size"]) == {2}
    assert all(placed[key] == set(cluster.node_names) for key in across.index)
    manifest = store.manifest(next(iter(placed)))
    [record] = job_records(store_dir)
    assert manifest["slurm"]["job_id"] == record["job_id"] and manifest["slurm"]["nodes"] == cluster.node_names
    assert manifest["slurm"]["options"]["nodes"] == 2 and manifest["slurm"]["options"]["time_limit"] == "20"
    assert (store_dir / "report" / "report.html").exists()
    # The allocation is released: no job of ours is left in the queue.
    assert cluster.exec(["squeue", "--noheader"]).stdout.strip() == ""


@pytest.mark.slurm
def test_a_node_killed_mid_study_is_named_the_other_finishes_and_a_resume_runs_only_what_is_missing(cluster):
    study, store_dir = cluster.shared / "kill.yaml", cluster.shared / "kill-store"
    # Four points of four runs (2 repetitions x 2 batch sizes), each run 1.5 s or more: a node is mid-point when
    # its first run is stored.
    study.write_text(
        "runners: [torch]\nmodels: [resnet18, mobilenet_v2]\nbatch_sizes: [1, 2]\n"
        f"shapes: [3x32x32, 3x48x48]\nrepetitions: 2\nmin_measure_s: 1.5\n{RUN_FIELDS}"
    )
    victim = cluster.node_names[1]  # not the batch script's node: the aggregator lives on the first
    submitted = subprocess.Popen(
        fwbench_slurm(cluster, str(study), "--store", str(store_dir), "--nodes", "2", "--wait"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not any(victim in nodes for nodes in _placed(store_dir).values()):
        assert submitted.poll() is None and time.monotonic() < deadline, "the victim node never stored a run"
        time.sleep(0.2)
    cluster.kill_node(victim)
    stdout, stderr = submitted.communicate(timeout=JOB_TIMEOUT_S)
    done = subprocess.CompletedProcess(submitted.args, submitted.returncode, stdout, stderr)
    assert done.returncode == 1, explain(done, store_dir)  # runs are missing: a resume is due
    store = ResultStore(store_dir)
    expected = 4 * 4
    [record] = job_records(store_dir)
    assert victim in record["lost"] and not record["left"]
    [failure] = record["failures"]
    assert f"node {victim} lost" in failure["message"], failure
    kept = set(store.run_keys())
    assert len(kept) == expected - 1, "only the run in flight on the lost node is missing"
    assert set(store.load("summary")["status"]) == {"ok"}
    assert f"node {victim} lost" in " ".join(done.stderr.split())

    # The node comes back; a second job runs the one missing run and repeats nothing.
    cluster.restart_node(victim)
    done = run_slurm(cluster, str(study), "--store", str(store_dir), "--nodes", "2", "--resume", "--wait")
    assert done.returncode == 0, explain(done, store_dir)
    assert set(store.run_keys()) >= kept and len(store.run_keys()) == expected
    assert len(store.load("summary")) == expected, "no run is stored twice"
    assert job_records(store_dir)[-1]["runs_done_before"] == expected - 1


@pytest.mark.slurm
def test_a_preempted_job_requeued_by_slurm_resumes_by_itself_repeating_nothing(cluster):
    study, store_dir = cluster.shared / "requeue.yaml", cluster.shared / "requeue-store"
    study.write_text(
        "runners: [torch]\nmodels: [resnet18]\nbatch_sizes: [1, 2]\nshapes: [3x32x32, 3x48x48]\n"
        f"repetitions: 2\nmin_measure_s: 1.5\n{RUN_FIELDS}"
    )
    submitted = subprocess.Popen(
        fwbench_slurm(
            cluster, str(study), "--store", str(store_dir), "--nodes", "2", "--sbatch-option=--requeue", "--wait"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while len(_placed(store_dir)) < 2:
        assert submitted.poll() is None and time.monotonic() < deadline, "the job stored no runs"
        time.sleep(0.2)
    [job_id] = cluster.exec(["squeue", "--noheader", "--format=%i"]).stdout.split()
    cluster.exec(["scontrol", "requeue", job_id], check=True)  # what pre-emption with requeue does
    # Slurm holds a requeued job back for two minutes (its nodes may need cleaning); these need none. The hold is
    # set once the job's steps have ended and it is pending again.
    while "JobState=PENDING" not in cluster.exec(["scontrol", "--oneliner", "show", "job", job_id]).stdout:
        assert time.monotonic() < deadline, "the requeued job never went back to pending"
        time.sleep(0.5)
    cluster.exec(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)
    stdout, stderr = submitted.communicate(timeout=JOB_TIMEOUT_S)
    done = subprocess.CompletedProcess(submitted.args, submitted.returncode, stdout, stderr)
    assert done.returncode == 0, explain(done, store_dir)
    store = ResultStore(store_dir)
    assert len(store.run_keys()) == 8 and len(store.load("summary")) == 8, "every run once"
    first, again = job_records(store_dir)
    assert again["runs_done_before"] >= 2 and first["job_id"] == again["job_id"] == job_id


def _placed(store_dir: Path) -> dict[str, set[str]]:
    try:
        return nodes_of(ResultStore(store_dir))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


@pytest.mark.slow
def test_without_slurm_the_command_says_so_and_submits_nothing(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text("runners: [torch]\nmodels: [resnet18]\n")
    done = subprocess.run(
        [str(FWBENCH), "slurm", str(study), "--store", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2 and "sbatch is not on PATH" in " ".join(done.stderr.split())
    assert not (tmp_path / "store").exists()


@pytest.mark.frameworks  # the study's runner environments must exist, as on a cluster's shared file system
def test_dry_run_shows_the_batch_script_with_the_options(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text("runners: [torch]\nmodels: [resnet18]\n")
    done = subprocess.run(
        [
            str(FWBENCH),
            "slurm",
            str(study),
            "--store",
            str(tmp_path / "store"),
            "--nodes",
            "3",
            "--partition",
            "gpu",
            "--account",
            "lab",
            "--time",
            "2:00:00",
            "--gpus-per-node",
            "4",
            "--sbatch-option=--qos=long",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for line in (
        "#SBATCH --nodes=3",
        "#SBATCH --no-kill",
        "#SBATCH --exclusive",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=lab",
        "#SBATCH --time=2:00:00",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --qos=long",
    ):
        assert line in done.stdout
    assert "slurm-job" in done.stdout
    [folder] = (tmp_path / "store" / "slurm").iterdir()
    assert (folder / "token").stat().st_mode & 0o777 == 0o600
    assert json.loads((folder / "submission.json").read_text())["runner_per_gpu"] is True


@pytest.mark.slow
def test_a_study_under_the_best_profile_is_refused_with_where_to_run_it(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text("runners: [torch]\nmodels: [resnet18]\nprofiles: [equal, best]\n")
    done = subprocess.run(
        [str(FWBENCH), "slurm", str(study), "--store", str(tmp_path / "store"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "run it with fwbench sweep" in " ".join(done.stderr.split())
    assert not (tmp_path / "store").exists()


@pytest.mark.slow
def test_a_study_wider_than_the_allocation_is_refused_naming_nodes(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text("runners: [torch]\nmodels: [resnet18]\nstrategies: [ddp]\nnodes: [1, 4]\n")
    done = subprocess.run(
        [str(FWBENCH), "slurm", str(study), "--store", str(tmp_path / "store"), "--nodes", "2", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--nodes 4" in " ".join(done.stderr.split())
    assert not (tmp_path / "store").exists()
