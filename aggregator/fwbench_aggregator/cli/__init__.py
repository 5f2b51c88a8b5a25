"""The fwbench command line: run the same benchmark on every runner and compare. Each command parses its options,
calls a use case (app) and presents what it returns."""

from __future__ import annotations

import typer

from .common import Commands

app = typer.Typer(
    cls=Commands,
    add_completion=False,
    no_args_is_help=True,
    help="Does PyTorch or TensorFlow train and serve your model faster, on your hardware? fwbench runs the same benchmark on every runner and compares them, with evidence.",
    rich_markup_mode="markdown",
)

# Each module adds its commands to `app`.
from . import compare, export, runners, serving, slurm, store, study  # noqa: E402,F401 (after app: each adds its commands)
