"""Warm-up by evidence across a comparison's process blocks (analyse.warmup): each runner's first block warms up by
the runner's rule, and what it shows sets the warm-up of its later blocks' first windows, checked block by block."""

from __future__ import annotations

from collections.abc import Sequence

from ..analyse.warmup import learned_warmup_steps, warmed_enough
from ..base.progress import Progress
from ..run.client import RunResult


class BlockWarmup:
    """Per runner, the warm-up steps its next block's first window runs (None: the runner's rule, until stable)."""

    def __init__(self, progress: Progress = Progress()) -> None:
        self.progress = progress
        self.learned: dict[str, int] = {}
        self.returned: set[str] = set()  # runners whose learned count failed a check: the rule for good

    def steps_for(self, runner: str) -> int | None:
        return self.learned.get(runner)

    def after_block(self, number: int, results: Sequence[RunResult]) -> None:
        """Learn from, or check, block `number`'s windows (0-based), each runner's in the order they ran."""
        for runner in dict.fromkeys(r.runner for r in results):
            windows = sorted((r for r in results if r.runner == runner and r.summary), key=lambda r: r.block.window)
            if not windows or windows[0].block.window != 0:
                continue
            first, later = windows[0], [w.summary.median_step_time_s for w in windows[1:]]
            if runner in self.learned:
                self._check(runner, number, first, later)
            elif runner not in self.returned:
                self._learn(runner, number, first, later)

    def _learn(self, runner: str, number: int, first: RunResult, later: list[float]) -> None:
        warmup_s = [step.step_time_s for step in first.steps if step.warmup]
        learned = learned_warmup_steps(warmup_s, later)
        if learned is None:
            return
        settled, self.learned[runner] = learned
        self.progress.note(
            f"warm-up: {runner} kept its pace from warm-up step {settled + 1} of {len(warmup_s)} in block "
            f"{number + 1}: its later blocks warm up {self.learned[runner]} steps, checked block by block"
        )

    def _check(self, runner: str, number: int, first: RunResult, later: list[float]) -> None:
        if warmed_enough(first.summary.median_step_time_s, later):
            return
        steps = self.learned.pop(runner)
        self.returned.add(runner)
        self.progress.note(
            f"warm-up: {runner}'s block {number + 1} measured its first window slower than its later ones after "
            f"{steps} warm-up steps: its later blocks warm up until stable again",
            "warning",
        )
