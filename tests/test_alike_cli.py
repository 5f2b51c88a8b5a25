"""What a user does to a shared store, through fwbench with fake runners and planted step times: a rerun and a
framework upgrade into one store. The report keeps every run apart, splits what is not alike, and over a store that
holds one compare reproduces that compare's own table."""

from __future__ import annotations

import pandas as pd
import pytest
from support.cli import fwbench, only_run_dir
from support.fakes import Fake, started_fakes

pytestmark = pytest.mark.slow

RUN = [
    "--model",
    "resnet18",
    "--mode",
    "infer",
    "--batch-size",
    "2",
    "--shape",
    "3x32x32",
    "--warmup",
    "1",
    "--steps",
    "5",
    "--min-measure-s",
    "0",
    "--repetitions",
    "3",
]
# The same configuration in process blocks (the CPU default), which take no whole-run warm-up or step count.
IN_BLOCKS = [*RUN[:8], "--repetitions", "3", "--design", "blocks"]
FIGURES = ["runs", "median_step_ms", "ratio_to_fastest", "ratio_ci_low", "ratio_ci_high", "verdict"]


def _compare(tmp_path, store, out, versions: dict[str, tuple[str, str]], run: list[str] = RUN) -> str:
    """One compare of the configuration by runners named torch and tensorflow: {runner: (version, step seconds)}."""
    fakes = [
        Fake(name, step_s=float(step_s), framework=name, version=version)
        for name, (version, step_s) in versions.items()
    ]
    with started_fakes(tmp_path, *fakes) as started:
        done = fwbench("compare", *run, *started.runner_args(), "--store", str(store), "--out", str(out))
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stderr


def _report(store, out, *selection: str) -> pd.DataFrame:
    done = fwbench("report", "--store", str(store), "--out", str(out), *selection, columns=80)
    assert done.returncode == 0, done.stdout + done.stderr
    return pd.read_csv(out / "comparison.csv").set_index("runner")


def test_a_rerun_and_an_upgrade_in_one_store_are_reported_apart_and_one_compare_reproduces_itself(tmp_path):
    shared, alone = tmp_path / "store", tmp_path / "alone"
    first_out = tmp_path / "first"
    said = _compare(tmp_path, alone, first_out, {"torch": ("2.14.0", "0.010"), "tensorflow": ("2.21.0", "0.012")})
    # The report over a store holding one compare reproduces the compare's own table exactly.
    own = pd.read_csv(only_run_dir(first_out) / "comparison.csv").set_index("runner")
    reported = _report(alone, tmp_path / "report-alone")
    pd.testing.assert_frame_equal(reported.loc[own.index, FIGURES], own[FIGURES])
    # So does the report the compare wrote of its own runs, and it says where that is.
    own_report = only_run_dir(first_out) / "report" / "report.html"
    assert f"report: {own_report}" in " ".join(said.split())
    in_report = pd.read_csv(own_report.parent / "comparison.csv").set_index("runner")
    pd.testing.assert_frame_equal(in_report.loc[own.index, FIGURES], own[FIGURES])

    # The same compare again, then torch upgraded: one store, as users fill it.
    _compare(tmp_path, shared, tmp_path / "o1", {"torch": ("2.14.0", "0.010"), "tensorflow": ("2.21.0", "0.012")})
    _compare(tmp_path, shared, tmp_path / "o2", {"torch": ("2.14.0", "0.010"), "tensorflow": ("2.21.0", "0.012")})
    _compare(tmp_path, shared, tmp_path / "o3", {"torch": ("2.15.0", "0.016"), "tensorflow": ("2.21.0", "0.012")})
    table = _report(shared, tmp_path / "report-shared")
    # The store's report holds the upgrade's section; a compare's own, of one version each, holds none.
    page = (tmp_path / "report-shared" / "report.html").read_text()
    assert ">Framework versions side by side</h2>" in page and "2.14.0" in page and "2.15.0" in page
    assert "Framework versions" not in own_report.read_text()
    assert set(table.index) == {"torch (version 2.14.0)", "torch (version 2.15.0)", "tensorflow"}
    # The rerun's runs add up, none merged by repetition number; the upgrade is a row of its own.
    assert table["runs"].to_dict() == {"torch (version 2.14.0)": 6, "torch (version 2.15.0)": 3, "tensorflow": 9}
    assert table.loc["torch (version 2.14.0)", "verdict"] == "fastest"
    assert table.loc["torch (version 2.15.0)", "median_step_ms"] > table.loc["tensorflow", "median_step_ms"]
    assert bool(table.loc["torch (version 2.15.0)", "significant"])

    # One compare's runs, or one version's, chosen from the shared store.
    first = only_run_dir(tmp_path / "o1").name
    chosen = _report(shared, tmp_path / "report-first", "--compare", first)
    assert chosen["runs"].to_dict() == {"torch": 3, "tensorflow": 3}
    upgraded = _report(shared, tmp_path / "report-upgraded", "--where", "framework_version=2.15.0")
    assert upgraded["runs"].to_dict() == {"torch": 3}
    refused = fwbench("report", "--store", str(shared), "--where", "version=2.15.0")
    assert refused.returncode == 2 and "'version' is no column" in " ".join(refused.stderr.split())


def test_a_store_of_two_versions_each_compared_in_blocks_reports_why_they_are_not_judged(tmp_path):
    store = tmp_path / "store"
    _compare(
        tmp_path, store, tmp_path / "o1", {"torch": ("2.14.0", "0.010"), "tensorflow": ("2.21.0", "0.012")}, IN_BLOCKS
    )
    _compare(
        tmp_path, store, tmp_path / "o2", {"torch": ("2.15.0", "0.010"), "tensorflow": ("2.21.0", "0.012")}, IN_BLOCKS
    )
    table = _report(store, tmp_path / "report")
    assert set(table.index) == {"torch (version 2.14.0)", "torch (version 2.15.0)", "tensorflow"}
    # Each torch version shares blocks with tensorflow, never with the other torch: whichever is fastest, the other
    # torch says why it has no verdict, and tensorflow (in every block) is judged against it.
    fastest = table[table["verdict"] == "fastest"].index.item()
    other = ({"torch (version 2.14.0)", "torch (version 2.15.0)"} - {fastest}).pop()
    assert fastest.startswith("torch") and "no blocks in common" in table.loc[other, "verdict"]
    assert table.loc["tensorflow", "blocks"] == 6 and "faster" in table.loc["tensorflow", "verdict"]
