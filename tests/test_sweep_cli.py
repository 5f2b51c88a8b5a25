"""fwbench sweep and report end to end: stored as it goes, killed without loss, resumed, reported from the store alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from support.cli import fwbench
from support.fakes import Fake

from fwbench_aggregator.store.results_store import ResultStore

# Every test here runs the command line, runners or generated requests end to end: seconds each.
pytestmark = pytest.mark.slow

SWEEP = """\
runners: [first, second]
models: [resnet18, mobilenet_v2]
modes: [train, infer]
batch_sizes: [1, 2, 4]
shapes: [3x32x32]
warmup: 1
steps: {steps}
min_measure_s: 0
repetitions: 1
"""


@pytest.fixture()
def slow_fake(fakes):
    """A fake runner whose steps take 20 ms, so a sweep is still running when it is killed."""
    return fakes(Fake(step_s=0.02)).addresses["fake"]


def sweep_args(tmp_path, address, steps: int) -> list[str]:
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.format(steps=steps))
    return [
        "sweep",
        str(path),
        "--store",
        str(tmp_path / "store"),
        "--runner",
        f"first={address}",
        "--runner",
        f"second={address}",
    ]


def test_killed_mid_sweep_keeps_every_completed_run_and_resume_finishes(tmp_path, slow_fake):
    args = sweep_args(tmp_path, slow_fake, steps=10)
    process = subprocess.Popen(
        [sys.executable, "-m", "fwbench_aggregator", *args, "--no-report"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )
    store = ResultStore(tmp_path / "store")
    deadline = time.monotonic() + 120
    while len(store.keys()) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    kept = store.keys()
    assert 5 <= len(kept) < 24, "the kill must land mid-sweep"
    summary = store.load("summary")
    assert set(summary["run_key"]) == kept  # every visible run loads whole

    done = fwbench(*args, "--resume")
    assert done.returncode == 0, done.stderr
    assert f"{24 - len(kept)} runs to do, {len(kept)} already in" in done.stderr
    assert store.load("summary")["run_key"].nunique() == 24
    # Completed, the sweep counted each runner's models' FLOPs, those the killed sweep ran too.
    facts = store.load("model_facts")
    assert sorted(zip(facts["runner"], facts["model"])) == [
        ("first", "mobilenet_v2"),
        ("first", "resnet18"),
        ("second", "mobilenet_v2"),
        ("second", "resnet18"),
    ]
    assert (tmp_path / "store" / "report" / "report.html").exists()


def test_without_resume_a_stored_configuration_is_not_run_twice(tmp_path, slow_fake):
    args = sweep_args(tmp_path, slow_fake, steps=2)
    assert fwbench(*args, "--no-report").returncode == 0
    again = fwbench(*args)
    assert again.returncode == 2 and "--resume" in again.stderr


def test_report_works_from_the_store_alone(tmp_path, slow_fake):
    args = sweep_args(tmp_path, slow_fake, steps=2)
    assert fwbench(*args, "--no-report").returncode == 0
    done = fwbench("report", "--store", str(tmp_path / "store"), "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "report" / "report.html").read_text()
    assert "data:image/png;base64," in html and "resnet18" in html


def test_the_report_answers_the_studies_questions_from_the_store(tmp_path, slow_fake):
    """Three runs per batch of a fake whose every step takes 20 ms: time per sample falls with the batch, the
    largest batch is the best, and every batch is under a 60 ms budget."""
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "runners: [first, second]\nmodels: [resnet18]\nmodes: [infer]\nbatch_sizes: [1, 2, 4]\n"
        "shapes: [3x32x32]\nwarmup: 1\nsteps: 3\nmin_measure_s: 0\nrepetitions: 3\n"
    )
    store = tmp_path / "store"
    address = slow_fake
    sweep = fwbench(
        "sweep",
        str(path),
        "--store",
        str(store),
        "--runner",
        f"first={address}",
        "--runner",
        f"second={address}",
        "--no-report",
    )
    assert sweep.returncode == 0, sweep.stderr
    done = fwbench("report", "--store", str(store), "--latency-budget-ms", "60")
    assert done.returncode == 0, done.stderr
    assert "findings" in done.stdout and "Time per sample fell as the batch grew in 2 of 2 series" in " ".join(
        done.stdout.split()
    )
    optimal = pd.read_csv(store / "report" / "optimal_batch.csv")
    assert list(optimal["best_batch"]) == [4, 4] and list(optimal["budget_batch"]) == [4, 4]
    page = (store / "report" / "report.html").read_text()
    assert page.index(">Findings</h2>") < page.index(">Optimal batch size</h2>")
    assert "≤ 60 ms" in page
    # The fake counts FLOPs too: achieved FLOP/s for each runner, and no MFU on a CPU.
    efficiency = pd.read_csv(store / "report" / "hardware_efficiency.csv")
    assert (efficiency["achieved_flops_per_s"] > 0).all() and efficiency["mfu"].isna().all()


@pytest.mark.parametrize("flag, reused", [((), [False, True]), (("--no-reuse-builds",), [False, False])])
def test_the_command_line_sweep_shares_builds_unless_told_not_to(tmp_path, slow_fake, flag, reused):
    store = tmp_path / "store"
    done = fwbench(
        "sweep",
        "--models",
        "resnet18",
        "--modes",
        "infer",
        "--batch-sizes",
        "1,2",
        "--shapes",
        "3x32x32",
        "--repetitions",
        "1",
        "--warmup",
        "1",
        "--steps",
        "2",
        "--min-measure-s",
        "0",
        "--store",
        str(store),
        "--runner",
        f"first={slow_fake}",
        "--no-report",
        *flag,
    )
    assert done.returncode == 0, done.stderr
    assert ResultStore(store).load("summary").sort_values("batch_size")["build_reused"].tolist() == reused


def test_a_sweep_runner_without_an_address_is_refused_before_any_run(tmp_path, slow_fake):
    args = sweep_args(tmp_path, slow_fake, steps=2)
    done = fwbench(*args[:-2], "--no-report")  # the file names first and second; only first has an address
    # The file is checked against the runners given before anything runs.
    assert done.returncode == 2 and "unknown runner 'second'; accepted: first" in " ".join(done.stderr.split())
    assert not (tmp_path / "store").exists() or not ResultStore(tmp_path / "store").run_keys()


def test_runs_across_nodes_are_refused_without_a_cluster(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("models: [resnet18]\nstrategies: [ddp]\nnodes: [1, 2]\n")
    done = fwbench("sweep", str(path), "--store", str(tmp_path / "store"))
    assert done.returncode == 2 and "fwbench slurm" in " ".join(done.stderr.split())
    assert not (tmp_path / "store").exists()


def test_a_bad_sweep_file_names_the_line_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("models: [resnet18]\nbatch_sizes: [1, -2]\n")
    done = fwbench("sweep", str(path), "--store", str(tmp_path / "store"))
    assert done.returncode == 2
    assert "line 2" in done.stderr and "batch_sizes" in done.stderr


def test_ctrl_c_cancels_the_run_in_flight_and_keeps_the_finished_ones(tmp_path, slow_fake):
    args = sweep_args(tmp_path, slow_fake, steps=100)  # 2 s a run: the interrupt lands mid-run
    # Ctrl-C as a terminal sends it: a test suite started in the background of a shell script inherits an
    # ignored SIGINT, and Python keeps a signal ignored that it was started with.
    process = subprocess.Popen(
        [sys.executable, "-m", "fwbench_aggregator", *args, "--no-report"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    store = ResultStore(tmp_path / "store")
    deadline = time.monotonic() + 120
    while not store.keys() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    interrupted_at = time.monotonic()
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    kept = len(store.run_keys())
    said = " ".join(stderr.split())
    assert f"interrupted: the run in flight was cancelled; {kept} runs of this study are kept" in said
    assert f"({kept} stored now; the store holds {kept} runs in all)" in said
    assert time.monotonic() - interrupted_at < 10
    assert 1 <= len(store.keys()) < 24
    # The runner stopped the cancelled run and freed its device: a new run is served at once.
    started = time.monotonic()
    done = fwbench(
        "compare",
        "--batch-size",
        "1",
        "--warmup",
        "0",
        "--steps",
        "2",
        "--min-measure-s",
        "0",
        "--repetitions",
        "1",
        "--runner",
        f"fake={slow_fake}",
        "--out",
        str(tmp_path / "after"),
        "--power-rate-hz",
        "0",
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20


def test_out_of_memory_is_stored_as_a_marked_missing_point_and_resume_skips_it(tmp_path, slow_fake):
    path = tmp_path / "oom.yaml"
    path.write_text(
        "runners: [fake]\nmodels: [resnet18]\nmodes: [infer]\nbatch_sizes: [1, 200]\nshapes: [3x4096x4096]\nwarmup: 0\nsteps: 2\nmin_measure_s: 0\nrepetitions: 1\n"
    )
    args = ["sweep", str(path), "--store", str(tmp_path / "store"), "--runner", f"fake={slow_fake}"]
    done = fwbench(*args)
    # Running out of memory is a result, not a failure: stored, marked, and the exit status 0.
    assert done.returncode == 0, done.stderr
    assert "1 run(s) of fake ran out of memory" in " ".join(done.stderr.split())
    summary = ResultStore(tmp_path / "store").load("summary").set_index("batch_size")
    assert summary.loc[1, "status"] == "ok" and summary.loc[200, "status"] == "failed"
    assert summary.loc[200, "device"] == summary.loc[1, "device"] == "cpu:0"
    assert summary.loc[200, "input_shape"] == "3x4096x4096"
    assert "out of memory" in (tmp_path / "store" / "report" / "report.html").read_text().lower()
    again = fwbench(*args, "--resume")
    assert "0 runs to do, 2 already in" in again.stderr


def test_a_study_a_runner_refuses_runs_nothing_stores_nothing_and_says_why(tmp_path, slow_fake):
    path = tmp_path / "typo.yaml"
    path.write_text(
        "runners: [first, second]\nmodels: [resnet18, resnt50]\nmodes: [infer]\nbatch_sizes: [1, 2]\n"
        "shapes: [3x32x32]\nwarmup: 0\nsteps: 1\nmin_measure_s: 0\nrepetitions: 1\n"
    )
    done = fwbench(
        "sweep",
        str(path),
        "--store",
        str(tmp_path / "store"),
        "--runner",
        f"first={slow_fake}",
        "--runner",
        f"second={slow_fake}",
    )
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert "the study cannot run, and nothing was run" in said
    assert "first, second: unknown model 'resnt50' (did you mean resnet50?)" in said
    # A refused request is no run: nothing stored, so a corrected study (or a resume) runs every configuration.
    assert not ResultStore(tmp_path / "store").run_keys()


def test_an_unreachable_runner_fails_the_study_and_a_resume_runs_its_runs(tmp_path, slow_fake):
    gone = "127.0.0.1:9"  # the discard port: nothing serves gRPC there
    args = sweep_args(tmp_path, slow_fake, steps=1)
    args[args.index(f"second={slow_fake}")] = f"second={gone}"
    done = fwbench(*args, "--no-report")
    assert done.returncode == 1, done.stderr
    assert "runner second failed" in done.stderr and "UNAVAILABLE" in done.stderr
    stored = ResultStore(tmp_path / "store").load("summary")
    assert set(stored["runner"]) == {"first"} and (stored["status"] == "ok").all()
    args[args.index(f"second={gone}")] = f"second={slow_fake}"
    again = fwbench(*args, "--no-report", "--resume")
    assert again.returncode == 0, again.stderr
    assert f"{len(stored)} runs to do, {len(stored)} already in" in " ".join(again.stderr.split())
