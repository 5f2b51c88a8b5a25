"""Warm-up by evidence in process blocks: the first block shows when a fresh process's steps settle, later blocks'
first windows warm up a count learned from it (fresh_warmup_steps), and each later block checks it."""

from __future__ import annotations

import grpc
import pandas as pd
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from support.cli import SHORT_BLOCKS, SMALL_INFER, fwbench, only_run_dir

from fwbench_aggregator.analyse.warmup import (
    MAX_LEARNED_STEPS,
    WARMUP_MARGIN_STEPS,
    learned_warmup_steps,
    settled_after,
    warmed_enough,
)
from fwbench_aggregator.app.block_warmup import BlockWarmup
from fwbench_aggregator.base.progress import Progress
from fwbench_aggregator.run import replies
from fwbench_aggregator.run.client import BlockPlace, RunResult


def test_steps_settle_where_every_later_run_of_three_keeps_within_a_tenth_of_the_pace():
    pace = 0.100
    assert settled_after([0.5, 0.3, 0.12, 0.105, 0.101, 0.099, 0.100], pace) == 2
    # One slow step among settled ones (a scheduler's hiccup) does not unsettle them; a lone slow first step is
    # covered by the learned count's margin.
    assert settled_after([0.5, 0.4, 0.1, 0.2, 0.1, 0.1], pace) == 2
    assert settled_after([0.5, 0.1, 0.1, 0.1], pace) == 0
    assert settled_after([0.1] * 6, pace) == 0
    # Steps that end above the pace never settled.
    assert settled_after([0.5, 0.1, 0.1, 0.13, 0.13, 0.13], pace) is None
    assert settled_after([], pace) is None


def test_the_learned_count_doubles_the_settling_step_with_a_margin_and_never_passes_the_rules_cap():
    assert learned_warmup_steps([0.5, 0.3, 0.2, 0.1, 0.1, 0.1], [0.1, 0.1]) == (2, 2 * 2 + WARMUP_MARGIN_STEPS)
    assert learned_warmup_steps([0.1] * 5, [0.1]) == (0, WARMUP_MARGIN_STEPS)
    slow_start = [1.0] * 40 + [0.1] * 10
    assert learned_warmup_steps(slow_start, [0.1]) == (
        39,
        MAX_LEARNED_STEPS,
    )  # the median of three absorbs the last slow step
    assert learned_warmup_steps([0.5, 0.5], [0.1]) is None
    assert learned_warmup_steps([], [0.1]) is None and learned_warmup_steps([0.1], []) is None


def test_a_first_window_warmed_enough_measures_within_a_tenth_of_its_blocks_later_windows_or_within_their_spread():
    assert warmed_enough(0.105, [0.1, 0.1, 0.102])
    assert not warmed_enough(0.115, [0.1, 0.1, 0.102])
    # Later windows that spread by more than the tolerance: a first window no slower than the slowest is their noise
    assert warmed_enough(0.118, [0.1, 0.1, 0.12])
    assert not warmed_enough(0.125, [0.1, 0.1, 0.12])
    assert warmed_enough(0.5, [])


def window(runner: str, block: int, number: int, median_s: float, warmup_s: tuple[float, ...] = ()) -> RunResult:
    steps = [replies.StepTiming(i, True, 0.0, s) for i, s in enumerate(warmup_s)]
    steps += [replies.StepTiming(len(steps) + i, False, 0.0, median_s) for i in range(3)]
    return RunResult(
        runner,
        "",
        replies.RunnerDescription(),
        steps=steps,
        summary=replies.Summary(median_step_time_s=median_s),
        block=BlockPlace("blocks of 4 windows", f"c-block{block}", number),
    )


class Notes(Progress):
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def note(self, text: str, level: str = "info") -> None:
        self.lines.append((text, level))


def test_each_runner_learns_from_its_first_block_and_one_that_fails_a_check_returns_to_the_rule_for_good():
    notes = Notes()
    warmup = BlockWarmup(notes)
    first = [
        window("torch", 0, 0, 0.1, (0.4, 0.3, 0.2, 0.1, 0.1, 0.1)),
        window("tensorflow", 0, 0, 0.2, (0.2,) * 6),
        *(window(name, 0, n, pace) for name, pace in (("torch", 0.1), ("tensorflow", 0.2)) for n in (1, 2, 3)),
    ]
    warmup.after_block(0, first)
    assert (warmup.steps_for("torch"), warmup.steps_for("tensorflow")) == (2 * 2 + 3, 3)
    assert (
        "torch kept its pace from warm-up step 3 of 6 in block 1: its later blocks warm up 7 steps" in notes.lines[0][0]
    )

    # Block 2: torch's first window, after its 7 steps, measured 30% slower than its later ones; TensorFlow's kept pace.
    second = [
        window("torch", 1, 0, 0.13, (0.1,) * 7),
        window("tensorflow", 1, 0, 0.2, (0.2,) * 3),
        *(window(name, 1, n, pace) for name, pace in (("torch", 0.1), ("tensorflow", 0.2)) for n in (1, 2, 3)),
    ]
    warmup.after_block(1, second)
    assert (warmup.steps_for("torch"), warmup.steps_for("tensorflow")) == (None, 3)
    text, level = notes.lines[-1]
    assert level == "warning" and "torch's block 2 measured its first window slower" in text and "until stable" in text
    # Its next block ran by the rule and settled again: it is not learned again.
    warmup.after_block(2, [window("torch", 2, 0, 0.1, (0.1,) * 5), window("torch", 2, 1, 0.1)])
    assert warmup.steps_for("torch") is None


@pytest.mark.slow
def test_a_compare_in_blocks_warms_later_blocks_up_the_learned_count(tmp_path, fakes):
    from support.fakes import Fake

    # Steps of 20 and 40 ms, windows of 10 of them: a sleep's overshoot on a loaded 2-core VM (a millisecond or more)
    # moved 2 ms steps past the 10% tolerance, and a CI run's blocks warmed up by the rule throughout.
    addresses = fakes(Fake("a", step_s=0.02), Fake("b", step_s=0.04)).addresses
    done = fwbench(
        "compare",
        *(f"--runner={name}={address}" for name, address in addresses.items()),
        *SMALL_INFER,
        *SHORT_BLOCKS,
        "--window-s",
        "0.2",
        "--repetitions",
        "3",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    summary = pd.read_parquet(only_run_dir(tmp_path) / "summary.parquet")
    firsts = summary[summary["block_window"] == 0].sort_values("started_at_unix_s")
    # The fakes' steps are alike from the first: the rule's 5 steady steps (and the window's refill) in block 1, the
    # learned WARMUP_MARGIN_STEPS after; every window of a block keeps one key, its windows' warm-up.
    for _, own in firsts.groupby("runner"):
        assert own["warmup_steps_run"].tolist()[1:] == [WARMUP_MARGIN_STEPS] * 2, own["warmup_steps_run"]
        assert own["warmup_steps_run"].iloc[0] > WARMUP_MARGIN_STEPS
    assert set(summary["warmup_steps"]) == {1}
    assert "its later blocks warm up 3 steps" in " ".join(done.stderr.split()), done.stderr


def test_a_fresh_warmup_outside_a_window_is_refused_naming_the_field(fake_runner):
    from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc

    with grpc.insecure_channel(fake_runner) as channel:
        stub = pb_grpc.RunnerStub(channel)
        request = pb.RunRequest(model="resnet18", mode=pb.MODE_INFER, batch_size=2, fresh_warmup_steps=3)
        with pytest.raises(grpc.RpcError) as caught:
            stub.CheckRun(request, timeout=60)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "fresh_warmup_steps" in caught.value.details() and "continue_reuse" in caught.value.details()
