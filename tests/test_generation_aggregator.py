"""Generation through the aggregator: `fwbench compare --mode generate` judges time to first token and decode time per
token as it judges step times, stores the figures and the new tokens, writes generation.csv and prints the table; an
A/A comparison of generation calls no difference; --new-tokens outside mode generate is refused."""

from __future__ import annotations

import pandas as pd
import pytest
from support.cli import fwbench, fwbench_in_process, only_run_dir
from support.fakes import Fake, started_fakes

from fwbench_aggregator.analyse.generation import DECODE_PER_TOKEN, TIME_TO_FIRST_TOKEN
from fwbench_aggregator.store.results_store import ResultStore

GENERATE = (
    "--model",
    "gpt2_small",
    "--mode",
    "generate",
    "--shape",
    "seq=8",
    "--new-tokens",
    "4",
    "--batch-size",
    "2",
    "--steps",
    "3",
    "--min-measure-s",
    "0",
    "--design",
    "rounds",
    "--repetitions",
    "4",
)


def _runner_flags(fakes) -> list[str]:
    return [f"--runner={r.name}={r.address}" for r in fakes.runners]


@pytest.mark.slow
def test_generation_is_judged_per_figure_stored_and_printed(tmp_path):
    with started_fakes(tmp_path, Fake("quick", step_s=0.004), Fake("slow", step_s=0.008)) as fakes:
        done = fwbench("compare", *GENERATE, *_runner_flags(fakes), "--out", str(tmp_path), columns=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "generation: 4 new tokens" in done.stdout
    rows = pd.read_csv(only_run_dir(tmp_path) / "generation.csv")
    assert set(rows["figure"]) == {TIME_TO_FIRST_TOKEN, DECODE_PER_TOKEN} and set(rows["new_tokens"]) == {4}
    for figure in (TIME_TO_FIRST_TOKEN, DECODE_PER_TOKEN):
        own = rows[rows["figure"] == figure].set_index("runner")
        assert own.loc["quick", "verdict"] == "fastest" and own.loc["slow", "significant"]
        assert own.loc["slow", "verdict"].startswith("quick faster by")
    decode = rows[rows["figure"] == DECODE_PER_TOKEN]
    assert (decode["decode_tokens_per_s"] - 2 / (decode["value_ms"] / 1e3)).abs().max() < 1e-6
    assert set(rows["same_tokens"]) == {"yes"}
    summary = ResultStore(tmp_path / "store").load("summary")
    assert set(summary["new_tokens"]) == {4} and summary["tokens_sha256"].nunique() == 1
    assert (summary["decode_tokens_per_s"] > 0).all() and (summary["median_time_to_first_token_s"] > 0).all()
    steps = ResultStore(tmp_path / "store").load("steps")
    assert steps["time_to_first_token_s"].notna().all() and steps["decode_time_s"].notna().all()


@pytest.mark.slow
def test_an_a_a_comparison_of_generation_calls_no_difference(tmp_path):
    with started_fakes(tmp_path, Fake("a", step_s=0.004), Fake("b", step_s=0.004)) as fakes:
        done = fwbench("compare", *GENERATE, *_runner_flags(fakes), "--out", str(tmp_path), columns=240)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = pd.read_csv(only_run_dir(tmp_path) / "generation.csv")
    assert len(rows) == 4 and not rows["significant"].any(), rows[["figure", "runner", "verdict"]]


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_new_tokens_outside_mode_generate_is_refused_naming_the_option(mode):
    done = fwbench_in_process("compare", "--mode", mode, "--new-tokens", "8")
    assert (
        done.exit_code == 2 and "--new-tokens" in done.output and "mode generate only" in " ".join(done.output.split())
    )
