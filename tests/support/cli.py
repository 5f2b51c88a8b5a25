"""Running the fwbench command line as a user does: a subprocess, its output captured."""

from __future__ import annotations

import os
import subprocess
import sys

from typer.testing import CliRunner

# A small workload and short process blocks (2 windows of 0.02 s a runner): a compare in blocks over fake runners
# that ends in seconds.
SMALL_INFER = ("--model", "resnet18", "--mode", "infer", "--batch-size", "2", "--shape", "3x32x32")
SHORT_BLOCKS = ("--design", "blocks", "--block-windows", "2", "--window-s", "0.02")


def fwbench(
    *args: str, timeout: float = 600, env: dict[str, str] | None = None, columns: int = 200, clean: bool = False
) -> subprocess.CompletedProcess:
    """The command as a subprocess, its output captured; `clean` drops every FWBENCH_ variable of this process's
    environment (runners, TLS files, tokens), so that only `env` configures it."""
    inherited = {k: v for k, v in os.environ.items() if not (clean and k.startswith("FWBENCH_"))}
    return subprocess.run(
        [sys.executable, "-m", "fwbench_aggregator", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**inherited, "COLUMNS": str(columns), **(env or {})},
    )


def only_run_dir(out):
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "store"]
    return run_dir


def fwbench_in_process(*args: str, columns: int = 200):
    """The command run in this process (typer's runner): for mistakes refused before any runner is contacted, at a
    fraction of a subprocess's start-up. Its `output` holds stdout and stderr together."""
    from fwbench_aggregator.present.console import err_console, out_console

    # The consoles read COLUMNS once, when first imported: in a long test process (an xdist worker, with longer
    # temporary paths) that was some earlier test's width, so the width is set on them for this command.
    widths = out_console.width, err_console.width
    out_console.width = err_console.width = columns
    try:
        return CliRunner().invoke(_app(), list(args), env={"COLUMNS": str(columns)})
    finally:
        out_console.width, err_console.width = widths


def _app():
    from fwbench_aggregator.cli import app

    return app
