"""A store's path and its own integrity: a --store (or a Slurm submission's store) that names no place for a store is
refused before anything is written; the writer lock is never opened through a link; every file a run writes is
checked against the checksums its manifest records, so a changed byte makes a named damaged run, never a changed
figure; a run of a newer store format, or a valid Parquet file that is no frame of its run, is left out by name."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli import fwbench_in_process
from support.store_runs import run_frames

from fwbench_aggregator.app.store_check import check_store
from fwbench_aggregator.app.study import pending_runs
from fwbench_aggregator.base import folders
from fwbench_aggregator.plan.command_line_sweep import sweep_from_options
from fwbench_aggregator.plan.spec import StartupSettings
from fwbench_aggregator.store import lock
from fwbench_aggregator.store.integrity import CHECKSUM_KEY, FILES_KEY
from fwbench_aggregator.store.location import StorePathError, store_path_problem
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_aggregator.store.schema import STORE_FORMAT

WRITTEN = ("store.json", "writer.lock", "runs")


def nothing_written(folder: Path) -> bool:
    return not any(os.path.lexists(folder / name) for name in WRITTEN)


def refused(*args: str) -> str:
    """The command's output, having asserted it exited 2 without a traceback."""
    result = fwbench_in_process(*args, columns=400)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


# --- where a store may be --------------------------------------------------------------------------------------------


def test_a_folder_holding_other_files_is_no_store(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    said = refused("sweep", "--models", "resnet18", "--store", str(tmp_path), "--runner", "first=127.0.0.1:1")
    assert f"{tmp_path} holds files (notes.txt, ...) but no store.json: it is not a results store" in said
    assert nothing_written(tmp_path)
    # A store: store.json, runs/ from before store.json, a sweep's lock alone, or a Slurm submission whose job has
    # stored nothing yet; and an empty folder.
    for mark in ("store.json", "runs", "writer.lock", "slurm"):
        folder = tmp_path / mark.replace(".", "_")
        folder.mkdir()
        (folder / mark).mkdir() if mark in ("runs", "slurm") else (folder / mark).write_text("{}")
        (folder / "report").mkdir()
        assert store_path_problem(folder) is None
    (tmp_path / "empty").mkdir()
    assert store_path_problem(tmp_path / "empty") is None


def test_system_folders_and_the_home_folder_are_refused(tmp_path, monkeypatch):
    for path in ("/", "/etc", "/usr", "/usr/lib/store", "/proc/self", "/var", "/tmp", "/root", "/etc/fwbench/store"):
        assert "is a system folder" in store_path_problem(Path(path), home=tmp_path / "home"), path
    assert "is your home folder" in store_path_problem(tmp_path, home=tmp_path)
    assert store_path_problem(Path("/var/tmp/fwbench-store-never-made")) is None  # inside /var/tmp: a store's place
    # On the command line, with the lists standing in for the system's: refused before anything is written.
    monkeypatch.setattr(folders, "SYSTEM_FOLDERS", (str(tmp_path / "system"),))
    monkeypatch.setattr(folders, "SYSTEM_TREES", (str(tmp_path / "tree"),))
    for store in (tmp_path / "system", tmp_path / "tree" / "deep" / "store"):
        said = refused("sweep", "--models", "resnet18", "--store", str(store), "--runner", "first=127.0.0.1:1")
        assert f"invalid value for '--store': {store} ({store}) is a system folder".lower() in said.lower()
    assert not (tmp_path / "system").exists() and not (tmp_path / "tree").exists()


def test_a_link_out_of_its_folder_is_refused_and_one_within_it_is_a_store(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "elsewhere").mkdir()
    out = tmp_path / "results" / "store"
    out.symlink_to(tmp_path / "elsewhere")
    said = refused("report", "--store", str(out))
    assert f"{out} is a symbolic link to {tmp_path / 'elsewhere'}, out of its folder {tmp_path / 'results'}" in said
    root = tmp_path / "results" / "root"
    root.symlink_to("/")
    assert "is a symbolic link to /, out of its folder" in refused("store", "check", "--store", str(root))
    (tmp_path / "results" / "store-2").mkdir()
    within = tmp_path / "results" / "current"
    within.symlink_to("store-2")
    assert store_path_problem(within) is None
    dangling = tmp_path / "results" / "gone"
    dangling.symlink_to("never-made")
    assert "which does not exist" in store_path_problem(dangling)
    assert nothing_written(tmp_path / "elsewhere")


def test_a_file_or_fifo_is_no_store_and_a_missing_parent_is_made(tmp_path):
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    assert f"{tmp_path / 'file'} is a regular file, not a folder" in refused(
        "report", "--store", str(tmp_path / "file")
    )
    assert "is a FIFO, not a folder" in refused("store", "check", "--store", str(tmp_path / "fifo"))
    assert f"cannot be made: {tmp_path / 'file'} is a regular file" in store_path_problem(tmp_path / "file" / "store")
    # A store whose folders do not exist yet: made by the writer, as mkdir -p would (docs/studies.md).
    deep = tmp_path / "new" / "results" / "store"
    assert store_path_problem(deep) is None
    with lock.store_lock(deep):
        assert (deep / "writer.lock").is_file()


def test_compare_checks_its_default_store_under_out(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "mine.txt").write_text("x")
    said = refused("compare", "--model", "resnet18", "--out", str(tmp_path), "--runner", "a=127.0.0.1:1")
    assert "invalid value for --out" in said and "it is not a results store" in said


def test_the_writer_lock_is_never_opened_through_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    store = tmp_path / "store"
    store.mkdir()
    (store / "writer.lock").symlink_to(victim)
    assert "writer.lock is a symbolic link" in refused("store", "check", "--store", str(store))
    with pytest.raises(StorePathError, match="is a symbolic link"):
        with lock.store_lock(store):
            pass
    # O_NOFOLLOW itself, for a link made after the path was checked.
    with pytest.raises(StorePathError, match="is a symbolic link"):
        lock._open_lock(store / "writer.lock", os.O_RDWR | os.O_CREAT)
    with pytest.raises(StorePathError, match="is a symbolic link"):
        lock.holder(store)
    assert victim.read_text() == "precious"


def test_a_slurm_jobs_store_is_checked_before_its_lock(tmp_path):
    from fwbench_aggregator.app.slurm import run_job
    from fwbench_aggregator.run.slurm import SlurmError

    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("x")
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "submission.json").write_text(
        json.dumps(
            {"store": str(tmp_path / "etc"), "frameworks": ["torch"], "venvs": "", "slurm": {}, "runner_per_gpu": False}
        )
    )
    with pytest.raises(SlurmError, match="it is not a results store"):
        run_job(folder)
    assert nothing_written(tmp_path / "etc")


# --- a store's own integrity ----------------------------------------------------------------------------------------


def two_runs(root: Path) -> ResultStore:
    store = ResultStore(root)
    store.append("aaaa", {"runner": "torch"}, run_frames("torch", 0.010), {"command": ["fwbench", "sweep"]})
    store.append("bbbb", {"runner": "tensorflow"}, run_frames("tensorflow", 0.012), {"host": "h\u00e9"})
    return ResultStore(root)


def figures(store: ResultStore) -> dict:
    """Every figure a report reads from the store, by run."""
    summary, steps = store.load("summary"), store.load("steps")  # a run is checked when its data is read
    return {
        key: (
            store.config(key),
            summary.query("run_key == @key").to_dict("records"),
            steps.query("run_key == @key").to_dict("records"),
        )
        for key in sorted(store.keys())
    }


def test_every_file_a_run_writes_is_recorded_with_its_checksum(tmp_path):
    store = two_runs(tmp_path)
    manifest = store.manifest("aaaa")
    assert set(manifest[FILES_KEY]) == {"config.json", "steps.parquet", "summary.parquet"}
    for name, record in manifest[FILES_KEY].items():
        assert record["size_bytes"] == (tmp_path / "runs" / "aaaa" / name).stat().st_size
        assert len(record["sha256"]) == 64
    assert len(manifest[CHECKSUM_KEY]) == 64 and manifest["store_format"] == STORE_FORMAT
    assert store.damaged() == [] and store.keys() == {"aaaa", "bbbb"}


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("stored")
    return root, figures(two_runs(root))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(["config.json", "manifest.json", "steps.parquet", "summary.parquet"]),
    where=st.floats(0, 1, exclude_max=True),
    bit=st.integers(0, 7),
)
def test_a_flipped_bit_never_changes_a_figure_and_always_names_its_run(stored, tmp_path_factory, name, where, bit):
    original, before = stored
    root = tmp_path_factory.mktemp("flipped")
    shutil.copytree(original, root, dirs_exist_ok=True)
    path = root / "runs" / "aaaa" / name
    data = bytearray(path.read_bytes())
    offset = int(where * len(data))
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))
    store = ResultStore(root)
    after = figures(store)
    damaged = {d.key for d in store.damaged()}
    if "aaaa" in damaged:
        assert after == {"bbbb": before["bbbb"]} and damaged == {"aaaa"}
        assert not store.has("aaaa")  # a resume runs it again
    else:  # the flip left the bytes' meaning unchanged (checksums allow it only where the meaning is the same)
        assert after == before, f"{name} byte {offset} bit {bit}"


def test_a_run_from_before_checksums_still_reads(tmp_path):
    two_runs(tmp_path)
    path = tmp_path / "runs" / "aaaa" / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in manifest.items() if k not in (FILES_KEY, CHECKSUM_KEY)}))
    store = ResultStore(tmp_path)
    assert store.keys() == {"aaaa", "bbbb"} and store.damaged() == []
    # A seal without its files (or the reverse) is no run from before checksums.
    path.write_text(json.dumps({k: v for k, v in manifest.items() if k != FILES_KEY}))
    assert [d.key for d in ResultStore(tmp_path).damaged()] == ["aaaa"]


def test_a_changed_file_is_named_by_store_check(tmp_path):
    two_runs(tmp_path)
    summary = tmp_path / "runs" / "aaaa" / "summary.parquet"
    pd.DataFrame([{"run_key": "aaaa", "runner": "torch", "status": "ok", "median_step_time_s": 0.001}]).to_parquet(
        summary
    )
    (tmp_path / "runs" / "bbbb" / "extra.parquet").write_bytes(
        (tmp_path / "runs" / "bbbb" / "steps.parquet").read_bytes()
    )
    health = check_store(tmp_path)
    reasons = {(d.key, d.path.name): d.reason for d in health.damaged}
    assert "sha256 or size differs from the run's manifest" in reasons["aaaa", "summary.parquet"]
    assert "not recorded in the run's manifest" in reasons["bbbb", "extra.parquet"]
    assert health.runs == 0


def test_a_run_of_a_newer_format_is_left_out_by_name_and_the_rest_reads(tmp_path):
    two_runs(tmp_path)
    path = tmp_path / "runs" / "aaaa" / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "store_format": STORE_FORMAT + 1}))
    store = ResultStore(tmp_path)
    assert len(store.load("summary")) == 1 and store.keys() == {"bbbb"}  # checked when its data is read
    health = check_store(tmp_path)
    assert [(d.key, d.path.name) for d in health.damaged] == [("aaaa", "manifest.json")]
    assert f"newer fwbench (store format {STORE_FORMAT + 1})" in health.damaged[0].reason
    said = " ".join(fwbench_in_process("report", "--store", str(tmp_path), columns=400).output.split())
    assert "manifest.json" in said and "Traceback" not in said


def test_a_parquet_file_that_is_no_frame_of_its_run_makes_it_damaged_not_done(tmp_path):
    store = ResultStore(tmp_path)
    sweep = sweep_from_options(models="resnet18", batch_sizes="8", runners="torch", repetitions=1)
    ((key, configuration),) = pending_runs(sweep.configurations(), store, StartupSettings())[0]
    # Written whole and sealed, but a summary without status or runner: a phantom failed point, counted done.
    store.append(key, configuration.key_fields(), {"summary": pd.DataFrame([{"median_step_time_s": 0.01}])}, {})
    reopened = ResultStore(tmp_path)
    (damage,) = reopened.damaged()
    assert damage.key == key and "not a summary of this store: no runner, status column" in damage.reason
    assert reopened.load("summary").empty and reopened.run_keys() == set()
    pending, done = pending_runs(sweep.configurations(), reopened, StartupSettings())
    assert [k for k, _ in pending] == [key] and done == []
    # Another run's frame copied in: its run_key names the other run.
    reopened.set_damaged_aside([key])
    reopened.append(key, configuration.key_fields(), run_frames("torch", 0.01), {})
    reopened.append("other", {}, run_frames("tensorflow", 0.01), {})
    runs = tmp_path / "runs"
    manifest = json.loads((runs / key / "manifest.json").read_text())
    shutil.copy(runs / "other" / "summary.parquet", runs / key / "summary.parquet")
    (runs / key / "manifest.json").write_text(
        json.dumps({k: v for k, v in manifest.items() if k not in (FILES_KEY, CHECKSUM_KEY)})
    )  # unsealed
    (damage,) = ResultStore(tmp_path).damaged()
    assert damage.key == key and "run_key column holds ['other']" in damage.reason
