"""Distributed runs end to end through the CLI, on the CPU: torch DDP with two gloo workers against
TensorFlow's MirroredStrategy on two logical CPU devices, after their one-device runs, with the scaling tables;
one job across two runner processes on loopback, as two machines (the framework-free runner's ddp, then each
framework's); and a machine lost mid-run failing the job, naming it, with the other runner freed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from support.cli import fwbench, only_run_dir
from support.fakes import Fake, started_fakes

from fwbench_aggregator.run import launch
from fwbench_aggregator.store.results_store import ResultStore

# Every test here runs the command line and runner processes end to end: seconds each.
pytestmark = pytest.mark.slow

# The smallest work that is still a real network: a tiny MobileNetV2 step on a 32x32 image, two per device.
TINY = (
    "--model",
    "mobilenet_v2",
    "--shape",
    "3x32x32",
    "--batch-size",
    "2",
    "--warmup",
    "1",
    "--steps",
    "3",
    "--min-measure-s",
    "0",
    "--repetitions",
    "1",
    "--power-rate-hz",
    "0",
)
SWEEP = """\
runners: [torch, tensorflow]
models: [mobilenet_v2]
shapes: [3x32x32]
batch_sizes: [2]
devices: [cpu, "cpu:0,cpu:1"]
strategies: {torch: [ddp], tensorflow: [mirrored]}
warmup: 1
steps: 3
min_measure_s: 0
repetitions: 1
"""


@pytest.fixture
def framework_runners(tmp_path):
    """One torch and one TensorFlow runner, started once for both commands of a test."""
    runners = [
        launch.LocalRunner(name, launch.embedded_command(name, launch.default_venvs()), tmp_path / f"{name}.log")
        for name in ("torch", "tensorflow")
    ]
    try:
        for runner in runners:
            runner.start()
        yield [arg for r in runners for arg in ("--runner", f"{r.name}={r.address}")]
    finally:
        for runner in runners:
            runner.stop()


@pytest.mark.frameworks
def test_a_sweep_over_one_and_two_cpu_devices_reports_ddp_against_mirrored_with_efficiency(tmp_path, framework_runners):
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(SWEEP)
    store = tmp_path / "store"
    done = fwbench("sweep", str(sweep_file), "--store", str(store), *framework_runners, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = ResultStore(store).load("summary")
    assert (summary["status"] == "ok").all(), summary[["runner", "error"]]
    # Each framework counted the model's forward FLOPs once, for the report's FLOP/s: the same network, the same count.
    facts = ResultStore(store).load("model_facts").set_index("framework")
    assert sorted(facts.index) == ["tensorflow", "torch"] and (facts["input_shape"] == "3x32x32").all()
    assert facts.loc["torch", "forward_flops"] > 0
    assert facts.loc["tensorflow", "forward_flops"] == pytest.approx(facts.loc["torch", "forward_flops"], rel=0.01)
    two = summary[summary["world_size"] == 2].set_index("runner")
    assert set(two.index) == {"torch", "tensorflow"}
    assert two.loc["torch", "strategy"] == "ddp" and two.loc["tensorflow", "strategy"] == "mirrored"
    assert (two["devices"] == "cpu:0,cpu:1").all() and (two["global_batch_size"] == 4).all()
    assert two.loc["torch", "straggler_spread"] >= 0  # two gloo workers: each rank's time is kept
    steps = ResultStore(store).load("steps")
    ddp_steps = steps[(steps["runner"] == "torch") & (steps["world_size"] == 2)]
    assert all(len(times.split()) == 2 for times in ddp_steps["rank_step_time_s"])

    scaling = pd.read_csv(store / "report" / "scaling.csv")
    for runner in ("torch ddp", "tensorflow mirrored"):
        row = scaling[(scaling["runner"] == runner) & (scaling["world_size"] == 2)].iloc[0]
        assert row["scaling_efficiency"] > 0 and row["baseline_throughput_samples_per_s"] > 0
    tables = (store / "report" / "scaling.md").read_text()
    assert "DistributedDataParallel vs MirroredStrategy" in tables and "Scaling efficiency against devices" in tables
    assert (store / "report" / "plots" / "scaling.png").exists()


@pytest.fixture(params=["torch", "tensorflow"])
def two_machines(request, tmp_path):
    """Two runner processes of one framework on loopback: two "machines"."""
    name = request.param
    runners = [
        launch.LocalRunner(name, launch.embedded_command(name, launch.default_venvs()), tmp_path / f"{name}-{i}.log")
        for i in range(2)
    ]
    try:
        for runner in runners:
            runner.start()
        yield name, [r.address for r in runners]
    finally:
        for runner in runners:
            runner.stop()


@pytest.mark.frameworks
def test_one_job_across_two_runner_processes_merges_every_rank(tmp_path, two_machines):
    name, addresses = two_machines
    done = fwbench("compare", *TINY, "--runner", f"{name}={','.join(addresses)}", "--out", str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = only_run_dir(tmp_path)
    summary = pd.read_parquet(run_dir / "summary.parquet").iloc[0]
    expected = {"torch": "ddp", "tensorflow": "multi_worker_mirrored"}[name]
    assert summary["strategy"] == expected and summary["nodes"] == 2 and summary["world_size"] == 2
    assert summary["global_batch_size"] == 4 and summary["runner_address"] == ",".join(addresses)
    steps = pd.read_parquet(run_dir / "steps.parquet")
    measured = steps[~steps["warmup"]]
    # Every rank's time, node 0's then node 1's; a step of the job is its slowest rank's.
    ranks = [[float(t) for t in times.split()] for times in measured["rank_step_time_s"]]
    assert all(len(r) == 2 for r in ranks)
    assert measured["step_time_s"].tolist() == pytest.approx([max(r) for r in ranks])
    assert summary["throughput_samples_per_s"] == pytest.approx(4 * len(measured) / measured["step_time_s"].sum())


FAKE_TINY = (
    "--model",
    "resnet18",
    "--shape",
    "3x32x32",
    "--batch-size",
    "2",
    "--warmup",
    "1",
    "--steps",
    "3",
    "--min-measure-s",
    "0",
    "--repetitions",
    "1",
)


@pytest.fixture
def two_fake_machines(fakes):
    """Two framework-free runners (they run ddp over a socket sum) as two machines."""
    return fakes(Fake(step_s=0.01), Fake(step_s=0.01)).runners


def test_a_job_across_two_runners_after_a_one_device_run_prints_the_scaling_table(tmp_path, two_fake_machines):
    first, second = (r.address for r in two_fake_machines)
    out = ("--out", str(tmp_path / "out"), "--store", str(tmp_path / "store"))
    alone = fwbench("compare", *FAKE_TINY, "--runner", f"fake={first}", *out)
    assert alone.returncode == 0, alone.stderr
    assert "scaling" not in alone.stdout, "one world size says nothing about scaling"
    job = fwbench("compare", *FAKE_TINY, "--runner", f"fake={first},{second}", *out)
    assert job.returncode == 0, job.stderr
    assert "scaling: throughput against devices" in job.stdout and "fake ddp" in job.stdout
    summary = ResultStore(tmp_path / "store").load("summary").set_index("world_size")
    assert summary.loc[2, "strategy"] == "ddp" and summary.loc[2, "nodes"] == 2
    assert summary.loc[2, "runner_address"] == f"{first},{second}"
    assert summary.loc[2, "straggler_spread"] >= 0
    steps = ResultStore(tmp_path / "store").load("steps")
    assert all(len(t.split()) == 2 for t in steps.loc[steps["world_size"] == 2, "rank_step_time_s"])


def test_two_devices_of_one_runner_run_as_two_workers(tmp_path, two_fake_machines):
    done = fwbench(
        "compare",
        *FAKE_TINY,
        "--devices",
        "cpu:0,cpu:1",
        "--runner",
        f"fake={two_fake_machines[0].address}",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    summary = pd.read_parquet(only_run_dir(tmp_path) / "summary.parquet").iloc[0]
    assert (summary["strategy"], summary["devices"], summary["world_size"], summary["nodes"]) == (
        "ddp",
        "cpu:0,cpu:1",
        2,
        1,
    )
    assert summary["global_batch_size"] == 4


def test_a_machine_lost_mid_run_fails_the_job_naming_it_and_frees_the_other(tmp_path):
    with started_fakes(tmp_path, Fake(step_s=0.2), Fake(step_s=0.2)) as fakes:
        runners = fakes.runners
        addresses = [r.address for r in runners]
        command = [
            sys.executable,
            "-m",
            "fwbench_aggregator",
            "compare",
            *FAKE_TINY,
            "--steps",
            "200",
            "--distributed-timeout-s",
            "10",
            "--runner",
            f"fake={','.join(addresses)}",
            "--out",
            str(tmp_path / "out"),
        ]
        job = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"}
        )
        time.sleep(4)  # the job is measuring
        runners[1].process.send_signal(signal.SIGKILL)
        started = time.monotonic()
        _, stderr = job.communicate(timeout=60)
        assert job.returncode == 1, stderr
        assert time.monotonic() - started < 30
        text = " ".join(stderr.split())
        # Node 1's call breaks (UNAVAILABLE), or node 0's run aborts first naming rank 1, node 1's worker.
        assert "runner fake failed: " in text and ("node 1" in text or "rank 1" in text), text
        # The surviving runner stopped its rank: it takes a new run at once.
        again = fwbench(
            "compare", *FAKE_TINY, "--runner", f"fake={addresses[0]}", "--out", str(tmp_path / "again"), timeout=60
        )
        assert again.returncode == 0, again.stderr
