"""Where a test run's time goes: set-up, image builds and tests, printed as one table at the end of the run.

scripts/test.sh points FWBENCH_TIMINGS at a file; scripts/setup_envs.sh and the image builds append a line to it for
each environment and image (`kind<TAB>name<TAB>seconds`), and conftest.py adds the tests' own times by tier and file
when the run ends, so that the cost of every environment, image and test added stays visible in every CI log."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

# The first of a test's markers in this order names its tier; a test with none is in the fast tier.
TIERS = ("containers", "slurm", "browser", "frameworks", "slow")
FAST_TIER = "fast"
SLOWEST_FILES = 15


def record(kind: str, name: str, seconds: float) -> None:
    """Append one timed step to the run's timings file (nothing where the run keeps none)."""
    path = os.environ.get("FWBENCH_TIMINGS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{kind}\t{name}\t{seconds:.1f}\n")


@contextmanager
def timed(kind: str, name: str):
    started = time.monotonic()
    try:
        yield
    finally:
        record(kind, name, time.monotonic() - started)


def recorded_steps() -> list[tuple[str, str, float]]:
    path = os.environ.get("FWBENCH_TIMINGS")
    if not path or not Path(path).exists():
        return []
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            rows.append((parts[0], parts[1], float(parts[2])))
    return rows


def tier_of(markers: set[str]) -> str:
    return next((tier for tier in TIERS if tier in markers), FAST_TIER)


TEST_KIND = "test:"  # a test phase's line in the timings file: "test:TIER<TAB>NODEID<TAB>SECONDS"
WALL = ("pytest", "wall time")


class TestTimes:
    """Each test's setup, call and teardown seconds, summed by tier and by file: this pytest run's, or, where the
    run keeps a timings file, every pytest run's that wrote to it (scripts/test.sh runs four, in three parts)."""

    def __init__(self) -> None:
        self.by_tier: dict[str, float] = defaultdict(float)
        self.tests_by_tier: dict[str, set[str]] = defaultdict(set)
        self.by_file: dict[str, float] = defaultdict(float)
        self.tiers_of_file: dict[str, set[str]] = defaultdict(set)

    def add(self, nodeid: str, markers: set[str], seconds: float) -> None:
        tier = tier_of(markers)
        self._count(tier, nodeid, seconds)
        record(f"{TEST_KIND}{tier}", nodeid, seconds)

    def _count(self, tier: str, nodeid: str, seconds: float) -> None:
        path = nodeid.split("::", 1)[0]
        self.by_tier[tier] += seconds
        self.tests_by_tier[tier].add(nodeid)
        self.by_file[path] += seconds
        self.tiers_of_file[path].add(tier)

    def table(self, wall_s: float) -> list[str]:
        record(*WALL, wall_s)
        steps = recorded_steps()
        if steps:
            every = TestTimes()
            for kind, nodeid, seconds in steps:
                if kind.startswith(TEST_KIND):
                    every._count(kind[len(TEST_KIND) :], nodeid, seconds)
            return every._lines(sum(seconds for kind, name, seconds in steps if (kind, name) == WALL), steps)
        return self._lines(wall_s, steps)

    def _lines(self, wall_s: float, steps: list[tuple[str, str, float]]) -> list[str]:
        lines = ["where the time goes (seconds; an image build counts in its tier too)"]
        for kind in ("setup", "image", "part"):
            for _, name, seconds in (s for s in steps if s[0] == kind):
                lines.append(f"  {kind:<9} {name:<52} {seconds:8.1f}")
        for tier in (FAST_TIER, *TIERS[::-1]):
            if tier in self.by_tier:
                count = len(self.tests_by_tier[tier])
                lines.append(f"  {'tier':<9} {f'{tier} ({count} tests)':<52} {self.by_tier[tier]:8.1f}")
        lines.append(f"  {'pytest':<9} {'wall time':<52} {wall_s:8.1f}")
        lines.append(f"  slowest {SLOWEST_FILES} files:")
        slowest = sorted(self.by_file.items(), key=lambda item: item[1], reverse=True)[:SLOWEST_FILES]
        for path, seconds in slowest:
            tiers = ",".join(sorted(self.tiers_of_file[path]))
            lines.append(f"  {'file':<9} {f'{path} [{tiers}]':<52} {seconds:8.1f}")
        return lines
