"""End to end: the fwbench CLI against real runners, its table, its files, and its errors."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import pandas as pd
import pytest
from fwbench_aggregator.launch import LocalRunner, fake_runner_command

WARMUP, STEPS = 2, 4


def fwbench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fwbench_aggregator", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


def only_run_dir(out):
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def test_compare_both_real_runners_prints_table_and_writes_files(tmp_path):
    done = fwbench(
        "compare", "--model", "resnet18", "--mode", "train", "--batch-size", "2", "--shape", "3x32x32",
        "--warmup", str(WARMUP), "--steps", str(STEPS), "--out", str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    for expected in ("torch", "tensorflow", "median step ms", "× fastest", "1.000"):
        assert expected in done.stdout
    run_dir = only_run_dir(tmp_path)
    for name in ("steps.csv", "steps.parquet", "summary.csv", "summary.parquet"):
        assert (run_dir / name).stat().st_size > 0

    steps = pd.read_parquet(run_dir / "steps.parquet")
    summary = pd.read_parquet(run_dir / "summary.parquet")
    assert pd.read_csv(run_dir / "steps.csv").shape == steps.shape
    assert set(summary["framework"]) == {"torch", "tensorflow"}
    assert (summary["status"] == "ok").all()
    assert (summary["input_shape"] == "3x32x32").all() and (summary["batch_size"] == 2).all()
    for framework, rows in steps.groupby("framework"):
        assert len(rows) == WARMUP + STEPS
        assert rows["warmup"].sum() == WARMUP
        measured = rows.loc[~rows["warmup"], "step_time_s"].tolist()
        row = summary.set_index("framework").loc[framework]
        assert row["median_step_time_s"] == pytest.approx(statistics.median(measured))
        assert row["throughput_samples_per_s"] == pytest.approx(2 * STEPS / sum(measured))
        assert row["parameter_count"] == 11_689_512


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--shape", "3x22a"], ["--shape", "3x224x224"]),
        (["--shape", "0x32x32"], ["--shape"]),
        (["--batch-size", "0"], ["--batch-size", "greater than or equal to 1"]),
        (["--mode", "fly"], ["--mode", "train", "infer"]),
        (["--device", "tpu"], ["--device", "gpu:N"]),
        (["--runner", "torch"], ["--runner", "NAME=HOST:PORT"]),
    ],
)
def test_bad_input_is_rejected_before_any_runner_is_contacted(tmp_path, args, names):
    started = time.monotonic()
    done = fwbench("compare", *args, "--out", str(tmp_path), "--venvs", str(tmp_path / "no-venvs"))
    assert done.returncode == 2
    for name in names:
        assert name in done.stderr
    assert not any(tmp_path.iterdir()), "nothing may be written for a rejected command"
    assert time.monotonic() - started < 30


@pytest.fixture(scope="module")
def fake_runner(tmp_path_factory):
    runner = LocalRunner("fake", fake_runner_command(), tmp_path_factory.mktemp("logs") / "fake.log")
    with runner:
        yield runner.address


def unused_address() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_unreachable_runner_is_named_and_the_other_results_are_kept(tmp_path, fake_runner):
    done = fwbench(
        "compare", "--batch-size", "2", "--shape", "3x32x32", "--warmup", "1", "--steps", "3",
        "--runner", f"fake={fake_runner}", "--runner", f"tensorflow={unused_address()}", "--out", str(tmp_path),
    )
    assert done.returncode == 1
    assert "tensorflow" in done.stderr and "unreachable" in done.stderr
    assert "fake" in done.stdout
    summary = pd.read_csv(only_run_dir(tmp_path) / "summary.csv")
    assert summary.set_index("framework")["status"].to_dict() == {"fake": "ok", "tensorflow": "failed"}
    steps = pd.read_parquet(only_run_dir(tmp_path) / "steps.parquet")
    assert len(steps) == 4 and set(steps["framework"]) == {"fake"}


def test_runner_errors_reach_the_user_with_their_status(tmp_path, fake_runner):
    done = fwbench("compare", "--model", "resnet9000", "--batch-size", "2", "--runner", f"fake={fake_runner}", "--out", str(tmp_path))
    assert done.returncode == 1
    assert "NOT_FOUND" in done.stderr and "resnet18" in done.stderr
