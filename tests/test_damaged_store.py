"""A damaged store: a garbled summary.parquet and a truncated steps.parquet leave their runs out of every read, whole;
the report covers the rest and names them, `fwbench store check` lists them and exits 1, and a resume runs them
again, keeping the damaged files aside."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from support.cli import fwbench

from fwbench_aggregator.store.results_store import AlreadyStored, ResultStore
from fwbench_aggregator.store.schema import STORE_FORMAT

GARBLE = b"PAR1 not a parquet file any more PAR1"


def garble(path: Path) -> bytes:
    path.write_bytes(GARBLE)
    return GARBLE


def truncate(path: Path) -> bytes:
    data = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(data)
    return data


def frames(runner: str, rows: int = 4) -> dict[str, pd.DataFrame]:
    steps = pd.DataFrame({"runner": runner, "step_index": range(rows), "step_time_s": [0.01] * rows})
    summary = pd.DataFrame([{"runner": runner, "status": "ok", "error": "", "median_step_time_s": 0.01}])
    return {"steps": steps, "summary": summary}


@pytest.fixture()
def damaged(tmp_path) -> ResultStore:
    """Runs a, b, c: a's summary garbled, b's steps truncated, c whole."""
    store = ResultStore(tmp_path)
    for key in "abc":
        store.append(key, {"runner": key}, frames(key), {})
    garble(tmp_path / "runs" / "a" / "summary.parquet")
    truncate(tmp_path / "runs" / "b" / "steps.parquet")
    return ResultStore(tmp_path)


def test_an_unreadable_file_leaves_its_run_out_of_every_read_whole(damaged, tmp_path):
    # b's summary reads, but half a run is never pooled: its summary is left out with its steps. A run is checked
    # when its data is read; the store's listing (its catalog) leaves it out from then on.
    assert set(damaged.load("summary")["run_key"]) == set(damaged.load("steps")["run_key"]) == {"c"}
    assert damaged.keys() == damaged.run_keys() == {"c"}
    assert list(damaged.configs()["run_key"]) == ["c"]
    assert not damaged.has("a") and damaged.occupied("a") and damaged.has("c")
    found = {(d.key, d.path.name): d.reason for d in damaged.damaged()}
    assert set(found) == {("a", "summary.parquet"), ("b", "steps.parquet")}
    assert "Parquet" in found["a", "summary.parquet"] and found["b", "steps.parquet"]
    assert all(d.path == tmp_path / "runs" / d.key / d.path.name for d in damaged.damaged())


def test_a_damaged_run_in_the_way_of_a_write_is_kept_aside_never_deleted(damaged, tmp_path):
    damaged.append("a", {"runner": "a"}, frames("a"), {})
    assert len(damaged.load("summary")) == 2 and damaged.keys() == {"a", "c"}
    (kept,) = (tmp_path / "damaged").glob("*/a")
    assert (kept / "summary.parquet").read_bytes() == GARBLE
    assert (kept / "damaged.txt").read_text().startswith("summary.parquet: ")
    assert [d.key for d in damaged.damaged()] == ["b"]


def test_a_damaged_store_file_is_named_and_replaced_by_the_next_write(tmp_path):
    store = ResultStore(tmp_path)
    store.append("a", {"runner": "a"}, frames("a"), {})
    garble(tmp_path / "store.json")
    reopened = ResultStore(tmp_path)  # each run's manifest still says its format
    assert [(d.path.name, d.key) for d in reopened.damaged()] == [("store.json", "")]
    assert reopened.keys() == {"a"}
    reopened.append("b", {"runner": "b"}, frames("b"), {})
    assert json.loads((tmp_path / "store.json").read_text()) == {"store_format": STORE_FORMAT}
    assert [p.read_bytes() for p in (tmp_path / "damaged").glob("*/store.json")] == [GARBLE]
    assert ResultStore(tmp_path).damaged() == []


def test_a_key_another_writer_stored_first_keeps_this_write_aside(tmp_path):
    store = ResultStore(tmp_path)
    store.append("a", {"runner": "a"}, frames("a", rows=3), {})
    with pytest.raises(AlreadyStored, match="append-only") as taken:
        store.append("a", {"runner": "a"}, frames("a", rows=7), {"writer": "second"})
    assert taken.value.kept.parent == tmp_path / "duplicates"
    assert len(pd.read_parquet(taken.value.kept / "steps.parquet")) == 7
    assert json.loads((taken.value.kept / "manifest.json").read_text())["writer"] == "second"
    assert len(store.load("steps")) == 3 and store.partials() == []


# --- end to end, on a sweep's store ------------------------------------------------------------------------------

SWEEP = (
    "runners: [first, second]\nmodels: [resnet18]\nmodes: [infer]\nbatch_sizes: [1, 2, 4]\nshapes: [3x32x32]\n"
    "warmup: 1\nsteps: 2\nmin_measure_s: 0\nrepetitions: 1\n"
)


@pytest.fixture(scope="module")
def swept(tmp_path_factory, fake_address) -> tuple[list[str], Path]:
    """The sweep's command line and the store it wrote, whole: each test damages a copy."""
    folder = tmp_path_factory.mktemp("swept")
    (folder / "sweep.yaml").write_text(SWEEP)
    args = [
        "sweep",
        str(folder / "sweep.yaml"),
        "--store",
        str(folder / "store"),
        "--runner",
        f"first={fake_address}",
        "--runner",
        f"second={fake_address}",
        "--no-report",
    ]
    done = fwbench(*args)
    assert done.returncode == 0, done.stderr
    return args, folder / "store"


def damaged_copy(swept, tmp_path) -> tuple[list[str], Path, dict[Path, bytes]]:
    """A copy of the swept store with one run's summary garbled and another's steps truncated; the sweep's command
    line into it, and the damaged files with what they hold."""
    args, original = swept
    store = tmp_path / "store"
    shutil.copytree(original, store)
    summary = ResultStore(store).load("summary").sort_values(["runner", "batch_size"])
    first, second = summary["run_key"].iloc[0], summary["run_key"].iloc[-1]
    summary_file, steps_file = store / "runs" / first / "summary.parquet", store / "runs" / second / "steps.parquet"
    files = {summary_file: garble(summary_file), steps_file: truncate(steps_file)}
    return [*args[:3], str(store), *args[4:]], store, files


@pytest.mark.slow
def test_store_check_names_each_damaged_file_and_exits_1(swept, tmp_path):
    healthy = fwbench("store", "check", "--store", str(swept[1]))
    assert healthy.returncode == 0, healthy.stderr
    said = " ".join(healthy.stdout.split())
    assert f"format {STORE_FORMAT}, 6 runs readable" in said and "damaged: none" in said and "writer: none" in said

    _, store, files = damaged_copy(swept, tmp_path)
    check = fwbench("store", "check", "--store", str(store), columns=400)
    assert check.returncode == 1, check.stderr
    assert "4 runs readable" in check.stdout and "damaged: 2 file(s)" in check.stdout
    for path in files:
        (line,) = [line for line in check.stdout.splitlines() if str(path) in line]
        assert "Error" in line or "Invalid" in line  # the reason, as the reader met it

    missing = fwbench("store", "check", "--store", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no results store" in missing.stderr


@pytest.mark.slow
def test_report_covers_the_intact_runs_and_names_the_damaged_files(swept, tmp_path):
    _, store, files = damaged_copy(swept, tmp_path)
    done = fwbench("report", "--store", str(store), columns=400)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "left out of the report" in done.stderr and all(str(path) in done.stderr for path in files)
    assert len(pd.read_csv(store / "report" / "comparison.csv")) == 4  # 6 runs, one row each, less the 2 damaged
    page = (store / "report" / "report.html").read_text()
    assert "Left out: damaged files" in page and all(str(path) in page for path in files)


@pytest.mark.slow
def test_resume_runs_the_damaged_runs_again_and_keeps_their_files(swept, tmp_path):
    args, store, files = damaged_copy(swept, tmp_path)
    done = fwbench(*args, "--resume", columns=400)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "2 runs to do, 4 already in" in said and "2 damaged run(s) run again; their files are kept in" in said
    assert all(str(path) in done.stderr for path in files)
    for path, held in files.items():
        (kept,) = (store / "damaged").glob(f"*/{path.parent.name}/{path.name}")
        assert kept.read_bytes() == held
    assert len(ResultStore(store).run_keys()) == 6
    assert fwbench("store", "check", "--store", str(store)).returncode == 0
