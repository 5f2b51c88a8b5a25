"""The block design (plan.design, app.blocks): windows interleaved in process blocks, judged block by block.

A block's windows alternate between runners (A B, B A, ...) on one warm build each, in a worker process of the block's
own; its value per runner is the geometric mean of its windows' medians, and two runners are compared on the log
ratios of the blocks both ran in (the paired test). Synthetic stores check the analysis; fake runners over real gRPC
check the loop and what it stores; tests/test_paired_rounds.py simulates what the paired test holds."""

from __future__ import annotations

import itertools
import math
import re
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pandas as pd
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.cli import SHORT_BLOCKS, SMALL_INFER, fwbench, fwbench_in_process, only_run_dir
from support.fakes import Fake, started_fakes
from test_alike import CONFIG, FACTS, STEPS_PER_RUN

from fwbench_aggregator.analyse.comparison import comparison_rows
from fwbench_aggregator.analyse.sequential import DEFAULT_MAX_BLOCKS
from fwbench_aggregator.app.blocks import block_name, open_blocks, window_order
from fwbench_aggregator.plan.design import (
    GPU_IN_ROUNDS,
    MIN_WINDOW_STEPS,
    REFILL_STEPS,
    ROUNDS_LABEL,
    BlockDesign,
    DesignChoice,
)
from fwbench_aggregator.run import wire
from fwbench_aggregator.run.client import RunResult
from fwbench_aggregator.run.connection import Transport
from fwbench_aggregator.store.migrations import migrated
from fwbench_aggregator.store.results_store import ResultStore

_ids = itertools.count()


def test_a_block_alternates_its_runners_windows_and_the_next_block_starts_with_the_other():
    design = BlockDesign(windows=4)
    assert [r for _, r in window_order(["a", "b"], design, 0)] == list("abbaabba")
    assert [r for _, r in window_order(["a", "b"], design, 1)] == list("baabbaab")
    assert [w for w, r in window_order(["a", "b"], design, 0) if r == "a"] == [0, 1, 2, 3]


def test_a_window_continues_the_blocks_build_in_the_blocks_process_and_its_last_frees_both():
    base = pb.RunRequest(model="resnet18", batch_size=8, warmup_steps=50, measured_steps=20, min_measure_s=1.0)
    base.warmup_until_stable.cv_threshold = 0.05
    window = wire.window(base, BlockDesign(windows=4, window_s=0.3), "c1-block0", last=False)
    assert (window.warmup_steps, window.measured_steps, window.min_measure_s) == (REFILL_STEPS, MIN_WINDOW_STEPS, 0.3)
    assert not window.HasField("warmup_until_stable")
    assert (window.reuse_key, window.process_block, window.continue_reuse) == ("c1-block0", "c1-block0", True)
    assert not window.end_reuse and wire.window(base, BlockDesign(), "c1-block0", last=True).end_reuse
    assert (base.warmup_steps, base.reuse_key) == (50, "")  # the comparison's request is left as it was


@pytest.mark.parametrize("windows, window_s", [(0, 0.25), (101, 0.25), (4, 0.0)])
def test_a_design_outside_its_limits_is_refused_naming_them(windows, window_s):
    with pytest.raises(ValueError, match="1 to 100 windows|more than 0 s"):
        BlockDesign(windows, window_s)


def blocks(
    runner_values: dict[str, list[float]],
    windows: int = 2,
    compare: str = "c",
    skip: tuple = (),
    design: str = "blocks of 2 windows",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One compare's frames as the store holds them under the block design: per runner, block k's windows at
    runner_values[runner][k] (seconds), a little apart; (runner, k) in `skip` did not run block k."""
    summary, steps = [], []
    for runner, values in runner_values.items():
        for block, value in enumerate(values):
            if (runner, block) in skip:
                continue
            for window in range(windows):
                step_s = value * (1 + 0.01 * (window - (windows - 1) / 2))
                identity = dict(
                    CONFIG,
                    runner=runner,
                    run_id=f"run{next(_ids)}",
                    repetition=block * windows + window,
                    framework=runner,
                    framework_version="1.0",
                )
                summary.append(
                    {
                        **identity,
                        **FACTS,
                        "status": "ok",
                        "median_step_time_s": step_s,
                        "measured_steps": STEPS_PER_RUN,
                        "max_repetitions": 0,
                        "design": design,
                        "process_block": block_name(compare, block),
                        "block_window": window,
                    }
                )
                steps += [
                    {**identity, "step_index": i, "warmup": False, "step_time_s": step_s} for i in range(STEPS_PER_RUN)
                ]
    return pd.DataFrame(summary), pd.DataFrame(steps)


def test_runners_are_judged_block_by_block_on_the_blocks_values():
    # b is 10% slower in every block, while the host drifts 40% from block to block: only pairing sees it.
    drift = [1.0, 1.4, 0.9, 1.2, 1.1, 0.8]
    table = comparison_rows(*blocks({"a": [10e-3 * d for d in drift], "b": [11e-3 * d for d in drift]})).set_index(
        "runner"
    )
    assert table.loc["b", "significant"] and table.loc["a", "verdict"] == "fastest"
    assert table.loc["b", "ratio_ci_low"] > 1.09 and table.loc["b", "ratio_ci_high"] < 1.11
    assert (table["blocks"] == 6).all() and (table["runs"] == 12).all()  # runs counts the windows
    assert (table["design"] == "blocks of 2 windows").all()
    # The spread between blocks (the host's drift) is what rounds would have judged against.
    assert table.loc["a", "run_spread"] > 0.15


def test_an_unpaired_look_at_the_same_windows_would_not_resolve_the_difference():
    from fwbench_aggregator.analyse import stats

    drift = [1.0, 1.4, 0.9, 1.2, 1.1, 0.8]
    welch = stats.compare("a", [10e-3 * d for d in drift], "b", [11e-3 * d for d in drift])
    assert not welch.significant


def test_a_verdict_pairs_only_the_blocks_both_runners_ran_and_says_blocks():
    values = {"a": [10e-3, 12e-3, 11e-3, 10e-3], "b": [10.1e-3, 12.1e-3, 11e-3, 10.1e-3]}
    table = comparison_rows(*blocks(values, skip=(("b", 3),))).set_index("runner")
    assert table.loc["a", "blocks"] == 4 and table.loc["b", "blocks"] == 3
    row = table.loc["a"] if table.loc["a", "verdict"] != "fastest" else table.loc["b"]
    assert "these blocks resolve" in row["verdict"]
    too_few = comparison_rows(*blocks(values, skip=(("b", 1), ("b", 2)))).set_index("runner")
    judged = too_few[too_few["verdict"] != "fastest"].iloc[0]
    assert judged["verdict"].startswith("too few repetitions to call") and "2 and 2 blocks" in judged["verdict"]


def test_blocks_of_two_compares_pool_into_one_row_and_each_block_is_paired_within_its_own_compare():
    first = blocks({"a": [10e-3, 10.2e-3, 9.8e-3], "b": [11e-3, 11.2e-3, 10.8e-3]}, compare="c1")
    second = blocks({"a": [15e-3, 15.3e-3, 14.7e-3], "b": [16.5e-3, 16.8e-3, 16.2e-3]}, compare="c2")
    summary, steps = (pd.concat(frames, ignore_index=True) for frames in zip(first, second))
    table = comparison_rows(summary, steps).set_index("runner")
    assert (table["blocks"] == 6).all()
    assert (
        table.loc["b", "significant"]
        and 1.09 < table.loc["b", "ratio_ci_low"] <= table.loc["b", "ratio_ci_high"] < 1.11
    )


def test_runs_in_rounds_and_windows_in_blocks_never_pool():
    rounds_summary = blocks({"a": [10e-3] * 3}, design=ROUNDS_LABEL)[0].assign(process_block="", block_window=-1)
    block_summary = blocks({"a": [10e-3] * 3})[0]
    summary = pd.concat([rounds_summary, block_summary], ignore_index=True)
    steps = pd.concat([blocks({"a": [10e-3] * 3})[1]] * 2, ignore_index=True)
    table = comparison_rows(summary, steps)
    assert sorted(table["runner"]) == ["a [design blocks of 2 windows]", "a [design rounds]"]


def test_runs_stored_before_designs_were_recorded_read_as_rounds_outside_any_block():
    old = pd.DataFrame([{**CONFIG, "runner": "torch", "run_id": "r1", "repetition": 0, "status": "ok"}])
    now = migrated("summary", old, {"store_format": 6})
    assert now.loc[0, ["design", "process_block", "block_window", "process_id"]].tolist() == [ROUNDS_LABEL, "", -1, 0]
    assert not now.loc[0, "build_continued"]
    floor = migrated(
        "calibration", pd.DataFrame([{**CONFIG, "framework": "torch", "noise_floor": 0.05}]), {"store_format": 6}
    )
    assert floor.loc[0, "design"] == ROUNDS_LABEL  # an older floor keeps applying to comparisons in rounds


def test_blocks_are_judged_by_the_looks_they_were_made_under_and_older_ones_after_every_block():
    # 8 blocks of a 5% difference, under a budget of 20: blocks stored before looks were recorded (format 7) looked
    # after every block from the third, and their verdict stands at 8; blocks made to look at 10 and 20 have not
    # been looked at yet.
    a = [10e-3 * d for d in (1.0, 1.2, 0.9, 1.1, 1.0, 0.95, 1.05, 1.15)]
    b = [v * 1.05 * (1 + e) for v, e in zip(a, (0.004, -0.003, 0.002, -0.004, 0.003, -0.002, 0.001, 0.0))]
    summary, steps = blocks({"a": a, "b": b})
    older = migrated("summary", summary.assign(max_repetitions=20), {"store_format": 7})
    assert set(older["looks"]) == {""}
    judged_as = {
        looks: comparison_rows(older.assign(looks=looks), steps).set_index("runner").loc["b"]
        for looks in ("", "10,20", "4,8,20")
    }
    assert judged_as[""]["outcome"] == "different" and judged_as[""]["looks"] == ""
    assert judged_as["10,20"]["outcome"] == "continue"
    # Looking at 4 and 8 only, the look at 8 spends what every block's looks since 4 would have: a narrower interval.
    assert judged_as["4,8,20"]["outcome"] == "different"
    assert judged_as["4,8,20"]["resolvable"] < judged_as[""]["resolvable"]


# --- the command line over fake runners -------------------------------------------------------------------------


@pytest.fixture
def two_fakes(fakes):
    """Two fake runners over real gRPC, b's steps twice a's."""
    return fakes(Fake("a", step_s=0.002), Fake("b", step_s=0.004)).addresses


def test_a_blocks_windows_are_stored_while_the_next_blocks_workers_start_and_the_last_blocks_at_the_end(two_fakes):
    """Storing a window took 49 ms, two thirds of the time between windows: a block's are stored while the next
    block's workers start, when no window measures, and none is lost."""
    import time

    from fwbench_aggregator.app.blocks import run_blocks
    from fwbench_aggregator.app.rounds import Repetitions

    request = pb.RunRequest(model="resnet18", mode=pb.MODE_INFER, batch_size=2, warmup_steps=0, measured_steps=2)
    stored: list[tuple[float, RunResult]] = []
    rounds = run_blocks(
        two_fakes,
        {name: request for name in two_fakes},
        Transport(),
        BlockDesign(2, 0.02),
        Repetitions(3),
        "c",
        None,
        0.02,
        lambda run, sent: stored.append((time.time(), run)),
    )
    assert len(stored) == len(rounds.results) == 3 * 2 * 2
    windows = sorted((r.summary.started_at_unix_s, r.summary.finished_at_unix_s, r.block.block) for r in rounds.results)
    for at, run in stored:
        # Stored after its block's last window and before the next block's first: between blocks, or at the end.
        own = [w for w in windows if w[2] == run.block.block]
        later = [w for w in windows if w[0] > own[-1][1]]
        assert at >= max(end for _, end, _ in own) and (not later or at <= later[0][0])


def test_while_blocks_run_the_progress_says_which_block_of_how_many_and_where_the_comparison_stands(two_fakes):
    from fwbench_aggregator.app.blocks import run_blocks
    from fwbench_aggregator.app.rounds import Repetitions
    from fwbench_aggregator.base.progress import Progress

    class Recording(Progress):
        def __init__(self) -> None:
            self.descriptions: list[str] = []

        def update(self, task, *, description=None, completed=None, total=None) -> None:
            if description and description.startswith("block "):
                self.descriptions.append(description)

    request = pb.RunRequest(model="resnet18", mode=pb.MODE_INFER, batch_size=2, warmup_steps=0, measured_steps=2)
    progress = Recording()
    run_blocks(
        two_fakes,
        {name: request for name in two_fakes},
        Transport(),
        BlockDesign(2, 0.02),
        Repetitions(max_runs=4),
        "c",
        None,
        0.02,
        progress=progress,
    )
    first, second, third, fourth = progress.descriptions
    # b's steps take twice a's: after a block a ratio, and after three (what an interval needs) its interval too.
    assert first == "block 1 of 4", progress.descriptions
    assert all(re.fullmatch(r"block [23] of 4: b [\d.]+x a", text) for text in (second, third)), progress.descriptions
    low, ratio, high = re.fullmatch(r"block 4 of 4: b ([\d.]+)x a \[([\d.]+), ([\d.]+)\]", fourth).group(2, 1, 3)
    assert 1.2 < float(ratio) < 3.5 and float(low) <= float(ratio) <= float(high), fourth


def test_the_standing_names_each_slower_runner_against_the_fastest_and_leaves_out_an_interval_not_yet_known():
    from fwbench_aggregator.present.block_progress import block_progress, standing

    rows = pd.DataFrame(
        {
            "runner": ["torch", "tensorflow", "jax"],
            "ratio_to_fastest": [1.0, 1.37, 1.1],
            "ratio_ci_low": [math.nan, 1.2, math.nan],
            "ratio_ci_high": [math.nan, 1.58, math.nan],
        }
    )
    assert standing(rows) == "tensorflow 1.37x torch [1.20, 1.58]; jax 1.10x torch"
    assert block_progress(5, 8, rows) == "block 5 of 8: tensorflow 1.37x torch [1.20, 1.58]; jax 1.10x torch"
    assert block_progress(1, 8) == "block 1 of 8" == block_progress(1, 8, rows.iloc[:1])


def test_an_interrupt_between_blocks_keeps_the_windows_of_the_blocks_before_it(two_fakes):
    from fwbench_aggregator.app.blocks import run_blocks
    from fwbench_aggregator.app.rounds import Repetitions
    from fwbench_aggregator.base.progress import Progress

    class CtrlCAtBlock2(Progress):
        def update(self, task, *, description=None, completed=None, total=None):
            if description and description.startswith("block 2 of"):
                raise KeyboardInterrupt

    request = pb.RunRequest(model="resnet18", mode=pb.MODE_INFER, batch_size=2, warmup_steps=0, measured_steps=2)
    stored: list[RunResult] = []
    with pytest.raises(KeyboardInterrupt):
        run_blocks(
            two_fakes,
            {name: request for name in two_fakes},
            Transport(),
            BlockDesign(2, 0.02),
            Repetitions(3),
            "c",
            None,
            0.02,
            lambda run, sent: stored.append(run),
            CtrlCAtBlock2(),
        )
    assert len(stored) == 2 * 2 and {run.block.block for run in stored} == {block_name("c", 0)}


class RefusingRunner(pb_grpc.RunnerServicer):
    """A runner that refuses to open blocks; the base servicer answers UNIMPLEMENTED, as a runner older than
    OpenBlock does."""

    def OpenBlock(self, request, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this runner cannot start worker processes")


@pytest.fixture
def older_and_refusing():
    servers = {}
    for name, servicer in (("older", pb_grpc.RunnerServicer()), ("refusing", RefusingRunner())):
        server = grpc.server(ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_RunnerServicer_to_server(servicer, server)
        servers[name] = (server, f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}")
        server.start()
    yield {name: address for name, (_, address) in servers.items()}
    for server, _ in servers.values():
        server.stop(None)


def test_a_runner_older_than_open_block_opens_its_block_in_its_first_window_and_a_refusal_fails_the_runner(
    older_and_refusing,
):
    failures = open_blocks(older_and_refusing, Transport(), "c1-block0")
    assert [(f.runner, f.code) for f in failures] == [("refusing", "FAILED_PRECONDITION")]
    assert "cannot start worker processes" in failures[0].message


@pytest.mark.slow
def test_compare_in_blocks_stores_every_window_with_its_block_and_calls_the_difference(tmp_path, two_fakes):
    done = fwbench(
        "compare",
        *(f"--runner={name}={address}" for name, address in two_fakes.items()),
        *SMALL_INFER,
        *SHORT_BLOCKS,
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    output = " ".join(done.stdout.split())
    # The default budget of blocks, 8, looks at 4: the fakes' difference is settled there. It is about twofold, so
    # the verdict reads "a faster by 96%" or "a 2.0x faster", as the host's noise falls.
    assert re.search(r"verdict \(equal profile\): a (faster by|[\d.]+x faster)", output), done.stdout
    assert "blocks: 4 blocks, 8/8 windows per runner (auto: stopped because the verdict was settled" in output, (
        done.stdout
    )
    # The table counts windows, and its median and spread are of the blocks' values.
    assert all(header in output for header in ("windows", "(of blocks)", "block")) and "(of runs)" not in output
    # Where the time went, phase by phase, in the order they ran.
    spent = " ".join(done.stderr.split())
    phases = r"time: runners started [\d.]+ s, checks [\d.]+ s, 4 blocks [\d.]+ s, analysis and report [\d.]+ s"
    assert re.search(phases + r", runners stopped [\d.]+ s \([\d.]+ s in all\)", spent), done.stderr
    summary = pd.read_parquet(only_run_dir(tmp_path) / "summary.parquet")
    assert set(summary["design"]) == {"blocks of 2 windows"} and len(summary) == 16
    assert set(summary["max_repetitions"]) == {DEFAULT_MAX_BLOCKS} and set(summary["looks"]) == {"4,8"}
    for _, runner_windows in summary.groupby("runner"):
        by_block = runner_windows.groupby("process_block")
        # Each block's windows in one process of its own, a fresh one per block; the first window built, the
        # later ones stepped that build on.
        assert (by_block["process_id"].nunique() == 1).all() and runner_windows["process_id"].nunique() == 4
        assert sorted(runner_windows["block_window"]) == [0, 0, 0, 0, 1, 1, 1, 1]
        assert runner_windows.sort_values("repetition")["build_continued"].tolist() == [False, True] * 4
    stored = ResultStore(tmp_path / "store").load("summary")
    assert len(stored) == 16 and set(stored["process_block"]) == set(summary["process_block"])


@pytest.mark.slow
def test_an_a_a_compare_in_blocks_calls_no_difference(tmp_path):
    with started_fakes(tmp_path, Fake("a", step_s=0.002), Fake("b", step_s=0.002)) as fakes:
        done = fwbench(
            "compare",
            *(f"--runner={r.name}={r.address}" for r in fakes.runners),
            *SMALL_INFER,
            *SHORT_BLOCKS,
            "--repetitions",
            "4",
            "--out",
            str(tmp_path),
        )
    assert done.returncode == 0, done.stderr
    rows = pd.read_csv(only_run_dir(tmp_path) / "comparison.csv")
    assert not rows["significant"].any() and (rows["blocks"] == 4).all()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--scenario", "server", "--target-qps", "10", "--mode", "infer"],
            "a serving scenario's queries run as whole runs",
        ),
        (["--devices", "cpu:0,cpu:1"], "blocks measure single-device runs"),
        (["--runner", "torch=127.0.0.1:1,127.0.0.1:2"], "blocks measure single-device runs"),
        (["--cooldown-s", "1"], "--cooldown-s waits between whole runs"),
        (["--steps", "50"], "--steps sets how a whole run warms up or measures"),
        (["--warmup-until-cv", "0"], "--warmup-until-cv sets how a whole run warms up or measures"),
        (["--strategy", "dp"], "a --strategy spreads a run over several"),
    ],
)
def test_runs_a_block_cannot_measure_in_windows_are_refused_naming_the_option(args, message):
    done = fwbench_in_process("compare", "--design", "blocks", *args)
    said = " ".join(done.output.split())
    assert done.exit_code == 2 and message in said and "use --design rounds" in said, done.output


def test_block_options_without_the_block_design_are_refused():
    done = fwbench_in_process("compare", "--design", "rounds", "--window-s", "0.5")
    assert done.exit_code == 2 and "--window-s applies to --design blocks" in " ".join(done.output.split())
    # Under auto, where the runs cannot be windows.
    fallen = fwbench_in_process("compare", "--cooldown-s", "1", "--block-windows", "4")
    assert (
        fallen.exit_code == 2
        and "--block-windows applies to --design blocks, and --cooldown-s waits between whole runs"
        in " ".join(fallen.output.split())
    )
    unknown = fwbench_in_process("compare", "--design", "duet")
    assert unknown.exit_code == 2 and "accepted values: auto, rounds, blocks" in " ".join(unknown.output.split())


def test_auto_runs_blocks_on_the_cpu_and_rounds_on_a_gpu_or_where_runs_cannot_be_windows():
    blocks = DesignChoice(BlockDesign(), auto=True)
    assert blocks.on_devices(["cpu", "cpu"])[0] == BlockDesign()
    assert "auto: single-device back-to-back steps on the CPU" in blocks.on_devices(["cpu"])[1]
    design, said = blocks.on_devices(["cpu", "gpu"])
    assert design is None and GPU_IN_ROUNDS in said and "--design blocks runs them anyway" in said
    fallen = DesignChoice(auto=True, rounds_because="--cooldown-s waits between whole runs")
    assert fallen.on_devices(["cpu"]) == (
        None,
        "design: rounds (auto: --cooldown-s waits between whole runs)",
    )
    # Asked for by name: run as asked, nothing to say.
    assert DesignChoice(BlockDesign()).on_devices(["gpu"]) == (BlockDesign(), "")
    assert DesignChoice().on_devices(["cpu"]) == (None, "")


@pytest.mark.slow
def test_compare_by_default_runs_blocks_on_the_cpu_and_says_so_and_rounds_where_a_run_is_described(tmp_path, two_fakes):
    runners = [f"--runner={name}={address}" for name, address in two_fakes.items()]
    config = ["--model", "resnet18", "--mode", "infer", "--batch-size", "2", "--shape", "3x32x32", "--repetitions", "3"]
    done = fwbench(
        "compare", *runners, *config, "--block-windows", "2", "--window-s", "0.02", "--out", str(tmp_path / "blocks")
    )
    assert done.returncode == 0, done.stderr
    assert "design: blocks of 2 windows of 0.02 s (auto: single-device back-to-back steps on the CPU" in " ".join(
        done.stderr.split()
    )
    assert set(pd.read_parquet(only_run_dir(tmp_path / "blocks") / "summary.parquet")["design"]) == {
        "blocks of 2 windows"
    }
    runs = fwbench(
        "compare", *runners, *config, "--steps", "3", "--min-measure-s", "0", "--out", str(tmp_path / "runs")
    )
    assert runs.returncode == 0, runs.stderr
    assert "design: rounds (auto: --steps sets how a whole run warms up or measures" in " ".join(runs.stderr.split())
    assert set(pd.read_parquet(only_run_dir(tmp_path / "runs") / "summary.parquet")["design"]) == {ROUNDS_LABEL}


def test_a_block_designs_verdict_says_blocks_where_it_did_not_resolve():
    from fwbench_aggregator.analyse.sequential import SequentialPlan, look

    rng = np.random.default_rng(0)
    a = np.exp(rng.normal(0, 0.3, 6)) * 0.01
    decision = look(
        SequentialPlan(max_runs=6), a, a * np.exp(rng.normal(0, 0.3, 6)), "a", "b", paired=True, unit="block"
    )
    assert decision.stop and decision.verdict.startswith(
        ("not resolved after 6 blocks: these blocks resolve", "too noisy")
    ), decision.verdict
    assert "per runner" not in decision.verdict and math.isfinite(decision.comparison.resolvable)


@pytest.mark.slow
def test_a_floor_calibrated_in_blocks_applies_to_comparisons_in_blocks_alone(tmp_path):
    store = tmp_path / "store"
    with started_fakes(tmp_path, Fake("one", step_s=0.002), Fake("two", step_s=0.002)) as fakes:
        runners = fakes.runners
        addresses = [f"--runner=fake={r.address}" for r in runners]
        done = fwbench(
            "calibrate", *SMALL_INFER, *SHORT_BLOCKS, "--repetitions", "3", *addresses, "--store", str(store)
        )
        assert done.returncode == 0, done.stderr
        (floor,) = ResultStore(store).load("calibration").to_dict("records")
        assert floor["design"] == "blocks of 2 windows" and floor["runs"] == 3  # three blocks, judged paired
        pairs = [f"--runner={n}={r.address}" for n, r in zip("ab", runners)]
        in_blocks = fwbench(
            "compare",
            *SMALL_INFER,
            *SHORT_BLOCKS,
            "--repetitions",
            "3",
            *pairs,
            "--store",
            str(store),
            "--out",
            str(tmp_path / "blocks"),
        )
        in_rounds = fwbench(
            "compare",
            *SMALL_INFER,
            "--repetitions",
            "3",
            "--steps",
            "3",
            "--min-measure-s",
            "0",
            *pairs,
            "--store",
            str(store),
            "--out",
            str(tmp_path / "rounds"),
        )
    assert in_blocks.returncode == 0 and in_rounds.returncode == 0, in_blocks.stderr + in_rounds.stderr
    applied = pd.read_csv(only_run_dir(tmp_path / "blocks") / "comparison.csv")["noise_floor"]
    assert applied.tolist() == pytest.approx([floor["noise_floor"]] * len(applied), rel=1e-3)  # as the CSV rounds it
    assert pd.read_csv(only_run_dir(tmp_path / "rounds") / "comparison.csv")["noise_floor"].isna().all()


def test_calibrate_in_blocks_refuses_a_floor_precision_naming_the_option():
    done = fwbench_in_process("calibrate", "--design", "blocks", "--floor-precision-pct", "30")
    assert done.exit_code == 2 and "--floor-precision-pct" in done.output and "--repetitions" in done.output


def test_blocks_under_a_sequential_budget_look_at_half_of_it_and_at_its_end_spending_little_at_the_first():
    """compare in blocks looks at half its budget and at its end, spending as Hwang, Shih & DeCani's gamma -4 (looks
    after every block resolved 6.2% where they stopped on three sittings' blocks, looks at 4 and 8 3.8%); runs in
    rounds look after every round, spending by the Pocock type."""
    from fwbench_aggregator.analyse.judging import judged
    from fwbench_aggregator.analyse.sequential import (
        BLOCKS_SPENDING_GAMMA,
        DEFAULT_MAX_BLOCKS,
        SequentialPlan,
        block_looks,
    )

    assert (block_looks(DEFAULT_MAX_BLOCKS), block_looks(20), block_looks(7), block_looks(5)) == (
        (4, 8),
        (10, 20),
        (3, 7),
        (5,),
    )
    units = ("c-block0", "c-block1", "c-block2", "c-block3")
    fast = {
        "runner": "a",
        "max_repetitions": 8,
        "_units": units,
        "_medians": np.array([10e-3, 11e-3, 10.5e-3, 10.2e-3]),
    }
    slow = {
        "runner": "b",
        "max_repetitions": 8,
        "_units": units,
        "_medians": np.array([10.6e-3, 11.5e-3, 11.2e-3, 10.8e-3]),
    }
    verdict, outcome, in_blocks = judged(fast, slow, 0.02, math.nan)
    planned = SequentialPlan(max_runs=8, looks=(4, 8), spending_gamma=BLOCKS_SPENDING_GAMMA)
    assert in_blocks.alpha == pytest.approx(planned.level(4, paired=True))
    # 5% in blocks that vary by about 1% is called at the first look; at 3 blocks the plan has not looked yet.
    assert outcome == "different" and "faster" in verdict
    three = (
        {**fast, "_units": units[:3], "_medians": fast["_medians"][:3]},
        {**slow, "_units": units[:3], "_medians": slow["_medians"][:3]},
    )
    assert judged(*three, 0.02, math.nan)[1] == "continue"
    in_rounds = {**fast, "max_repetitions": 20, "_units": ()}, {**slow, "max_repetitions": 20, "_units": ()}
    _, _, rounds = judged(*in_rounds, 0.02, math.nan)
    assert rounds.alpha == pytest.approx(SequentialPlan(max_runs=20).level(4))
    # Gamma -4 leaves most of alpha to the budget's end: the Pocock type would spend about three times more at 4.
    assert in_blocks.alpha < SequentialPlan(max_runs=8, looks=(4, 8)).level(4, paired=True) / 3
