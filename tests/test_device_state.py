"""The device's state around a run, without a GPU: a fake NVML module, a fake /proc tree, an injected clock."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from fwbench_core.choices import DeviceKind
from fwbench_core.device_state import (
    FREE_MEMORY_FLAG_FRACTION,
    OTHER_CPU_BUSY_LIMIT_CORES,
    DeviceState,
    DeviceStateReader,
    device_flags,
)
from fwbench_core.devices import DeviceRef
from fwbench_core.power import NvmlSession

GPU0 = DeviceRef(DeviceKind.GPU, 0)
CPU0 = DeviceRef(DeviceKind.CPU, 0)
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
GIB = 2**30


class FakeProc:
    """A /proc tree: /proc/stat's busy ticks, /proc/loadavg, and processes with their CPU ticks."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(exist_ok=True)
        self.set_load(0.42)
        self.set_busy_ticks(0)

    def set_load(self, load_1m: float) -> None:
        (self.root / "loadavg").write_text(f"{load_1m} 0.30 0.20 1/123 4567\n")

    def set_busy_ticks(self, busy: int, idle: int = 10_000) -> None:
        # user nice system idle iowait irq softirq steal guest guest_nice; iowait and idle are not busy
        user, system = busy - busy // 4, busy // 4
        (self.root / "stat").write_text(
            f"cpu  {user} 0 {system} {idle} 50 0 0 0 0 0\ncpu0 {user} 0 {system} {idle} 50 0 0 0 0 0\n"
        )

    def set_process(self, pid: int, ppid: int, ticks: int, name: str = "python (runner) x") -> None:
        directory = self.root / str(pid)
        directory.mkdir(exist_ok=True)
        utime, stime = ticks - ticks // 3, ticks // 3
        # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
        (directory / "stat").write_text(f"{pid} ({name}) S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0\n")


class FakeNvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {3: "Not Supported", 9: "Driver Not Loaded"}.get(self.value, f"code {self.value}")


class FakeNvml:
    NVMLError = FakeNvmlError
    NVML_CLOCK_SM = 1

    def __init__(
        self,
        pids=(),
        sm_clock=1755,
        max_clock=1980,
        reasons=0,
        free=79 * GIB,
        total=80 * GIB,
        unsupported=frozenset(),
        init_error=None,
        old_names=False,
    ):
        self.pids, self.sm_clock, self.max_clock, self.reasons = list(pids), sm_clock, max_clock, reasons
        self.free, self.total, self.unsupported, self.init_error = free, total, unsupported, init_error
        self.initialized = 0
        if old_names:  # a driver before 535 names the call "throttle reasons"
            self.nvmlDeviceGetCurrentClocksThrottleReasons = self._reasons
        else:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons

    def _check(self, name: str) -> None:
        if name in self.unsupported:
            raise FakeNvmlError(3)

    def nvmlInit(self):
        if self.init_error is not None:
            raise FakeNvmlError(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self):
        self.initialized -= 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", index)

    def nvmlDeviceGetComputeProcesses(self, handle):
        self._check("processes")
        return [SimpleNamespace(pid=pid, usedGpuMemory=GIB) for pid in self.pids]

    def nvmlDeviceGetClockInfo(self, handle, clock):
        self._check("clock")
        return self.sm_clock

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        self._check("clock")
        return self.max_clock

    def _reasons(self, handle):
        self._check("reasons")
        return self.reasons

    def nvmlDeviceGetMemoryInfo(self, handle):
        self._check("memory")
        return SimpleNamespace(free=self.free, total=self.total, used=self.total - self.free)


class StepClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def reader_for(ref: DeviceRef, proc: FakeProc, nvml=None, clock=None) -> DeviceStateReader:
    session = NvmlSession(ref.index, nvml)
    reader = DeviceStateReader(ref, session, proc_root=proc.root, pid=500, clock=clock or StepClock())
    reader.open()
    return reader


@pytest.fixture
def proc(tmp_path):
    fake = FakeProc(tmp_path / "proc")
    fake.set_process(1, 0, 10)
    fake.set_process(500, 1, 1000)  # this runner
    return fake


def test_a_cpu_run_records_load_and_the_other_processes_cpu_time(proc):
    clock = StepClock()
    reader = reader_for(CPU0, proc, clock=clock)
    before = reader.read()
    assert before.load_avg_1m == 0.42
    assert before.other_cpu_busy_cores is None and "first reading" in before.reasons["other_cpu_busy_cores"]
    assert before.sm_clock_mhz is None and before.reasons["sm_clock_mhz"] == "not a GPU"

    # Over 2 s: the host's CPUs were busy 6 s in all, 2 s of it this runner's: others kept 2 cores busy.
    clock.now_s += 2.0
    proc.set_busy_ticks(6 * TICKS_PER_S)
    proc.set_process(500, 1, 1000 + 2 * TICKS_PER_S)
    proc.set_load(2.5)
    after = reader.read()
    assert after.other_cpu_busy_cores == pytest.approx(2.0)
    assert after.load_avg_1m == 2.5
    assert device_flags(CPU0, before, after) == (
        f"host busy: other processes kept 2.00 CPU cores busy during the run (above {OTHER_CPU_BUSY_LIMIT_CORES:g})",
    )


def test_a_worker_process_of_this_runner_is_not_another_process(proc):
    clock = StepClock()
    reader = reader_for(CPU0, proc, clock=clock)
    reader.read()
    proc.set_process(600, 500, 0, name="worker (tf) run")  # a child that appears during the run
    proc.set_process(601, 600, 0)  # and its own child
    clock.now_s += 1.0
    proc.set_process(600, 500, TICKS_PER_S)
    proc.set_process(601, 600, TICKS_PER_S // 2)
    proc.set_busy_ticks(TICKS_PER_S + TICKS_PER_S // 2)
    after = reader.read()
    assert after.other_cpu_busy_cores == pytest.approx(0.0)
    assert device_flags(CPU0, DeviceState(), after) == ()


def test_a_quiet_gpu_is_read_in_full_and_not_flagged(proc):
    nvml = FakeNvml(pids=[500], reasons=0x1)  # this runner's context, and an idle GPU
    reader = reader_for(GPU0, proc, nvml)
    before, after = reader.read(), reader.read()
    assert (before.gpu_processes, before.other_gpu_processes) == (1, 0)
    assert (before.sm_clock_mhz, before.max_sm_clock_mhz) == (1755.0, 1980.0)
    assert before.throttle_reasons == ("gpu_idle",)
    assert (before.free_memory_bytes, before.total_memory_bytes) == (79 * GIB, 80 * GIB)
    assert device_flags(GPU0, before, after) == ()
    reader.close()
    assert nvml.initialized == 0


def test_another_process_on_the_gpu_is_flagged(proc):
    proc.set_process(700, 1, 5)  # someone else's process in this PID namespace
    reader = reader_for(GPU0, proc, FakeNvml(pids=[500, 700]))
    state = reader.read()
    assert state.other_gpu_processes == 1 and state.notes == ()
    flags = device_flags(GPU0, DeviceState(other_gpu_processes=0), state)
    assert flags == (
        "another process used gpu:0: 1 compute process(es) besides this runner (before the run: 0, after: 1)",
    )


def test_in_a_container_an_unseen_pid_is_taken_to_be_this_runner(proc):
    reader = reader_for(GPU0, proc, FakeNvml(pids=[91234, 91300]))  # host PIDs, invisible here
    state = reader.read()
    assert state.gpu_processes == 2 and state.other_gpu_processes == 1
    assert "one is taken to be this runner" in state.notes[0]


@pytest.mark.parametrize("old_names", [False, True])
def test_thermal_throttling_is_flagged_and_power_capping_is_not(proc, old_names):
    capped = reader_for(GPU0, proc, FakeNvml(pids=[500], reasons=0x4, old_names=old_names)).read()  # sw_power_cap
    assert capped.throttle_reasons == ("sw_power_cap",)
    assert device_flags(GPU0, capped, capped) == ()
    hot = reader_for(GPU0, proc, FakeNvml(pids=[500], reasons=0x4 | 0x40, old_names=old_names)).read()
    assert hot.throttle_reasons == ("sw_power_cap", "hw_thermal_slowdown")
    assert device_flags(GPU0, capped, hot) == ("gpu:0 clocks throttled: hw_thermal_slowdown (after)",)


def test_memory_held_by_another_process_at_the_start_is_flagged(proc):
    reader = reader_for(GPU0, proc, FakeNvml(pids=[500], free=30 * GIB))
    before = reader.read()
    flags = device_flags(GPU0, before, before)
    assert flags == (
        f"gpu:0 had 30.0 of 80.0 GiB free at the start (below {FREE_MEMORY_FLAG_FRACTION:.0%}): "
        "another process holds memory on it",
    )


def test_what_nvml_cannot_read_is_none_with_the_reason(proc):
    state = reader_for(GPU0, proc, FakeNvml(unsupported=frozenset({"reasons", "processes"}))).read()
    assert (
        state.throttle_reasons is None
        and state.reasons["throttle_reasons"] == "NVML: Not Supported (not on this device)"
    )
    assert state.other_gpu_processes is None and state.reasons["other_gpu_processes"].startswith("NVML: Not Supported")
    assert state.free_memory_bytes == 79 * GIB


def test_no_nvml_leaves_the_gpu_fields_unset_with_the_reason(proc):
    reader = reader_for(GPU0, proc, FakeNvml(init_error=9))
    state = reader.read()
    assert state.free_memory_bytes is None and state.reasons["free_memory_bytes"] == "NVML: Driver Not Loaded (gpu:0)"
    assert state.load_avg_1m == 0.42  # the host is read all the same
    reader.close()


def test_an_unreadable_proc_says_why(tmp_path):
    reader = DeviceStateReader(CPU0, proc_root=tmp_path / "nowhere", pid=500)
    reader.open()
    state = reader.read()
    assert state.load_avg_1m is None and "loadavg" in state.reasons["load_avg_1m"]
    assert state.other_cpu_busy_cores is None and state.reasons["other_cpu_busy_cores"]


def test_the_real_proc_gives_a_load_and_a_figure_over_an_interval():
    reader = DeviceStateReader(CPU0)
    reader.open()
    reader.read()
    sum(range(200_000))  # some CPU time of this process's own: not another's
    state = reader.read()
    assert state.load_avg_1m is not None and state.load_avg_1m >= 0
    assert state.other_cpu_busy_cores is not None and state.other_cpu_busy_cores >= 0
