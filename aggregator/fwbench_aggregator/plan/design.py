"""How a comparison makes its evidence: runs one after another in counterbalanced rounds (each run builds, warms up and
measures on its own, in its runner's process), or short windows interleaved in process blocks.

In a process block every runner gets a worker process of its own (spawned fresh for the block), where its first window
builds and warms up until its steps are stable (RunRequest.continue_reuse with nothing to continue); then the runners
measure short windows in turn (A B B A ...), each window stepping that warm build on,
so that a host's drift slower than a window moves every runner's windows alike. The block is the unit of evidence: its
value per runner is the geometric mean of that runner's window medians, and two runners are compared on their blocks'
log ratios (the paired test), so that a drift cancels within each block and a process's own offset (memory layout,
where its threads run), which windows within one process share, is sampled once per block (studies/evidence.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..base.vocabulary import DeviceKind

ROUNDS_LABEL = "rounds"  # the design of runs made one after another, as every store before designs were recorded
# A block's windows per runner, and each window's shortest measurement (measured and chosen in studies/evidence.md).
DEFAULT_BLOCK_WINDOWS = 8
DEFAULT_WINDOW_S = 0.1
# Each window's own warm-up: steps that refill the caches the other runners' windows emptied, before it measures.
REFILL_STEPS = 1
# A window measures at least this many steps however long they take, so that its median is not one step's.
MIN_WINDOW_STEPS = 3
MAX_BLOCK_WINDOWS = 100


# compare's --design, by name as the command line's other choices (base.vocabulary): auto, the default, is blocks where
# the runs can be windows on the CPU and rounds elsewhere (DesignChoice.on_devices).
Design = enum.Enum("Design", [(name, name) for name in ("auto", "rounds", "blocks")], type=str)
# Why auto keeps a GPU comparison in rounds: the A/A evidence for blocks was all measured on the CPU (studies/evidence.md).
GPU_IN_ROUNDS = "blocks have been checked against A/A comparisons on the CPU only"


@dataclass(frozen=True)
class BlockDesign:
    """Interleaved process blocks: `windows` windows per runner in each block, each measuring at least `window_s` and
    MIN_WINDOW_STEPS steps after REFILL_STEPS steps of warm-up (each window's request: run.wire.window)."""

    windows: int = DEFAULT_BLOCK_WINDOWS
    window_s: float = DEFAULT_WINDOW_S

    def __post_init__(self) -> None:
        if not 1 <= self.windows <= MAX_BLOCK_WINDOWS:
            raise ValueError(f"a block has 1 to {MAX_BLOCK_WINDOWS} windows per runner; got {self.windows}")
        if not self.window_s > 0:
            raise ValueError(f"a window measures for more than 0 s; got {self.window_s}")

    @property
    def label(self) -> str:
        """The design as every run of it records it (part of the measurement protocol: runs of one label pool)."""
        return f"blocks of {self.windows} windows"


def is_blocks(label: str) -> bool:
    """Whether a stored run's design label is a block design's."""
    return str(label).startswith("blocks of ")


@dataclass(frozen=True)
class DesignChoice:
    """The design a comparison asked for: `blocks` (None: rounds) and whether auto chose it, with why where auto
    fell back to rounds (`rounds_because`)."""

    blocks: BlockDesign | None = None
    auto: bool = False
    rounds_because: str = ""

    def on_devices(self, kinds: list[str]) -> tuple[BlockDesign | None, str]:
        """The design to run once every runner has resolved its device (`kinds`, each a DeviceKind), and the
        line that says how auto chose it ("" where the design was asked for by name)."""
        if not self.auto:
            return self.blocks, ""
        if self.blocks and any(kind != DeviceKind.cpu for kind in kinds):
            return None, f"design: rounds (auto: {GPU_IN_ROUNDS}; --design blocks runs them anyway)"
        if self.blocks:
            return self.blocks, (
                f"design: {self.blocks.label} of {self.blocks.window_s:g} s (auto: single-device "
                "back-to-back steps on the CPU; --design rounds runs whole runs)"
            )
        return None, f"design: rounds (auto: {self.rounds_because})"
