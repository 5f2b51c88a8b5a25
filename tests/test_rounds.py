"""--repetitions auto: rounds until the verdict is settled (a difference, or equivalence), within the run and time
budgets; the rows, the store and the terminal say how many runs it took and why it stopped."""

from __future__ import annotations

import pandas as pd
import pytest
from support.cli import fwbench, only_run_dir
from support.fakes import Fake

from fwbench_aggregator.analyse.stopping import stop_reason
from fwbench_aggregator.store.results_store import ResultStore

QUICK = (
    "--model",
    "resnet18",
    "--batch-size",
    "2",
    "--shape",
    "3x32x32",
    "--warmup",
    "0",
    "--steps",
    "3",
    "--min-measure-s",
    "0",
)


def _rows(*outcomes: str) -> pd.DataFrame:
    return pd.DataFrame({"status": "ok", "outcome": ["", *outcomes]})


def test_the_rounds_stop_when_every_verdict_is_settled_and_say_why_otherwise():
    assert stop_reason(_rows("continue"), 3, 20) == ""
    assert stop_reason(_rows("different", "continue"), 5, 20) == ""
    assert stop_reason(_rows("different", "equivalent"), 5, 20) == "settled"
    assert stop_reason(_rows("unresolved"), 20, 20) == "run budget"
    assert stop_reason(_rows("unresolved"), 6, 20) == "futile"
    assert stop_reason(pd.DataFrame({"status": ["ok"], "outcome": [""]}), 3, 20) == ""


@pytest.fixture(scope="module")
def fast_and_slow(module_fakes):
    """A fake runner whose steps take 20 ms, and one whose take 30 ms: a ratio the verdict words as "faster by 50%"
    whatever the host adds (at 2 ms and 4 ms, a busy CI host's wake-up delays made it "2.1x faster"), and steps
    long beside those delays."""
    fast, slow = module_fakes(
        Fake("fast", step_s_by_setting="layout=channels_last:0.020"),
        Fake("slow", step_s_by_setting="layout=channels_last:0.030"),
    ).runners
    return fast.address, slow.address


@pytest.mark.slow
def test_a_clear_difference_is_called_after_the_fewest_runs(tmp_path, fast_and_slow):
    fast, slow = fast_and_slow
    done = fwbench(
        "compare", *QUICK, "--runner", f"fast={fast}", "--runner", f"slow={slow}", "--out", str(tmp_path), columns=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict (equal profile): fast faster by" in done.stdout
    assert "runs: 3/3 per runner (auto: stopped because the verdict was settled" in done.stdout
    table = pd.read_csv(only_run_dir(tmp_path) / "comparison.csv").set_index("runner")
    assert table.loc["slow", "outcome"] == "different" and set(table["max_repetitions"]) == {20}
    assert table["wall_s"].notna().all()
    # The store keeps the design, so a report judges the runs at the same looks' levels.
    summary = ResultStore(tmp_path / "store").load("summary")
    assert set(summary["max_repetitions"]) == {20}
    report = fwbench("report", "--store", str(tmp_path / "store"), columns=240)
    assert report.returncode == 0 and "fast faster by" in report.stdout


@pytest.mark.slow
def test_a_a_is_called_equivalent_within_the_minimum_effect_or_left_unresolved_at_the_budget(tmp_path, fast_and_slow):
    fast, _ = fast_and_slow
    twins = ("--runner", f"a={fast}", "--runner", f"b={fast}")
    done = fwbench("compare", *QUICK, *twins, "--min-effect", "0.2", "--out", str(tmp_path / "wide"), columns=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "equivalent within 20.0%" in done.stdout and "the verdict was settled" in done.stdout
    tight = fwbench(
        "compare",
        *QUICK,
        *twins,
        "--min-effect",
        "0",
        "--max-repetitions",
        "4",
        "--out",
        str(tmp_path / "tight"),
        columns=240,
    )
    assert tight.returncode == 0, tight.stdout + tight.stderr
    assert "runs: 4/4 per runner (auto: stopped because the run budget (--max-repetitions) was spent" in tight.stdout
    assert "not resolved after 4 runs per runner" in tight.stdout and "faster by" not in tight.stdout


@pytest.mark.slow
def test_a_number_of_repetitions_runs_exactly_that_and_a_bad_one_is_refused(tmp_path, fast_and_slow):
    fast, slow = fast_and_slow
    done = fwbench(
        "compare",
        *QUICK,
        "--repetitions",
        "4",
        "--runner",
        f"fast={fast}",
        "--runner",
        f"slow={slow}",
        "--out",
        str(tmp_path),
        columns=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    table = pd.read_csv(only_run_dir(tmp_path) / "comparison.csv")
    assert set(table["runs"]) == {4} and set(table["max_repetitions"]) == {0} and "runs: " not in done.stdout
    refused = fwbench("compare", *QUICK, "--repetitions", "often", "--runner", f"fast={fast}")
    assert refused.returncode == 2 and "accepted values: auto, or a number of runs" in " ".join(refused.stderr.split())


def test_a_comparison_where_nothing_ran_prints_no_rounds_line():
    from fwbench_aggregator.present.terminal import print_rounds

    print_rounds(pd.DataFrame(), "one runner left")  # every runner failed: no rows, no columns
    print_rounds(pd.DataFrame({"status": ["failed"], "runs": [0], "wall_s": [float("nan")]}), "one runner left")
