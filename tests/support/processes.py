"""The live processes of this machine, read from /proc: what tests need to find a runner's workers and its tree."""

from __future__ import annotations

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
