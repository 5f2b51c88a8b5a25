"""--wait-for-quiet S, for the commands that measure (compare, calibrate, sweep): its value goes to the use case's
run.gate.Gate, which waits before each run."""

from __future__ import annotations

from typing import Annotated

import typer

MAX_WAIT_FOR_QUIET_S = 3600.0

WaitForQuietOption = Annotated[
    float,
    typer.Option(
        "--wait-for-quiet",
        metavar="S",
        min=0.0,
        max=MAX_WAIT_FOR_QUIET_S,
        help="before each run, wait up to S seconds for a quiet host (other processes keeping at most half a CPU core "
        "busy, no other fwbench measuring, the run's GPU idle), then run either way; each run records how long it "
        "waited. 0: no wait",
    ),
]
