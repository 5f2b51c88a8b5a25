"""Waiting for a quiet host before a run (--wait-for-quiet S): look, and while the host is not quiet, look again,
for S seconds at most; then the run starts either way, and the runner records the state it found (device_flags).

Quiet is what the runner does not flag (fwbench_core.device_state, which the aggregator does not install; a test
holds the limits equal): processes other than this one keep at most OTHER_CPU_BUSY_LIMIT_CORES busy over a window
of /proc/stat (cores, not a share of them: the runner flags that many on any host); on the run's GPUs, no compute
process but this command's own runners' (nvidia-smi) and utilisation at most GPU_BUSY_LIMIT_PCT; and no other
fwbench measures on this host (device_lock). The CPU count includes this command's runners: busy between two runs,
they would disturb the next as any process would; on a GPU, a runner's process between runs is the runner that
runs next (a build it keeps for a reuse chain).

wait_for_quiet takes its look (the probe), clock and sleep as arguments, so that a test runs it without a host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from .device_lock import Stopped

OTHER_CPU_BUSY_LIMIT_CORES = 0.5
GPU_BUSY_LIMIT_PCT = 5.0
WINDOW_S = 1.0  # each look at the CPU averages over this
POLL_S = 1.0  # between looks, besides the look's own window
NVIDIA_SMI_TIMEOUT_S = 10.0
# /proc/stat cpu line fields counted as busy, as the runner counts them: user nice system irq softirq steal.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


class Reading(NamedTuple):
    why: str = ""  # what was not quiet, "; "-separated; "" when quiet

    @property
    def quiet(self) -> bool:
        return not self.why


Probe = Callable[[], Reading]


class QuietWait(NamedTuple):
    waited_s: float
    why: str  # "" where the host was quiet when the run started; else what was not quiet when the wait gave up


def wait_for_quiet(
    limit_s: float,
    probe: Probe,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    say: Callable[[str], None] = lambda text: None,
    stopped: Callable[[], bool] = lambda: False,
    poll_s: float = POLL_S,
) -> QuietWait:
    """Look until the host is quiet or `limit_s` seconds have passed; says why it waits, and how the wait ended.
    Stopped where `stopped()` turns true meanwhile (the command is ending)."""
    started = clock()
    reading = probe()
    if reading.quiet:
        return QuietWait(clock() - started, "")
    say(f"not quiet ({reading.why}): waiting {limit_s:g} s at most")
    while True:
        waited = clock() - started
        if stopped():
            raise Stopped()
        if waited >= limit_s:
            say(
                f"still not quiet after {waited:.0f} s ({reading.why}): running anyway; the runner records what it "
                "finds, and a verdict over a busy run is flagged"
            )
            return QuietWait(waited, reading.why)
        sleep(min(poll_s, limit_s - waited))
        reading = probe()
        if reading.quiet:
            waited = clock() - started
            say(f"quiet after {waited:.0f} s")
            return QuietWait(waited, "")


class GpuState(NamedTuple):
    index: str
    uuid: str
    utilisation_pct: float | None
    pids: tuple[int, ...]  # its compute processes


def nvidia_smi() -> list[GpuState]:
    """Every GPU's utilisation and compute processes; OSError where nvidia-smi is missing or fails."""

    def query(*args: str) -> list[list[str]]:
        done = subprocess.run(
            ["nvidia-smi", *args, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
        )
        if done.returncode:
            raise OSError(f"nvidia-smi: {done.stderr.strip() or f'exit status {done.returncode}'}")
        return [[field.strip() for field in line.split(",")] for line in done.stdout.splitlines() if "," in line]

    try:
        gpus = query("--query-gpu=index,uuid,utilization.gpu")
        apps = query("--query-compute-apps=gpu_uuid,pid")
    except subprocess.TimeoutExpired:
        raise OSError("nvidia-smi did not answer") from None
    pids: dict[str, list[int]] = {}
    for uuid, pid in (row[:2] for row in apps):
        if pid.isdigit():
            pids.setdefault(uuid, []).append(int(pid))
    return [
        GpuState(index, uuid, float(util) if _number(util) else None, tuple(pids.get(uuid, ())))
        for index, uuid, util in (row[:3] for row in gpus if len(row) >= 3)
    ]


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


class HostProbe:
    """One look at this host, for the devices of one run: the CPU over WINDOW_S, `gpus` ((index, UUID or "") each),
    and `others` (what else measures here: device_lock.others_measuring). `blind` says what it cannot watch."""

    def __init__(
        self,
        gpus: Sequence[tuple[str, str]] = (),
        others: Callable[[], list[str]] = lambda: [],
        proc_root: Path = Path("/proc"),
        gpu_states: Callable[[], list[GpuState]] = nvidia_smi,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.gpus, self.others, self.proc_root, self.gpu_states = list(gpus), others, Path(proc_root), gpu_states
        self.window_s, self.clock, self.sleep = window_s, clock, sleep
        self.pid = os.getpid()
        self.blind: list[str] = []
        if self.gpus and gpu_states is nvidia_smi and shutil.which("nvidia-smi") is None:
            self.blind.append("nvidia-smi is not here: the GPU is not watched, only the host")
            self.gpus = []

    def __call__(self) -> Reading:
        reasons = []
        busy = self.cpu_busy_cores()
        if busy is not None and busy > OTHER_CPU_BUSY_LIMIT_CORES:
            reasons.append(f"other processes kept {busy:.2f} CPU cores busy (above {OTHER_CPU_BUSY_LIMIT_CORES:g})")
        if self.gpus:
            reasons += self._gpu_reasons()
        reasons += self.others()
        return Reading("; ".join(reasons))

    def cpu_busy_cores(self) -> float | None:
        """Cores that processes other than this one kept busy over the window; None where /proc cannot say."""
        try:
            start, start_own, started = self._busy_ticks(), self._own_ticks(), self.clock()
            self.sleep(self.window_s)
            end, end_own, elapsed = self._busy_ticks(), self._own_ticks(), self.clock() - started
        except (OSError, ValueError, IndexError) as error:
            self._blind(f"{self.proc_root}: {error}: the CPU is not watched")
            return None
        if elapsed <= 0:
            return None
        # Ticks are counted per CPU and per process at different moments: a quiet host can come out below zero.
        return max(0.0, ((end - start) - (end_own - start_own)) / os.sysconf("SC_CLK_TCK") / elapsed)

    def _busy_ticks(self) -> int:
        for line in (self.proc_root / "stat").read_text().splitlines():
            if line.startswith("cpu "):
                ticks = [int(v) for v in line.split()[1:]]
                return sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks))
        raise ValueError("no 'cpu' line in stat")

    def _own_ticks(self) -> int:
        """This process's user and system time (its children's are theirs: a runner it started counts as another)."""
        text = (self.proc_root / str(self.pid) / "stat").read_text()
        fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
        return int(fields[11]) + int(fields[12])

    def _gpu_reasons(self) -> list[str]:
        try:
            states = self.gpu_states()
        except OSError as error:
            self._blind(f"{error}: the GPU is not watched, only the host")
            return []
        mine = self._tree()
        reasons = []
        for index, uuid in self.gpus:
            state = next((s for s in states if (s.uuid == uuid if uuid else s.index == index)), None)
            if state is None:
                self._blind(f"nvidia-smi does not list gpu:{index}: it is not watched")
                continue
            others = [pid for pid in state.pids if pid not in mine]
            if others:
                reasons.append(f"gpu:{index} has {len(others)} compute process(es) of others")
            if state.utilisation_pct is not None and state.utilisation_pct > GPU_BUSY_LIMIT_PCT:
                reasons.append(f"gpu:{index} {state.utilisation_pct:.0f}% busy (above {GPU_BUSY_LIMIT_PCT:g}%)")
        return reasons

    def _tree(self) -> set[int]:
        """This process and its descendants (the runners it started, and their workers)."""
        parents: dict[int, int] = {}
        for path in self.proc_root.glob("[0-9]*/stat"):
            try:
                text = path.read_text()
                parents[int(path.parent.name)] = int(text[text.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # the process ended while we looked
        tree, frontier = {self.pid}, {self.pid}
        while frontier:
            frontier = {child for child, parent in parents.items() if parent in frontier} - tree
            tree |= frontier
        return tree

    def _blind(self, text: str) -> None:
        if text not in self.blind:
            self.blind.append(text)
