"""The live processes of this machine, read from /proc: what tests need to find a runner's workers and its tree."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def live_processes() -> dict[int, tuple[int, bytes]]:
    """Every live process's parent and command line, by pid (zombies left out)."""
    processes = {}
    for entry in Path("/proc").iterdir():
        try:
            state, parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            if state != "Z":
                processes[int(entry.name)] = (int(parent), (entry / "cmdline").read_bytes())
        except (ValueError, OSError, IndexError):
            continue
    return processes


def children(parent_pid: int, command_holds: bytes = b"") -> list[int]:
    """The live children of `parent_pid` whose command line holds `command_holds` (any, by default), by pid."""
    return sorted(
        pid for pid, (parent, command) in live_processes().items() if parent == parent_pid and command_holds in command
    )


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`: its children, theirs, and so on (`pid` itself left out)."""
    parents = {child: parent for child, (parent, _) in live_processes().items()}
    tree, grown = {pid}, True
    while grown:
        below = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= below
        grown = bool(below)
    return sorted(tree - {pid})


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2 :].split()[0] != "Z"


def assert_all_end(pids: list[int], what: str, within_s: float) -> None:
    """Wait up to `within_s` for every one of `pids` to end; kill what is left, so the next test starts clean, and
    fail naming `what`."""
    deadline = time.monotonic() + within_s
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{what}: processes {left} still alive {within_s:.0f} s later"
