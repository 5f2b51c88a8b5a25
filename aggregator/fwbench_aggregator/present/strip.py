"""The evidence in the terminal: each runner's blocks (or runs) in the order they ran as one line of bars on a scale
every runner shares, so that the spread and a drift the verdict saw show where the report's plot cannot."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from ..run.client import RunResult

BARS = "▁▂▃▄▅▆▇█"
# Beyond this many units a line would wrap in 80 columns: the strip is left out, the report draws them.
MAX_UNITS = 40


def _block_number(name: str) -> int:
    found = re.search(r"(\d+)$", name)
    return int(found.group(1)) if found else 0


def units_of(results: Sequence[RunResult]) -> dict[str, list[float]]:
    """Each runner's units of evidence in ms, in the order they ran: a block's value is the geometric mean of its
    windows' medians (as the verdict takes it), a run's its median."""
    windows: dict[str, dict[int, list[float]]] = {}
    for r in results:
        if r.summary is None or not r.summary.median_step_time_s > 0:
            continue
        unit = _block_number(r.block.block) if r.block else r.repetition
        windows.setdefault(r.runner, {}).setdefault(unit, []).append(r.summary.median_step_time_s * 1e3)
    return {
        runner: [math.exp(sum(map(math.log, v)) / len(v)) for _, v in sorted(by_unit.items())]
        for runner, by_unit in windows.items()
    }


def strip_lines(results: Sequence[RunResult]) -> list[str]:
    """One line per runner ('torch       ▃▆▁█  1090–1890 ms'), a log scale shared by all; none where a runner has
    fewer than two units or more than MAX_UNITS."""
    units = units_of(results)
    if len(units) < 2 or any(not 2 <= len(v) <= MAX_UNITS for v in units.values()):
        return []
    low, high = (f(v for values in units.values() for v in values) for f in (min, max))
    span = math.log(high / low) or 1.0
    width = max(map(len, units))
    blocks = any(r.block for r in results)
    lines = [f"{'blocks' if blocks else 'runs'} in the order run, one scale (▁ {low:.4g} ms to █ {high:.4g} ms):"]
    for runner, values in units.items():
        bars = "".join(BARS[round(math.log(v / low) / span * (len(BARS) - 1))] for v in values)
        lines.append(f"  {runner:<{width}} {bars}  {min(values):.4g}–{max(values):.4g} ms")
    return lines
