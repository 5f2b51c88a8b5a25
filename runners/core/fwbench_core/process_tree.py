"""The processes a user's code starts end with the worker that ran it. A worker (isolation, plugin_checks) starts its own
session and is a child subreaper: whatever its code forks, detaches or double-forks stays below it, so that killing
its tree ends all of it; and a runner is a subreaper too, so that what outlives a worker that died comes back to the
runner, which kills and reaps it before the next run rather than leaving it to PID 1 beside the measurements."""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import time
from pathlib import Path

log = logging.getLogger("fwbench.runner")

_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
# Rounds of kill and look again: a process killed mid-fork leaves a child the next round finds.
_KILL_ROUNDS = 50
# How long killed processes get to become zombies and be reaped, and strays to end on their own, before we go on.
REAP_WAIT_S = 2.0
STRAY_GRACE_S = 1.0
_subreaper = False


def become_subreaper() -> bool:
    """Make orphans below this process its children rather than PID 1's (Linux; False elsewhere)."""
    global _subreaper
    try:
        _subreaper = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _subreaper = False
    return _subreaper


def become_worker() -> None:
    """In a worker at its start: a session of its own (a runner's Ctrl-C or a terminal's hang-up is not its), and a
    subreaper, so that its descendants stay in its tree however they detach."""
    os.setsid()
    become_subreaper()


def _table() -> dict[int, tuple[int, int, str]]:
    """Every process's (parent, session, state), by pid."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                table[int(entry.name)] = (int(fields[1]), int(fields[3]), fields[0])
            except (OSError, IndexError, ValueError):
                continue
    return table


def descendants(pid: int) -> list[int]:
    """The live processes below `pid` (zombies aside)."""
    table = _table()
    tree, grown = {pid}, True
    while grown:
        below = {child for child, (parent, _, _) in table.items() if parent in tree} - tree
        tree |= below
        grown = bool(below)
    return sorted(child for child in tree - {pid} if table[child][2] != "Z")


def end_descendants(pid: int) -> list[int]:
    """Kill every process below `pid`, round after round until none lives; the pids killed."""
    killed: list[int] = []
    for _ in range(_KILL_ROUNDS):
        alive = descendants(pid)
        if not alive:
            break
        for child in alive:
            try:
                os.kill(child, signal.SIGKILL)
                killed.append(child)
            except ProcessLookupError:
                pass
    return killed


def kill_tree(process) -> None:
    """Kill a worker (a multiprocessing.Process) and every process below it, those first: the worker is their
    subreaper, so they are all below it until it dies."""
    end_descendants(process.pid)
    process.kill()


def end_own_tree() -> None:
    """In a worker about to exit: kill everything below it and reap it (each is its child by now: it is their
    subreaper), so that nothing it started outlives it."""
    if not end_descendants(os.getpid()):
        return
    give_up_at = time.monotonic() + REAP_WAIT_S
    while time.monotonic() < give_up_at:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                time.sleep(0.01)
        except ChildProcessError:
            return


def end_strays() -> list[int]:
    """In a runner (a subreaper): the processes an ended worker left, re-parented here, killed and reaped: any child in
    a session not the runner's that the runner did not start. Each is given STRAY_GRACE_S to end on its own (a worker's
    tree being torn down) first. The pids ended; none where this process is no subreaper (orphans go to PID 1)."""
    if not _subreaper:
        return []
    started = {process.pid for process in multiprocessing.active_children()}
    me, session = os.getpid(), os.getsid(0)
    strays = [
        pid for pid, (parent, sid, _) in _table().items() if parent == me and sid != session and pid not in started
    ]
    if not strays:
        return []
    give_up_at = time.monotonic() + STRAY_GRACE_S
    while any(_alive(pid) for pid in strays) and time.monotonic() < give_up_at:
        time.sleep(0.05)
    alive = [pid for pid in strays if _alive(pid)]
    for pid in alive:
        strays += end_descendants(pid)
        os.kill(pid, signal.SIGKILL)
    _reap(strays)
    if alive:
        log.warning(
            "killed %d processes that an earlier plug-in's worker left running (pids %s) before this work",
            len(alive),
            ", ".join(map(str, alive)),
        )
    return alive


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _reap(pids: list[int]) -> None:
    """Wait for each of `pids` that is this process's child, for REAP_WAIT_S at most in all."""
    give_up_at = time.monotonic() + REAP_WAIT_S
    for pid in pids:
        while True:
            try:
                if os.waitpid(pid, os.WNOHANG) != (0, 0) or time.monotonic() > give_up_at:
                    break
            except ChildProcessError:
                break
            time.sleep(0.01)
