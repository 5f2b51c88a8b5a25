"""One rule for every path fwbench writes (base.write_paths), tested once per writer: a store and its insides, the
writer lock, `store bundle`'s file, MLflow's folder or SQLite file, --out and a report's folder. Each refusal is exit
status 2 with a one-line reason, before anything is written; a file that was there is unchanged (bytes and mtime).
"System folders" are stand-ins made in tmp_path (base.folders' lists, patched), or paths refused before anything is
written (/proc/self/x, and /etc/hosts given to the rule alone)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.cli import fwbench_in_process
from support.store_runs import run_frames

from fwbench_aggregator.base import folders
from fwbench_aggregator.base.write_paths import (
    WritePathError,
    open_own_file,
    output_folder,
    write_atomically,
    write_path_problem,
)
from fwbench_aggregator.run.launch import LocalRunner, fake_runner_command
from fwbench_aggregator.store import lock
from fwbench_aggregator.store.location import StorePathError, store_path_problem
from fwbench_aggregator.store.results_store import ResultStore

RUNNER = ("--runner", "first=127.0.0.1:1")  # never reached: each command is refused before it starts a run


def refused(*args: str) -> str:
    """The command's output on one line, having asserted it exited 2 without a traceback."""
    result = fwbench_in_process(*args, columns=400)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


def snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def a_store(root: Path) -> Path:
    store = ResultStore(root)
    store.append("aaaa", {"runner": "torch"}, run_frames("torch", 0.010), {})
    return root


@pytest.fixture
def system(tmp_path, monkeypatch) -> Path:
    """A stand-in system tree, refused with everything inside it as /etc is."""
    tree = tmp_path / "etc"
    (tree / "hosts").parent.mkdir()
    (tree / "hosts").write_text("127.0.0.1 localhost\n")
    monkeypatch.setattr(folders, "SYSTEM_TREES", (str(tree),))
    monkeypatch.setattr(folders, "SYSTEM_FOLDERS", (str(tree),))
    return tree


# --- the rule ---------------------------------------------------------------------------------------------------------


def test_the_rule_refuses_system_and_kernel_paths(tmp_path):
    assert "lies in a system folder" in write_path_problem(Path("/etc/hosts"), "file")
    assert "is a system folder" in write_path_problem(Path("/etc"), "folder")
    # The kernel's file systems, whatever the system folders are.
    assert "is under /proc, the kernel's own files" in write_path_problem(Path("/proc/self/x"), "file", trees=())
    assert "is under /sys" in write_path_problem(Path("/sys/kernel/x"), "folder", folders=(), trees=())
    assert write_path_problem(tmp_path / "new" / "bundle.tar.gz", "file") is None  # a file in /tmp is fine
    assert "is a system folder" in write_path_problem(tmp_path / "etc" / "x", "folder", trees=(str(tmp_path / "etc"),))


def test_the_rule_refuses_links_hard_links_and_the_wrong_kind(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "link").symlink_to(victim)
    os.link(victim, tmp_path / "hard")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    assert "link is a symbolic link (to " in write_path_problem(tmp_path / "link", "file")
    assert "hard has 2 hard links" in write_path_problem(tmp_path / "hard", "file")
    assert "fifo is a FIFO, not a regular file" in write_path_problem(tmp_path / "fifo", "file")
    assert "folder is a folder, not a file" in write_path_problem(tmp_path / "folder", "file")
    assert "victim is a regular file, not a folder" in write_path_problem(victim, "folder")
    assert f"cannot be made: {victim} is a regular file" in write_path_problem(victim / "x", "file")
    assert "/dev/null is under /dev" in write_path_problem(Path("/dev/null"), "file", folders=(), trees=())


def test_a_refused_or_failed_write_never_truncates_what_was_there(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.link(victim, tmp_path / "hard")
    before = snapshot(victim)
    with pytest.raises(WritePathError, match="hard links"):
        write_atomically(tmp_path / "hard", b"new")
    mine = tmp_path / "mine"
    mine.write_text("old")

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        write_atomically(mine, b"new")
    monkeypatch.undo()
    assert mine.read_text() == "old" and snapshot(victim) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard", "mine", "victim"]  # no temporary file left
    assert write_atomically(mine, b"new").read_text() == "new"


def test_an_own_file_is_opened_never_through_a_link_nor_a_fifo(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "link").symlink_to(victim)
    os.link(victim, tmp_path / "hard")
    os.mkfifo(tmp_path / "fifo")
    for name, said in (("link", "symbolic link"), ("hard", "2 hard links"), ("fifo", "a FIFO")):
        with pytest.raises(WritePathError, match=said):
            open_own_file(tmp_path / name, os.O_RDWR | os.O_CREAT)
    assert victim.read_text() == "precious"


# --- the store and its insides ----------------------------------------------------------------------------------------


def test_a_store_whose_runs_is_a_link_out_is_refused_before_anything_is_written(tmp_path):
    store, outside = a_store(tmp_path / "store"), tmp_path / "outside"
    outside.mkdir()
    os.rename(store / "runs", tmp_path / "runs-moved")
    (store / "runs").symlink_to(outside)
    said = refused("sweep", "--models", "resnet18", "--store", str(store), *RUNNER)
    assert f"Invalid value for '--store': {store / 'runs'} is a symbolic link (to {outside})" in said
    assert list(outside.iterdir()) == []
    with pytest.raises(StorePathError, match="runs is a symbolic link"):
        ResultStore(store).append("bbbb", {}, run_frames("torch", 0.01), {})  # the writer's own check
    assert list(outside.iterdir()) == []


def test_a_damaged_folder_that_is_a_link_is_refused_and_no_run_leaves_the_store(tmp_path):
    store, outside = a_store(tmp_path / "store"), tmp_path / "outside"
    outside.mkdir()
    (store / "runs" / "aaaa" / "summary.parquet").write_bytes(b"garbage")
    (store / "damaged").symlink_to(outside)
    said = refused("sweep", "--models", "resnet18", "--store", str(store), "--resume", *RUNNER)
    assert f"{store / 'damaged'} is a symbolic link inside the store {store}" in said
    with pytest.raises(StorePathError, match="damaged is a symbolic link"):
        ResultStore(store).set_damaged_aside(["aaaa"])
    assert list(outside.iterdir()) == [] and (store / "runs" / "aaaa").is_dir()


def test_a_writer_lock_with_another_name_is_never_truncated(tmp_path):
    store = a_store(tmp_path / "store")
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    os.link(precious, store / "writer.lock")
    before = snapshot(precious)
    said = refused("sweep", "--models", "resnet18", "--store", str(store), *RUNNER)
    assert f"{store / 'writer.lock'} has 2 hard links" in said
    with pytest.raises(StorePathError, match="2 hard links"):
        lock._open_lock(store / "writer.lock", os.O_RDWR | os.O_CREAT)  # made after the store's path was checked
    assert snapshot(precious) == before


def test_a_writer_lock_that_is_a_folder_is_refused_without_a_traceback(tmp_path):
    store = a_store(tmp_path / "store")
    (store / "writer.lock").mkdir()
    said = refused("sweep", "--models", "resnet18", "--store", str(store), *RUNNER)
    assert f"{store / 'writer.lock'} is a folder, not a file: it is the store's writer.lock; remove it" in said
    with pytest.raises(StorePathError, match="is a folder"):
        lock._open_lock(store / "writer.lock", os.O_RDWR | os.O_CREAT)
    assert "is a folder" in store_path_problem(store)


# --- store bundle's file --------------------------------------------------------------------------------------------


def test_store_bundle_refuses_a_system_file_a_folder_and_links(tmp_path, system):
    store = a_store(tmp_path / "store")
    hosts = system / "hosts"
    before = snapshot(hosts)
    assert "lies in a system folder" in refused("store", "bundle", str(hosts), "--store", str(store))
    assert snapshot(hosts) == before and sorted(p.name for p in system.iterdir()) == ["hosts"]
    (tmp_path / "folder").mkdir()
    assert "folder is a folder, not a file" in refused(
        "store", "bundle", str(tmp_path / "folder"), "--store", str(store)
    )
    os.link(hosts, tmp_path / "hard.tar.gz")
    (tmp_path / "link.tar.gz").symlink_to(tmp_path / "store" / "store.json")
    assert "has 2 hard links" in refused("store", "bundle", str(tmp_path / "hard.tar.gz"), "--store", str(store))
    assert "is a symbolic link" in refused("store", "bundle", str(tmp_path / "link.tar.gz"), "--store", str(store))
    assert "is under /proc" in refused("store", "bundle", "/proc/self/x", "--store", str(store))
    assert snapshot(hosts) == before and list(tmp_path.glob(".*")) == []
    assert fwbench_in_process("store", "bundle", str(tmp_path / "runs.tar.gz"), "--store", str(store)).exit_code == 0


# --- export mlflow's folder or SQLite file --------------------------------------------------------------------------


def test_export_mlflow_refuses_system_kernel_and_linked_places(tmp_path, system):
    store = str(a_store(tmp_path / "store"))
    for target, said in (
        (str(system), "is a system folder"),
        (f"sqlite:///{system}/fw.db", "lies in a system folder"),
        ("/proc/self/x", "is under /proc"),
        ("sqlite:////proc/self/fw.db", "is under /proc"),
    ):
        out = refused("export", "mlflow", "--store", store, "--tracking-uri", target)
        assert "invalid value for --tracking-uri" in out and said in out, target
    assert sorted(p.name for p in system.iterdir()) == ["hosts"]
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "elsewhere")
    assert "linked is a symbolic link" in refused(
        "export", "mlflow", "--store", store, "--tracking-uri", str(tmp_path / "linked")
    )
    (tmp_path / "ml").mkdir()
    os.link(system / "hosts", tmp_path / "ml" / "mlflow.db")
    assert "mlflow.db has 2 hard links" in refused(
        "export", "mlflow", "--store", store, "--tracking-uri", str(tmp_path / "ml")
    )
    (tmp_path / "ml2").mkdir()
    (tmp_path / "ml2" / "artifacts").symlink_to(tmp_path / "elsewhere")
    assert "artifacts is a symbolic link" in refused(
        "export", "mlflow", "--store", store, "--tracking-uri", str(tmp_path / "ml2")
    )
    assert sorted(p.name for p in system.iterdir()) == ["hosts"] and list((tmp_path / "elsewhere").iterdir()) == []


# --- --out and a report's folder ------------------------------------------------------------------------------------


def test_out_is_refused_in_a_system_folder_before_anything_runs(tmp_path, system):
    for command in (("compare", "--model", "resnet18"), ("factors", "--model", "resnet18"), ("parity",)):
        said = refused(*command, "--out", str(system / "results"), *RUNNER)
        assert f"Invalid value for '--out': {system / 'results'} ({system / 'results'}) is a system folder" in said
    assert "is under /proc" in refused("compare", "--model", "resnet18", "--out", "/proc/self/x", *RUNNER)
    assert sorted(p.name for p in system.iterdir()) == ["hosts"]


def test_a_report_never_writes_through_a_link_in_its_folder(tmp_path, system):
    store = a_store(tmp_path / "store")
    hosts = system / "hosts"
    before = snapshot(hosts)
    out = tmp_path / "report"
    (out / "plots").mkdir(parents=True)
    (out / "plots" / "ms_per_sample.png").symlink_to(hosts)
    said = refused("report", "--store", str(store), "--out", str(out))
    assert f"invalid value for --out: {out / 'plots' / 'ms_per_sample.png'} is a symbolic link" in said
    assert "is a system folder" in refused("report", "--store", str(store), "--out", str(system / "report"))
    assert snapshot(hosts) == before and sorted(p.name for p in out.iterdir()) == ["plots"]
    with pytest.raises(WritePathError, match="is a symbolic link"):
        output_folder(out)


def test_a_runners_log_is_never_written_through_a_link(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    (tmp_path / "torch-runner.log").symlink_to(precious)
    runner = LocalRunner("torch", fake_runner_command(), tmp_path / "torch-runner.log")
    with pytest.raises(WritePathError, match="symbolic link"):
        runner.start()
    assert precious.read_text() == "keep me\n" and runner.process is None
