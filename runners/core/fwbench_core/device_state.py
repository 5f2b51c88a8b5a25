"""Whether the device was quiet: its state before and after a run, and flags where it was not.

A GPU is read through NVML (the run's session on it, shared with its power source): the compute
processes on it other than this runner, SM clock against its maximum, the reasons clocks are held back,
free and total memory. The host is read from /proc for every run: CPU time other processes used during
the run, and the load average. What cannot be read is None with a reason, never zero.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .choices import DeviceKind
from .devices import DeviceRef
from .power.nvml import NvmlSession

DEFAULT_PROC_ROOT = Path("/proc")

# nvmlClocksEventReasons (nvml.h; "throttle reasons" before driver 535), bit -> name.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# The reasons that mean the hardware slowed a run down. Not counted: gpu_idle (a GPU between runs is idle),
# sw_power_cap (a GPU under full training load runs at its power cap: that is its normal speed, and the
# same for both runners), applications_clocks_setting and display_clock_setting (settings, not events),
# sync_boost (clocks held together across GPUs on purpose).
THROTTLE_REASONS_FLAGGED = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")

# Other processes keeping more CPU than this busy (in cores, averaged over the run) can take cores from a
# CPU run's threads or from a GPU run's launching thread: half a core is a quarter of a 2-core machine.
OTHER_CPU_BUSY_LIMIT_CORES = 0.5
# Free GPU memory at the start below this fraction of the total means another process holds memory (a
# CUDA context takes about half a GiB; a framework's cache from an earlier run is released between runs).
FREE_MEMORY_FLAG_FRACTION = 0.8

# /proc/stat cpu line fields counted as busy: user nice system irq softirq steal (guest is within user).
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class DeviceState:
    """One reading of the device and host. other_cpu_busy_cores covers the time since the previous
    reading of the same reader, so the state after a run holds the run's figure."""

    load_avg_1m: float | None = None
    other_cpu_busy_cores: float | None = None
    other_gpu_processes: int | None = None
    gpu_processes: int | None = None  # every compute process NVML lists on the device, this runner's included
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    throttle_reasons: tuple[str, ...] | None = None  # every active clocks-event reason, by name
    free_memory_bytes: int | None = None
    total_memory_bytes: int | None = None
    reasons: Mapping[str, str] = field(default_factory=dict)  # field -> why it is None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _CpuTimes:
    wall_s: float
    busy_ticks: int  # every CPU's busy time, in clock ticks
    own_ticks: int  # this process's and its descendants'


class DeviceStateReader:
    """Reads one device's state; open() once, read() before and after a run, close() at the end. A GPU is read
    through `nvml`, the run's session on it; without one the reader opens its own."""

    def __init__(
        self,
        ref: DeviceRef,
        nvml: NvmlSession | None = None,
        proc_root: Path = DEFAULT_PROC_ROOT,
        pid: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ref = ref
        self.proc_root = Path(proc_root)
        self.pid = os.getpid() if pid is None else pid
        self._clock = clock
        self._ticks_per_s = os.sysconf("SC_CLK_TCK")
        self._session = (nvml or NvmlSession(ref.index)) if ref.kind is DeviceKind.GPU else None
        self._open = False
        self._nvml_reason = "not a GPU" if self._session is None else "NVML not open"
        self._previous_cpu: _CpuTimes | None = None

    def open(self) -> None:
        if self._session is None or self._open:
            return
        self._open = True
        if not self._session.open():
            self._nvml_reason = self._session.unavailable_reason or self._nvml_reason

    def close(self) -> None:
        if self._session is not None and self._open:
            self._open = False
            self._session.close()

    def read(self) -> DeviceState:
        reasons: dict[str, str] = {}
        notes: list[str] = []
        values: dict[str, Any] = {"load_avg_1m": self._load_avg_1m(reasons)}
        values["other_cpu_busy_cores"] = self._other_cpu_busy_cores(reasons)
        if self._session is None or self._session.handle is None:
            for name in (
                "other_gpu_processes",
                "gpu_processes",
                "sm_clock_mhz",
                "max_sm_clock_mhz",
                "throttle_reasons",
                "free_memory_bytes",
                "total_memory_bytes",
            ):
                reasons[name] = self._nvml_reason
        else:
            values.update(self._gpu_values(self._session, reasons, notes))
        return DeviceState(**values, reasons=reasons, notes=tuple(notes))

    # --- the host -------------------------------------------------------------

    def _load_avg_1m(self, reasons: dict[str, str]) -> float | None:
        try:
            return float((self.proc_root / "loadavg").read_text().split()[0])
        except (OSError, ValueError, IndexError) as error:
            reasons["load_avg_1m"] = f"{self.proc_root / 'loadavg'}: {error}"
            return None

    def _other_cpu_busy_cores(self, reasons: dict[str, str]) -> float | None:
        try:
            now = _CpuTimes(self._clock(), self._busy_ticks(), self._own_ticks())
        except (OSError, ValueError, IndexError) as error:
            reasons["other_cpu_busy_cores"] = f"{self.proc_root}: {error}"
            self._previous_cpu = None
            return None
        previous, self._previous_cpu = self._previous_cpu, now
        if previous is None:
            reasons["other_cpu_busy_cores"] = "a first reading: the figure covers the time since it, in the next"
            return None
        elapsed_s = now.wall_s - previous.wall_s
        if elapsed_s <= 0:
            reasons["other_cpu_busy_cores"] = "no time passed since the previous reading"
            return None
        other_ticks = (now.busy_ticks - previous.busy_ticks) - (now.own_ticks - previous.own_ticks)
        # Ticks are counted per CPU and per process at different moments: a quiet host can come out a
        # tick or two below zero, which means none.
        return max(0.0, other_ticks / self._ticks_per_s / elapsed_s)

    def _busy_ticks(self) -> int:
        for line in (self.proc_root / "stat").read_text().splitlines():
            if line.startswith("cpu "):
                ticks = [int(v) for v in line.split()[1:]]
                return sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks))
        raise ValueError("no 'cpu' line")

    def _own_ticks(self) -> int:
        """This process's CPU time, its reaped children's and its live descendants' (a worker process
        per run is this runner's work, not another process's)."""
        stats = self._process_stats()
        if self.pid not in stats:
            raise ValueError(f"no {self.proc_root / str(self.pid) / 'stat'}")
        return sum(stats[pid][1] for pid in {self.pid} | _descendants(self.pid, stats))

    def _process_stats(self) -> dict[int, tuple[int, int]]:
        """pid -> (parent pid, utime + stime + cutime + cstime) for every process visible in proc_root."""
        stats = {}
        for path in self.proc_root.glob("[0-9]*/stat"):
            try:
                text = path.read_text()
            except OSError:
                continue  # the process ended while we looked
            # The command name may hold spaces and parentheses: fields start after the last ')'.
            fields = text[text.rindex(")") + 2 :].split()
            stats[int(path.parent.name)] = (int(fields[1]), sum(int(v) for v in fields[11:15]))
        return stats

    # --- the GPU --------------------------------------------------------------

    def _gpu_values(self, session: NvmlSession, reasons: dict[str, str], notes: list[str]) -> dict[str, Any]:
        nvml = session.nvml
        values: dict[str, Any] = {}

        def call(name: str, read: Callable[[Any], Any]) -> Any:
            value, missed = session.attempt(read)
            if missed is not None:
                reasons[name] = missed.message + (" (not on this device)" if missed.never else "")
            return value

        processes = call("gpu_processes", lambda handle: nvml.nvmlDeviceGetComputeProcesses(handle))
        if processes is None:
            reasons["other_gpu_processes"] = reasons["gpu_processes"]
        else:
            values["gpu_processes"] = len(processes)
            values["other_gpu_processes"] = self._other_processes([p.pid for p in processes], notes)
        clock = call("sm_clock_mhz", lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
        values["sm_clock_mhz"] = None if clock is None else float(clock)
        top = call("max_sm_clock_mhz", lambda h: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM))
        values["max_sm_clock_mhz"] = None if top is None else float(top)
        mask = call("throttle_reasons", lambda handle: _clock_event_mask(nvml, handle))
        if mask is not None:
            values["throttle_reasons"] = tuple(name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit)
        memory = call("free_memory_bytes", lambda handle: nvml.nvmlDeviceGetMemoryInfo(handle))
        if memory is None:
            reasons["total_memory_bytes"] = reasons["free_memory_bytes"]
        else:
            values["free_memory_bytes"], values["total_memory_bytes"] = int(memory.free), int(memory.total)
        return values

    def _other_processes(self, pids: list[int], notes: list[str]) -> int:
        """Compute processes that are not this runner. NVML names processes by the host's PIDs: where
        one of them is this process or a descendant, PIDs compare and the rest are others. In a container
        without the host's PID namespace none compares; then a listed PID that this namespace cannot see
        may be this runner, so one such process is taken to be it."""
        ours = set()
        try:
            stats = self._process_stats()
            ours = {self.pid} | _descendants(self.pid, stats)
        except (OSError, ValueError, IndexError):
            stats = {}
        mine = [pid for pid in pids if pid in ours]
        if mine:
            return len(pids) - len(mine)
        unseen = [pid for pid in pids if pid not in stats]
        if unseen:
            notes.append(
                f"NVML lists PIDs this PID namespace cannot see ({len(unseen)}): one is taken to be this runner"
            )
            return len(pids) - 1
        return len(pids)


def _descendants(pid: int, stats: Mapping[int, tuple[int, int]]) -> set[int]:
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, (parent, _) in stats.items() if parent in frontier} - found
        found |= frontier
    return found


def device_flags(ref: DeviceRef, before: DeviceState, after: DeviceState) -> tuple[str, ...]:
    """A human reason for each way the device was not quiet around a run."""
    flags = []
    others = [n for n in (before.other_gpu_processes, after.other_gpu_processes) if n]
    if others:
        flags.append(
            f"another process used {ref}: {max(others)} compute process(es) besides this runner "
            f"(before the run: {before.other_gpu_processes or 0}, after: {after.other_gpu_processes or 0})"
        )
    throttled = [
        f"{name} ({when})"
        for when, state in (("before", before), ("after", after))
        for name in state.throttle_reasons or ()
        if name in THROTTLE_REASONS_FLAGGED
    ]
    if throttled:
        flags.append(f"{ref} clocks throttled: {', '.join(throttled)}")
    busy = after.other_cpu_busy_cores
    if busy is not None and busy > OTHER_CPU_BUSY_LIMIT_CORES:
        flags.append(
            f"host busy: other processes kept {busy:.2f} CPU cores busy during the run "
            f"(above {OTHER_CPU_BUSY_LIMIT_CORES:g})"
        )
    free, total = before.free_memory_bytes, before.total_memory_bytes
    if free is not None and total and free < FREE_MEMORY_FLAG_FRACTION * total:
        flags.append(
            f"{ref} had {free / 2**30:.1f} of {total / 2**30:.1f} GiB free at the start "
            f"(below {FREE_MEMORY_FLAG_FRACTION:.0%}): another process holds memory on it"
        )
    return tuple(flags)


def _clock_event_mask(nvml: Any, handle: Any) -> int:
    """The clocks-event reasons bitmask: the call's new name (driver 535+), else its old one."""
    read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if read is None:
        read = nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(read(handle))
