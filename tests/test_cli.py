"""End to end: the fwbench CLI against real runners, its table, its files, and its errors."""

from __future__ import annotations

import re
import statistics

import pandas as pd
import pytest
from support.cli import fwbench, only_run_dir
from support.fakes import Fake

# Every test here runs the command line end to end in subprocesses: seconds each.
pytestmark = pytest.mark.slow

WARMUP, STEPS = 2, 4
# Explicit small settings keep these tests fast; the defaults (1 s windows, 6 runs a runner) are for users.
QUICK = ("--min-measure-s", "0", "--repetitions", "1")


@pytest.mark.frameworks
def test_compare_both_real_runners_prints_table_and_writes_files(tmp_path):
    done = fwbench(
        "compare",
        "--model",
        "resnet18",
        "--mode",
        "train",
        "--batch-size",
        "2",
        "--shape",
        "3x32x32",
        "--warmup",
        str(WARMUP),
        "--steps",
        str(STEPS),
        *QUICK,
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    for expected in (
        "torch",
        "tensorflow",
        "median ms",
        "× fastest",
        "1.000",
        "verdict (equal profile): ",
        "layout channels_last",
        "compilation: ",
    ):
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
        # Energy is measured or says why not: never zero, never made up.
        if row["energy_status"] == "ok":
            assert row["energy_j"] > 0 and row["energy_per_sample_j"] > 0
        else:
            assert row["energy_status"].startswith("unavailable: ") and len(row["energy_status"]) > 20
            assert pd.isna(row["energy_j"]) and pd.isna(row["energy_per_sample_j"])
    # Energy columns where some runner measured energy; else the reason, once.
    assert ("J/sample" in done.stdout) == (summary["energy_status"] == "ok").any()
    missing = set(summary.loc[summary["energy_status"] != "ok", "energy_status"])
    if len(missing) == 1:  # one reason (no RAPL domain readable, say), said once for both runners
        assert done.stdout.count("energy (") == 1
        assert re.search(r"energy \((torch, tensorflow|tensorflow, torch)\)", done.stdout)  # the faster first
    assert (run_dir / "power.parquet").exists()


def unused_address() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_unreachable_runner_is_named_and_the_other_results_are_kept(tmp_path, fake_runner):
    done = fwbench(
        "compare",
        "--batch-size",
        "2",
        "--shape",
        "3x32x32",
        "--warmup",
        "1",
        "--steps",
        "3",
        *QUICK,
        "--runner",
        f"fake={fake_runner}",
        "--runner",
        f"tensorflow={unused_address()}",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 1
    assert "tensorflow" in done.stderr and "unreachable" in done.stderr
    assert "fake" in done.stdout
    summary = pd.read_csv(only_run_dir(tmp_path) / "summary.csv")
    assert summary.set_index("runner")["status"].to_dict() == {"fake": "ok", "tensorflow": "failed"}
    steps = pd.read_parquet(only_run_dir(tmp_path) / "steps.parquet")
    assert len(steps) == 4 and set(steps["framework"]) == {"fake"}


@pytest.mark.parametrize("command, shown", [("models", "resnet18"), ("describe", "framework")])
def test_models_and_describe_take_runners_from_the_environment_and_name_the_unreachable_one(
    fake_runner, command, shown
):
    # $FWBENCH_RUNNERS is how the aggregator's container finds the runner containers.
    done = fwbench(command, env={"FWBENCH_RUNNERS": f"fake={fake_runner} tensorflow={unused_address()}"})
    assert done.returncode == 1
    assert "fake" in done.stdout and shown in done.stdout
    assert "runner tensorflow failed" in done.stderr and "unreachable" in done.stderr


def test_a_listed_runner_not_compared_by_default_is_used_only_where_named(tmp_path, fake_runner):
    # compose.yaml's $FWBENCH_RUNNERS names every runner Compose can start, the JAX one (opt-in) included,
    # up or not: the default commands leave it out, --frameworks adds it, and --runner always uses it.
    env = {"FWBENCH_RUNNERS": f"fake={fake_runner} jax={unused_address()}"}
    default = fwbench("models", env=env)
    assert default.returncode == 0, default.stderr
    assert "fake" in default.stdout and "jax" not in default.stderr
    sweep = fwbench(
        "sweep",
        "--models",
        "resnet18",
        "--modes",
        "infer",
        "--batch-sizes",
        "1",
        "--shapes",
        "3x32x32",
        "--warmup",
        "0",
        "--steps",
        "1",
        *QUICK,
        "--store",
        str(tmp_path / "store"),
        "--no-report",
        env=env,
    )
    assert sweep.returncode == 0, sweep.stderr
    from fwbench_aggregator.store.results_store import ResultStore

    assert set(ResultStore(tmp_path / "store").load("summary")["runner"]) == {"fake"}
    for args in (["--frameworks", "torch,tensorflow,jax"], ["--runner", f"jax={unused_address()}"]):
        named = fwbench("models", *args, env=env)
        assert named.returncode == 1
        assert "runner jax failed" in named.stderr and "unreachable" in named.stderr


def test_models_lists_at_once_and_counts_parameters_on_request(fake_runner):
    from fwbench_core.fake import fake_parameter_count

    listed = fwbench("models", "--runner", f"fake={fake_runner}")
    assert listed.returncode == 0, listed.stderr
    assert "resnet18" in listed.stdout and "parameters" not in listed.stdout
    counted = fwbench("models", "--parameters", "--runner", f"fake={fake_runner}")
    assert counted.returncode == 0, counted.stderr
    assert "parameters" in counted.stdout and f"{fake_parameter_count('resnet18'):,}" in counted.stdout


def test_an_80_column_terminal_gets_every_figure_whole(tmp_path, fake_runner):
    done = fwbench(
        "compare",
        "--batch-size",
        "2",
        "--shape",
        "3x32x32",
        "--warmup",
        "1",
        "--steps",
        "3",
        *QUICK,
        "--runner",
        f"fake={fake_runner}",
        "--out",
        str(tmp_path),
        env={"COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout
    for header in ("median ms", "(of runs)", "p5–p95 ms", "(of steps)", "× fastest"):
        assert header in done.stdout
    # No power readings on this CPU: no energy columns, and the reason said once.
    assert "J/sample" not in done.stdout and done.stdout.count("energy (fake): unavailable") == 1
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    summary = pd.read_csv(only_run_dir(tmp_path) / "summary.csv")
    assert f"{summary['median_step_time_s'].iloc[0] * 1e3:.2f}" in done.stdout


def test_a_refused_request_is_named_before_anything_runs_and_writes_nothing(tmp_path, fake_runner):
    done = fwbench(
        "compare",
        "--model",
        "resnet9000",
        "--batch-size",
        "2",
        "--runner",
        f"fake={fake_runner}",
        "--runner",
        f"other={fake_runner}",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 2
    # Both runners refuse alike: one line names them both, with the closest model.
    assert re.search(
        r"fake, other: unknown model 'resnet9000' \(did you mean resnet\d+\?\)", " ".join(done.stderr.split())
    )
    assert "nothing was run" in done.stderr
    assert not any(tmp_path.iterdir()), "a comparison that never ran writes no results folder"


def test_model_options_and_named_shapes_reach_the_runner(tmp_path, fake_runner):
    done = fwbench(
        "compare",
        "--model",
        "bert_base",
        "--option",
        "head=mlm",
        "--shape",
        "seq=16",
        "--batch-size",
        "1",
        "--warmup",
        "0",
        "--steps",
        "2",
        *QUICK,
        "--runner",
        f"fake={fake_runner}",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    summary = pd.read_parquet(only_run_dir(tmp_path) / "summary.parquet")
    assert summary.loc[0, "input_shape"] == "16"
    assert summary.loc[0, "model_options"] == "head=mlm"


def test_a_bad_model_option_is_named_by_the_runner(tmp_path, fake_runner):
    done = fwbench(
        "compare",
        "--model",
        "bert_base",
        "--option",
        "head=qa",
        "--runner",
        f"fake={fake_runner}",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 2
    assert "head='qa' is not accepted by bert_base" in done.stderr and "classification, mlm" in done.stderr


@pytest.mark.frameworks
def test_parity_command_against_both_real_runners(tmp_path):
    done = fwbench("parity", "--models", "resnet18", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    # One figure where both runners count the same, "a / b" where they differ.
    assert "11,689,512" in done.stdout and "11,689,512 /" not in done.stdout
    assert "match" in done.stdout and "same" in done.stdout
    table = pd.read_csv(only_run_dir(tmp_path) / "parity.csv")
    assert table.loc[0, "model"] == "resnet18" and table.loc[0, "verdict"] == "same"
    assert table.loc[0, "flops_torch"] == table.loc[0, "flops_tensorflow"] > 0


def test_parity_rejects_an_unknown_model(tmp_path, fake_runner):
    done = fwbench(
        "parity",
        "--models",
        "resnet9000",
        "--runner",
        f"torch={fake_runner}",
        "--runner",
        f"tensorflow={fake_runner}",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 2
    assert "resnet9000" in done.stderr and "resnet18" in done.stderr


def test_repetitions_interleave_runners_and_give_a_verdict(tmp_path, fake_runner):
    done = fwbench(
        "compare",
        "--batch-size",
        "2",
        "--warmup",
        "1",
        "--steps",
        "5",
        "--min-measure-s",
        "0",
        "--repetitions",
        "4",
        "--runner",
        f"first={fake_runner}",
        "--runner",
        f"second={fake_runner}",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"verdict \(equal profile\): no significant difference", done.stdout), done.stdout
    run_dir = only_run_dir(tmp_path)
    summary = pd.read_parquet(run_dir / "summary.parquet")
    # Interleaved: first, second, first, second, ...
    # Counterbalanced: first, second, second, first, ... so a drift favours neither.
    order = summary.sort_values("started_at_unix_s")[["runner", "repetition"]].values.tolist()
    assert order == [
        ["first", 0],
        ["second", 0],
        ["second", 1],
        ["first", 1],
        ["first", 2],
        ["second", 2],
        ["second", 3],
        ["first", 3],
    ]
    comparison = pd.read_parquet(run_dir / "comparison.parquet")
    assert set(comparison["runner"]) == {"first", "second"}
    assert (comparison["runs"] == 4).all() and (comparison["steps"] == 20).all()
    assert comparison["run_spread"].notna().all()
    steps = pd.read_parquet(run_dir / "steps.parquet")
    assert sorted(steps["repetition"].unique()) == [0, 1, 2, 3]
    # Every run went through the store too, so `fwbench report` sees it.
    from fwbench_aggregator.store.results_store import ResultStore

    assert len(ResultStore(tmp_path / "store").load("summary")) == 8


def test_max_batch_finds_the_largest_batch_by_out_of_memory(fake_runner, tmp_path):
    # The fake device holds 2**34 bytes of inputs: 85 samples of 3x4096x4096 float32.
    done = fwbench(
        "max-batch",
        "--mode",
        "infer",
        "--shape",
        "3x4096x4096",
        "--limit",
        "1024",
        "--runner",
        f"fake={fake_runner}",
        "--store",
        str(tmp_path / "store"),
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"│ fake +│ +85 │", done.stdout) and "128 (OOM)" in done.stdout
    from fwbench_aggregator.store.results_store import ResultStore

    (row,) = ResultStore(tmp_path / "store").load("max_batch").to_dict("records")
    assert (row["largest_batch"], row["limit"], row["capped"]) == (85, 1024, False)
    assert "128 (OOM)" in row["batches_tried"]


@pytest.fixture(scope="module")
def second_fake_runner(module_fakes):
    return module_fakes(Fake()).addresses["fake"]


def test_calibrate_stores_a_noise_floor_that_compare_and_report_use(tmp_path, fake_runner, second_fake_runner):
    config = ("--batch-size", "2", "--shape", "3x32x32", "--warmup", "0", "--steps", "4", "--min-measure-s", "0")
    store = tmp_path / "store"
    done = fwbench(
        "calibrate",
        *config,
        "--repetitions",
        "3",
        "--runner",
        f"fake={fake_runner}",
        "--runner",
        f"fake={second_fake_runner}",
        "--store",
        str(store),
    )
    assert done.returncode == 0, done.stderr
    assert "noise floor" in done.stdout and "A/A ratio" in done.stdout
    from fwbench_aggregator.store.results_store import ResultStore

    (floor,) = ResultStore(store).load("calibration").to_dict("records")
    assert floor["framework"] == "fake" and floor["runs"] == 3 and floor["input_shape"] == "3x32x32"
    assert floor["noise_floor"] == pytest.approx(floor["aa_ci_high"] - 1) and floor["noise_floor"] >= 0
    # The same configuration compared: the stored floor is shown and applied.
    done = fwbench(
        "compare",
        *config,
        "--repetitions",
        "3",
        "--runner",
        f"a={fake_runner}",
        "--runner",
        f"b={second_fake_runner}",
        "--out",
        str(tmp_path),
        "--store",
        str(store),
    )
    assert done.returncode == 0, done.stderr
    assert f"noise floor: {floor['noise_floor']:.1%} (from fwbench calibrate)" in done.stdout
    comparison = pd.read_parquet(only_run_dir(tmp_path) / "comparison.parquet")
    assert (comparison["noise_floor"] == floor["noise_floor"]).all()
    assert "verdict (equal profile): " in done.stdout and "faster by" not in done.stdout
    done = fwbench("report", "--store", str(store))
    assert done.returncode == 0, done.stderr
    assert "noise floor" in (store / "report" / "report.html").read_text()


def test_calibrate_to_a_precision_adds_runs_until_the_floor_is_known_to_it(tmp_path, fake_runner, second_fake_runner):
    from fwbench_aggregator.store.results_store import ResultStore

    config = (
        "--batch-size",
        "2",
        "--shape",
        "3x32x32",
        "--warmup",
        "0",
        "--steps",
        "4",
        "--min-measure-s",
        "0",
        "--runner",
        f"fake={fake_runner}",
        "--runner",
        f"fake={second_fake_runner}",
    )
    done = fwbench(
        "calibrate",
        *config,
        "--floor-precision-pct",
        "60",
        "--max-repetitions",
        "12",
        "--store",
        str(tmp_path / "reached"),
        columns=200,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (floor,) = ResultStore(tmp_path / "reached").load("calibration").to_dict("records")
    said = re.search(
        r"fake: the floor is known to ±(\d+)% of itself after (\d+) runs per instance \(asked: ±60%\)",
        " ".join(done.stdout.split()),
    )
    assert said, done.stdout
    assert int(said[1]) <= 60 and int(said[2]) == floor["runs"] and 3 <= floor["runs"] < 12
    # A precision the most runs cannot reach: every run is kept, and the shortfall said plainly.
    done = fwbench(
        "calibrate",
        *config,
        "--floor-precision-pct",
        "1",
        "--max-repetitions",
        "4",
        "--store",
        str(tmp_path / "short"),
        columns=200,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (floor,) = ResultStore(tmp_path / "short").load("calibration").to_dict("records")
    assert floor["runs"] == 4 and "after the most runs, 4 per instance, not the ±1% asked" in " ".join(
        done.stdout.split()
    )


def test_calibrate_needs_two_instances_of_each_runner(fake_runner):
    done = fwbench("calibrate", "--runner", f"fake={fake_runner}")
    assert done.returncode == 2
    assert "--runner" in done.stderr and "exactly twice" in done.stderr


def test_a_runner_failure_no_use_case_caught_is_named_with_exit_1_never_a_traceback(capsys):
    import typer

    from fwbench_aggregator.cli import common
    from fwbench_aggregator.run.client import RunnerFailure

    def refused(progress):
        raise RunnerFailure(
            "torch",
            "DEADLINE_EXCEEDED",
            "plug-in hangs (/m/hangs/build_torch.py): build() did not "
            "return within 60 s; the runner stopped it and serves on",
        )

    with pytest.raises(typer.Exit) as info:
        common.run(refused)
    assert info.value.exit_code == 1
    printed = " ".join(capsys.readouterr().err.split())
    assert printed == (
        "runner torch failed: DEADLINE_EXCEEDED: plug-in hangs (/m/hangs/build_torch.py): build() did "
        "not return within 60 s; the runner stopped it and serves on"
    )
