"""Evidence hygiene: a noise floor calibrated on a busy host is stored flagged and applied only where no quiet one
exists, and then said; every comparison row says which floor it applied. A run waits for a quiet host where asked and
records how long; two fwbench commands never measure one device at once (a per-device lock, waited for and reported,
released when its holder dies)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest
from support.cli import fwbench, only_run_dir

from fwbench_aggregator.analyse import stats
from fwbench_aggregator.analyse.comparison import comparison_rows
from fwbench_aggregator.analyse.floors import calibration_row
from fwbench_aggregator.base.progress import Progress
from fwbench_aggregator.base.vocabulary import Mode
from fwbench_aggregator.plan.spec import RunSpec
from fwbench_aggregator.present.terminal import noise_floor_line
from fwbench_aggregator.run import device_lock, quiet, wire
from fwbench_aggregator.run.connection import Transport
from fwbench_aggregator.run.device_lock import ENV, Lock, Stopped, UnsafeLockDir, holding, others_measuring, read_holder
from fwbench_aggregator.run.execute import run_all
from fwbench_aggregator.run.gate import Gate, Place, places_of, this_host
from fwbench_aggregator.run.quiet import GpuState, HostProbe, Reading, wait_for_quiet
from fwbench_aggregator.store.comparability_columns import FLOOR_KEY_COLUMNS
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_aggregator.store.schema import CALIBRATION_COLUMNS

CONFIG = {
    "model": "resnet18",
    "model_options": "",
    "mode": "train",
    "batch_size": 2,
    "input_shape": "3x32x32",
    "precision": "fp32",
    "device": "cpu:0",
    "world_size": 1,
    "nodes": 1,
    "profile": "equal",
    "serving": "",
}
# Runs and floors of today's store say their design (an older store's migrate to rounds).
ROUNDS = {"design": "rounds"}
BUSY = "host busy in 4 of 12 runs"
NOV_26 = 1795651200.0  # 2026-11-26 UTC


# --- which noise floor a comparison applies ------------------------------------------------------------------------


def runs(slowdown: float = 1.10, count: int = 6) -> tuple[pd.DataFrame, pd.DataFrame]:
    """torch, and tensorflow `slowdown` times slower, `count` quiet runs each."""
    rng = np.random.default_rng(3)
    summary, steps = [], []
    for runner, factor in (("torch", 1.0), ("tensorflow", slowdown)):
        for repetition in range(count):
            times = 0.01 * factor * rng.lognormal(0.0, 0.005, 20)
            row = {**CONFIG, **ROUNDS, "runner": runner, "framework": runner, "repetition": repetition}
            steps += [{**row, "warmup": False, "step_time_s": t} for t in times]
            summary.append({**row, "status": "ok", "median_step_time_s": float(np.median(times)), "device_flags": ""})
    return pd.DataFrame(summary), pd.DataFrame(steps)


def floor(framework: str, value: float, flagged: str = "", at: float = NOV_26) -> dict:
    return {
        **CONFIG,
        **ROUNDS,
        "framework": framework,
        "runs": 6,
        "aa_ratio": 1.0,
        "aa_ci_low": 1 - value,
        "aa_ci_high": 1 + value,
        "noise_floor": value,
        "flagged": flagged,
        "calibrated_at_unix_s": at,
    }


def judged(calibration: list[dict]):
    rows = comparison_rows(*runs(), calibration=pd.DataFrame(calibration) if calibration else None)
    return rows.set_index("runner").loc["torch"], rows.set_index("runner").loc["tensorflow"]


def test_a_quiet_floor_is_applied_and_a_flagged_one_beside_it_is_not():
    fastest, slower = judged([floor("torch", 0.05), floor("torch", 0.30, BUSY)])
    assert slower.noise_floor == 0.05 and slower.noise_floor_flagged == ""
    assert slower.noise_floor_source == (
        "calibrated 2026-11-26 on torch, 6 runs per instance; not applied: 1 calibration(s) on a busy host"
    )
    # 10% clears the quiet 5%: called, and nothing about a busy floor in the verdict.
    assert slower.verdict.startswith("torch faster by") and "busy" not in slower.verdict
    assert fastest.noise_floor_source == slower.noise_floor_source


def test_a_flagged_floor_alone_is_applied_and_every_verdict_it_judged_says_so():
    fastest, slower = judged([floor("tensorflow", 0.30, BUSY)])
    assert slower.noise_floor == 0.30 and slower.noise_floor_flagged == BUSY
    assert slower.noise_floor_source == (
        f"calibrated 2026-11-26 on tensorflow, 6 runs per instance, on a busy host "
        f"({BUSY}): applied, as no quiet calibration exists"
    )
    assert "below the noise floor, 30.0%" in slower.verdict
    assert slower.verdict.endswith(f"; noise floor calibrated on a busy host ({BUSY})")
    assert fastest.verdict == "fastest"
    assert noise_floor_line(slower).startswith("noise floor: 30.0% (from fwbench calibrate), calibrated 2026-11-26")
    assert noise_floor_line(slower).endswith("[FLAGGED: calibrate again on a quiet host, e.g. with --wait-for-quiet]")


def test_the_largest_applied_floor_over_the_frameworks_counts_and_no_calibration_reads_none():
    _, slower = judged([floor("torch", 0.02), floor("tensorflow", 0.30, BUSY), floor("tensorflow", 0.04)])
    assert slower.noise_floor == 0.04 and slower.noise_floor_source.startswith("calibrated 2026-11-26 on tensorflow")
    _, alone = judged([])
    assert np.isnan(alone.noise_floor) and alone.noise_floor_source == "none" and alone.noise_floor_flagged == ""
    assert noise_floor_line(alone).startswith("noise floor: not measured here")


def test_calibrate_stores_why_its_runs_were_not_quiet_and_when():
    comparison = stats.compare("torch", [0.010, 0.0101, 0.0099], "torch-2", [0.0100, 0.0102, 0.0098])
    row = calibration_row(CONFIG, "torch", comparison, "host busy in 1 of 6 runs", NOV_26)
    assert tuple(row) == CALIBRATION_COLUMNS
    assert row["flagged"] == "host busy in 1 of 6 runs" and row["calibrated_at_unix_s"] == NOV_26


def test_a_calibration_from_before_flags_reads_as_quiet(tmp_path):
    folder = tmp_path / "runs" / "00000000000000c1"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "manifest.json").write_text(json.dumps({"store_format": 3}))
    old = {k: v for k, v in floor("torch", 0.05).items() if k not in ("flagged", "calibrated_at_unix_s", "design")}
    pd.DataFrame([old]).to_parquet(folder / "calibration.parquet")
    calibration = ResultStore(tmp_path).load("calibration")
    assert calibration.loc[0, "flagged"] == "" and np.isnan(calibration.loc[0, "calibrated_at_unix_s"])
    _, slower = judged(calibration.to_dict("records"))
    assert slower.noise_floor == 0.05 and slower.noise_floor_flagged == ""
    assert slower.noise_floor_source == "calibrated (date not recorded) on torch, 6 runs per instance"


# --- waiting for a quiet host --------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def readings(*whys: str):
    """A probe that answers these readings in turn, then the last for ever."""
    left = list(whys)
    return lambda: Reading(left.pop(0) if len(left) > 1 else left[0])


def test_wait_for_quiet_waits_until_the_host_is_quiet_and_says_so():
    clock, said = FakeClock(), []
    waited = wait_for_quiet(30, readings("gpu:0 80% busy", "gpu:0 40% busy", ""), clock, clock.sleep, said.append)
    assert waited == quiet.QuietWait(2.0, "")
    assert said == ["not quiet (gpu:0 80% busy): waiting 30 s at most", "quiet after 2 s"]
    assert wait_for_quiet(30, readings(""), clock, clock.sleep, said.append) == quiet.QuietWait(0.0, "")


def test_wait_for_quiet_gives_up_after_its_limit_and_says_what_was_still_busy():
    clock, said = FakeClock(), []
    waited = wait_for_quiet(5, readings("other processes kept 1.50 CPU cores busy"), clock, clock.sleep, said.append)
    assert waited.waited_s == 5.0 and waited.why == "other processes kept 1.50 CPU cores busy"
    assert said[-1].startswith("still not quiet after 5 s (other processes kept 1.50 CPU cores busy): running anyway")


def test_a_stopped_command_stops_waiting():
    clock = FakeClock()
    with pytest.raises(Stopped):
        wait_for_quiet(60, readings("busy"), clock, clock.sleep, stopped=lambda: clock.now >= 3)


def test_the_gate_records_the_seconds_each_run_waited(monkeypatch):
    clock, notes = FakeClock(), []

    class Notes(Progress):
        def note(self, text: str, level: str = "info") -> None:
            notes.append(text)

    gate = Gate(
        10,
        locks=False,
        probe_for=lambda places, others: readings("busy", "busy", "busy", ""),
        clock=clock,
        sleep=clock.sleep,
    )
    with gate.passage([Place("cpu:0")], "torch #1", Notes()) as passage:
        assert passage.quiet.waited_s == 3.0
    assert passage.context() == {"quiet_wait_s": 3.0}
    # A device of another machine cannot be watched from here: no wait, said once.
    for _ in range(2):
        with gate.passage([Place("gpu:0", "node7")], "torch #2", Notes()) as passage:
            assert passage == (0.0, None) and passage.context() == {}
    assert sum("another machine" in note for note in notes) == 1
    monkeypatch.setenv(ENV, "off")
    assert Gate().places("torch", "127.0.0.1:1", Transport(), wire.to_request(RunSpec("resnet18", Mode.train, 2))) == []


def fake_proc(root, pid: int, busy_ticks: int, own_ticks: int) -> None:
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"cpu  {busy_ticks} 0 0 1000000 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n")
    (root / str(pid) / "stat").write_text(f"{pid} (python (x)) S 1 1 1 0 -1 0 0 0 0 0 {own_ticks} 0 0 0 20 0\n")


def test_the_host_probe_counts_other_processes_cores_and_others_gpu_processes(tmp_path):
    pid, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    clock = FakeClock()
    fake_proc(tmp_path, pid, 1000, 100)

    def window(seconds: float) -> None:  # over one second, others keep two cores busy, this process a tenth of one
        clock.sleep(seconds)
        fake_proc(tmp_path, pid, 1000 + int(2.1 * tick), 100 + int(0.1 * tick))

    def gpus() -> list[GpuState]:
        return [GpuState("0", "GPU-a", 50.0, (pid, 999999)), GpuState("1", "GPU-b", 0.0, ())]

    probe = HostProbe(
        [("0", "GPU-a"), ("1", "")],
        lambda: ["another fwbench measures gpu1: pid 7"],
        tmp_path,
        gpus,
        clock=clock,
        sleep=window,
    )
    assert probe().why == (
        "other processes kept 2.00 CPU cores busy (above 0.5); gpu:0 has 1 compute process(es) of "
        "others; gpu:0 50% busy (above 5%); another fwbench measures gpu1: pid 7"
    )
    assert HostProbe([], proc_root=tmp_path / "none").cpu_busy_cores() is None


def test_quiet_is_what_the_runner_does_not_flag():
    from fwbench_core import device_state

    assert quiet.OTHER_CPU_BUSY_LIMIT_CORES == device_state.OTHER_CPU_BUSY_LIMIT_CORES
    assert quiet._BUSY_FIELDS == device_state._BUSY_FIELDS


# --- one fwbench measures a device at a time -----------------------------------------------------------------------

CPU = Lock("cpu", "cpu")


def test_a_second_holder_waits_and_says_for_whom(tmp_path):
    held, release, said = threading.Event(), threading.Event(), []

    def first() -> None:
        with holding([CPU], directory=tmp_path):
            held.set()
            release.wait(10)

    threading.Thread(target=first).start()
    held.wait(10)
    threading.Timer(0.5, release.set).start()
    with holding([CPU], say=said.append, directory=tmp_path) as second:
        assert second.waited_s >= 0.4
    # The holder's command is this process's own arguments (none in an xdist worker).
    holder = shlex.join(["fwbench", *sys.argv[1:]])[:20]
    assert (
        said[0].startswith(f"waiting for another fwbench measuring cpu: pid {os.getpid()} `{holder}")
        and " since " in said[0]
    )
    assert said[-1].startswith("cpu is free after")
    assert oct(os.stat(tmp_path / "cpu.lock").st_mode & 0o777) == "0o600"


def test_a_killed_holder_releases_the_lock(tmp_path):
    code = (
        "import sys, time\nfrom pathlib import Path\nfrom fwbench_aggregator.run.device_lock import Lock, holding\n"
        "remote = Lock('boot-7-gpu0', 'gpu:0 of boot-7', here=False)\n"
        "with holding([Lock('cpu', 'cpu'), remote], directory=Path(sys.argv[1])):\n    print('held', flush=True)\n"
        "    time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        (measuring,) = others_measuring(tmp_path)  # not its lock of another machine's GPU
        assert measuring.startswith(f"another fwbench measures cpu: pid {holder.pid} `fwbench {tmp_path}` since ")
        said = []
        threading.Timer(0.5, holder.send_signal, (signal.SIGKILL,)).start()
        with holding([CPU], say=said.append, directory=tmp_path) as taken:
            assert taken.waited_s >= 0.4
        assert said[0].startswith(f"waiting for another fwbench measuring cpu: pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    assert others_measuring(tmp_path) == []


def test_a_command_that_runs_again_lets_a_waiting_one_go_first(tmp_path, monkeypatch):
    monkeypatch.setattr(device_lock, "HANDOVER_S", 0.3)
    order, first_held, said = [], threading.Event(), []

    def sweep_a() -> None:
        for number in range(2):
            with holding([CPU], say=said.append, directory=tmp_path):
                order.append(f"a{number}")
                first_held.set()
                time.sleep(0.4)

    a = threading.Thread(target=sweep_a)
    a.start()
    first_held.wait(10)
    with holding([CPU], directory=tmp_path):
        order.append("b")
    a.join(10)
    # Without the hand-over, a would take the lock back before b's next look: a0, a1, b.
    assert order == ["a0", "b", "a1"]


def test_the_lock_folder_and_files_must_be_this_users_own(tmp_path):
    open_folder = tmp_path / "open"
    open_folder.mkdir(mode=0o755)
    os.chmod(open_folder, 0o755)
    with pytest.raises(UnsafeLockDir, match="open to others"):
        with holding([CPU], directory=open_folder):
            pass
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    with pytest.raises(UnsafeLockDir, match="not a folder"):
        with holding([CPU], directory=tmp_path / "link"):
            pass
    safe = tmp_path / "safe"
    safe.mkdir(mode=0o700)
    (safe / "cpu.lock").symlink_to(tmp_path / "victim")
    with pytest.raises(UnsafeLockDir, match="cannot be opened"):
        with holding([CPU], directory=safe):
            pass
    assert not (tmp_path / "victim").exists()


def test_a_holders_text_is_cleaned_before_it_is_shown(tmp_path):
    path = tmp_path / "x.lock"
    path.write_text(json.dumps({"pid": 12, "command": "fwbench \x1b[2J" + "x" * 500, "since": 0, "state": "evil"}))
    fd = os.open(path, os.O_RDONLY)
    try:
        shown = str(read_holder(fd))
    finally:
        os.close(fd)
    assert "\x1b" not in shown and len(shown) < 200 and shown.startswith("pid 12 `fwbench ?[2J")
    path.write_text("not json")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_holder(fd) is None
    finally:
        os.close(fd)


def test_a_device_lock_is_named_by_the_device_on_this_host_and_by_the_machine_elsewhere():
    here = {"host_id": this_host(), "gpu:1.uuid": "GPU-5f3a"}
    assert [p.lock() for p in places_of("torch:50051", ["cpu:1", "gpu:1", "gpu:2"], here)] == [
        Lock("cpu", "cpu"),
        Lock("GPU-5f3a", "gpu:1"),
        Lock("gpu2", "gpu:2"),
    ]
    assert places_of("127.0.0.1:50051", ["cpu"], {})[0].lock() == Lock("cpu", "cpu")
    assert places_of("node7:50051", ["gpu:0"], {"host_id": "boot-7"})[0].lock() == Lock(
        "boot-7-gpu0", "gpu:0 of boot-7", here=False
    )


def test_run_all_waits_for_the_device_another_command_measures_and_records_it(tmp_path, fake_runner):
    held, notes = threading.Event(), []

    class Notes(Progress):
        def note(self, text: str, level: str = "info") -> None:
            notes.append(text)

    def other_command() -> None:
        with holding([CPU], directory=tmp_path):
            held.set()
            time.sleep(0.5)

    threading.Thread(target=other_command).start()
    held.wait(10)
    request = wire.to_request(RunSpec("resnet18", Mode.infer, 2, "3x32x32", warmup=0, steps=2, min_measure_s=0))
    gate = Gate(lock_dir=tmp_path)
    results, failures = run_all(
        {"a": fake_runner, "b": fake_runner}, {"a": request, "b": request}, Transport(), 1, progress=Notes(), gate=gate
    )
    assert not failures and len(results) == 2
    assert gate.passages[("a", 0)].lock_wait_s >= 0.3 and gate.context_of("a", 0)["device_lock_wait_s"] >= 0.3
    assert gate.context_of("b", 0) == {}
    assert notes[0].startswith("a #1: waiting for another fwbench measuring cpu: pid ")


@pytest.mark.slow  # the command line end to end, in a subprocess
def test_compare_holds_the_device_lock_and_says_which_noise_floor_it_applied(tmp_path, fake_runner):
    out, store, runtime = tmp_path / "out", tmp_path / "store", tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    options = [
        "--model",
        "resnet18",
        "--mode",
        "train",
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
        f"a={fake_runner}",
        "--runner",
        f"b={fake_runner}",
    ]
    # A floor applies to runs of its calibration's key: this one's is that of runs with these options here.
    first = fwbench(
        "compare",
        *options,
        "--repetitions",
        "1",
        "--out",
        str(tmp_path / "first"),
        "--store",
        str(tmp_path / "first-store"),
        env={"XDG_RUNTIME_DIR": str(runtime)},
    )
    assert first.returncode == 0, first.stderr
    key = ResultStore(tmp_path / "first-store").load("summary").iloc[0]
    row = {**floor("fake", 0.30, "host busy in 4 of 6 runs"), "runs": 3, **{c: key[c] for c in FLOOR_KEY_COLUMNS}}
    ResultStore(store).append("calibrated", {"calibration": "by hand"}, {"calibration": pd.DataFrame([row])}, {})
    done = fwbench(
        "compare",
        *options,
        "--repetitions",
        "3",
        "--out",
        str(out),
        "--store",
        str(store),
        env={"XDG_RUNTIME_DIR": str(runtime)},
    )
    assert done.returncode == 0, done.stderr
    source = (
        "calibrated 2026-11-26 on fake, 3 runs per instance, on a busy host (host busy in 4 of 6 runs): "
        "applied, as no quiet calibration exists"
    )
    assert f"noise floor: 30.0% (from fwbench calibrate), {source} [FLAGGED: " in done.stdout
    assert "noise floor calibrated on a busy host (host busy in 4 of 6 runs)" in done.stdout
    comparison = pd.read_csv(only_run_dir(out) / "comparison.csv", keep_default_na=False)
    assert set(comparison["noise_floor_source"]) == {source}
    assert oct(os.stat(runtime / "fwbench" / "cpu.lock").st_mode & 0o777) == "0o600"
