"""Which runs are alike: the comparability key, the columns beyond the configuration that must be equal for runs
to pool into one row and one verdict (analyse.alike labels the rows by them)."""

from __future__ import annotations

from ..plan.settings import BLOCK, stored
from .run_columns import SETTINGS_COLUMNS

# Beyond the configuration, what must be equal for runs to pool into one row and one verdict. Runs that differ in any
# part are never averaged: each group is its own row, labelled by what differs, and judged on its own runs. A run
# that does not record a part (a store from before it was recorded) is "" (unknown) for it, and pools only with runs
# unknown for it too.
#
# The runner's own facts: its framework and version, its image's digest where it ran in a container, the lock its
# environment was installed from (numpy, the BLAS and the rest beneath the framework), the malloc thresholds its
# processes ran under (a torch step faulted in fresh pages every step in some processes without them), every setting a verdict
# depends on, which version of a plug-in model it built, and whether its runs each had a fresh process (a process
# carries an offset of its own: docs/verdict.md). Runs of one runner that differ in any of these make rows of their
# own ("torch (version 2.15.0)"), each judged against the fastest of its block.
RUNNER_KEY_COLUMNS = (
    "framework",
    "framework_version",
    "image_digest",
    "environment_lock",
    "malloc",
    *SETTINGS_COLUMNS,
    "model_hash",
    "run_isolation",
)
# The machine and the measurement protocol, which all the runners of a verdict must share: runners are judged only
# against runners of the same block. The machine is its device model as the runner names it (the CPU model and its
# logical cores, or the GPU): the host's own id is the kernel's boot id, which a reboot changes, and a container's
# hostname is random, so neither can say "the same machine" across time; two hosts with one device model do pool,
# as a cluster's alike nodes are meant to. The protocol: the run settings its declarations put in the block's key (the
# warm-up and measured steps asked, the minimum window, the seeds of the weights and of the inputs), and the design
# that made the runs (whole runs in rounds, or windows in process blocks: a window is not a run, and their spreads
# differ).
BLOCK_KEY_COLUMNS = ("device_name", *(setting.column for setting in stored(BLOCK)), "design")
COMPARABILITY_COLUMNS = (*RUNNER_KEY_COLUMNS, *BLOCK_KEY_COLUMNS)
# A noise floor is a fact about runs of one key: a calibration records its runs' key (beside its configuration and
# framework), and a verdict applies only the floors calibrated on runs of its own key.
FLOOR_KEY_COLUMNS = tuple(c for c in COMPARABILITY_COLUMNS if c != "framework")
