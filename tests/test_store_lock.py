"""Two writers of one store: a sweep holds the store's writer lock, saying who it is; a second one waits for it, or
is refused with a message naming the holder after its wait; neither ends in a traceback, and no measured run is
lost, even one whose key another writer stored first."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pandas as pd
import pytest
from support.cli import fwbench, fwbench_in_process

from fwbench_aggregator.app import study as study_module
from fwbench_aggregator.app.study import pending_runs, store_callbacks
from fwbench_aggregator.base.progress import Progress
from fwbench_aggregator.plan.command_line_sweep import sweep_from_options
from fwbench_aggregator.plan.keys import new_run_id
from fwbench_aggregator.run.connection import Transport
from fwbench_aggregator.run.launch import StartupSettings
from fwbench_aggregator.run.study import run_sweep
from fwbench_aggregator.store import lock
from fwbench_aggregator.store.results_store import ResultStore


class Notes(Progress):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, text: str, level: str = "info") -> None:
        self.lines.append(text)


def test_the_holder_says_who_it_is_and_a_second_writer_is_refused_after_its_wait(tmp_path):
    notes = Notes()
    with lock.store_lock(tmp_path):
        held = lock.holder(tmp_path)
        assert held.startswith(f"pid {os.getpid()} on ") and "since " in held
        started = time.monotonic()
        with pytest.raises(lock.StoreBusy) as busy:
            with lock.store_lock(tmp_path, notes, wait_s=0.5):
                pass
        assert 0.5 <= time.monotonic() - started < 5
    assert held in str(busy.value) and "--resume" in str(busy.value) and "another --store" in str(busy.value)
    assert notes.lines == [f"{tmp_path} is being written by {held}: waiting for it, 0.5 s at most"]
    assert lock.holder(tmp_path) is None


def test_a_second_writer_waits_for_the_first_and_says_how_long(tmp_path):
    notes = Notes()
    first = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with lock.store_lock(tmp_path):
            first.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    first.wait()
    threading.Timer(0.5, release.set).start()
    with lock.store_lock(tmp_path, notes, wait_s=30):
        assert lock.holder(tmp_path).startswith(f"pid {os.getpid()} ")
    holder.join()
    assert len(notes.lines) == 2 and notes.lines[0].endswith("waiting for it, 30 s at most")
    assert notes.lines[1].startswith("waited ") and f"written by pid {os.getpid()}" in notes.lines[1]


def test_a_file_system_without_locks_is_written_unlocked_and_said(tmp_path, monkeypatch):
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(lock.fcntl, "flock", no_locks)
    notes = Notes()
    with lock.store_lock(tmp_path, notes):
        pass
    assert notes.lines == [
        f"{tmp_path} cannot be locked (No locks available): written without the writer lock, so "
        "another sweep into it at the same time is not held off"
    ]


HOLDER = textwrap.dedent(
    """
    import sys, time
    from fwbench_aggregator.store.lock import store_lock
    with store_lock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(60)
    """
)


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "held"
        assert lock.holder(tmp_path).startswith(f"pid {process.pid} ")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stdout.close()
    assert lock.holder(tmp_path) is None
    with lock.store_lock(tmp_path, wait_s=0):
        pass


def test_a_sweep_into_a_store_another_writer_holds_is_refused_without_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "WAIT_S", 0.3)
    store = tmp_path / "store"
    with lock.store_lock(store):
        done = fwbench_in_process(
            "sweep",
            "--models",
            "resnet18",
            "--modes",
            "infer",
            "--batch-sizes",
            "1",
            "--shapes",
            "3x32x32",
            "--repetitions",
            "1",
            "--store",
            str(store),
            "--runner",
            "first=127.0.0.1:9",
            columns=400,
        )
    said = " ".join(done.output.split())
    assert done.exit_code == 2, done.output
    assert f"is being written by pid {os.getpid()}" in said and "waited 0 s" in said and "--resume" in said
    assert done.exception is None or isinstance(done.exception, SystemExit)


def test_a_run_another_writer_stored_first_is_kept_and_said(tmp_path, fake_address, monkeypatch):
    sweep = sweep_from_options(
        models="resnet18",
        batch_sizes="1,2",
        shapes="3x32x32",
        modes="infer",
        runners="first",
        repetitions=1,
        warmup=1,
        steps=2,
        min_measure_s=0.0,
    )
    store = ResultStore(tmp_path / "store")
    pending, _ = pending_runs(sweep.configurations(), store, StartupSettings())
    taken = "0123456789abcdef"
    # A writer without the lock stored an entry under the id this sweep's first run draws (ids are random: as
    # unlikely as it gets, and still never lost).
    store.append(taken, {"writer": "other"}, {"summary": pd.DataFrame([{"runner": "first", "status": "ok"}])}, {})
    drawn = iter([taken])
    monkeypatch.setattr(study_module, "new_run_id", lambda: next(drawn, None) or new_run_id())
    notes = Notes()
    failures, interrupted = run_sweep(
        pending, {"first": fake_address}, Transport(), StartupSettings(), *store_callbacks(store, notes), 0.0
    )
    assert not failures and interrupted is None
    assert len(store.run_keys()) == len(pending) and taken in store.run_keys()
    (kept,) = (tmp_path / "store" / "duplicates").iterdir()
    steps = pd.read_parquet(kept / "steps.parquet")
    assert kept.name.startswith(f"{taken}-") and (~steps["warmup"]).sum() == 2  # the measured steps, all there
    (said,) = [line for line in notes.lines if "already stored" in line]
    assert taken in said and str(kept) in said


@pytest.mark.slow
@pytest.mark.quiet  # the second sweep waits 30 s at most: beside other sweeps holding the CPU's lock it gave up
def test_two_identical_sweeps_at_once_both_end_cleanly_and_keep_every_run(tmp_path, fake_address):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "runners: [first]\nmodels: [resnet18]\nmodes: [infer]\nbatch_sizes: [1, 2, 4]\nshapes: [3x32x32]\n"
        "warmup: 1\nsteps: 1000\nmin_measure_s: 0\nrepetitions: 2\n"
    )  # ~1 s a run: the second waits
    store = tmp_path / "store"
    command = [
        sys.executable,
        "-m",
        "fwbench_aggregator",
        "sweep",
        str(path),
        "--store",
        str(store),
        "--runner",
        f"first={fake_address}",
        "--no-report",
        "--resume",
    ]
    first = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "400"}
    )
    deadline = time.monotonic() + 60
    while lock.holder(store) is None and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    second = fwbench(*command[3:], columns=400)
    _, first_err = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, first_err + second.stderr
    assert "Traceback" not in first_err + second.stderr
    said = " ".join(second.stderr.split())
    assert f"is being written by pid {first.pid}" in said and "waited " in said
    assert "0 runs to do, 6 already in" in said
    assert len(ResultStore(store).run_keys()) == 6 and not (store / "duplicates").exists()
