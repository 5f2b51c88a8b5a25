"""fwbench models, describe, parity and max-batch: what the runners are, what they build, that they build it alike,
and how large a batch fits."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from ..app.max_batch import max_batch as max_batch_use_case
from ..app.parity import parity as parity_use_case
from ..app.runner_info import describe as describe_use_case
from ..app.runner_info import list_models
from ..plan import spec as plan
from ..present import listings
from . import app
from .common import report_failures, run
from .groups import with_groups
from .option_parsing import choices_metavar, parse_choice, parse_text
from .path_option_types import parse_out, parse_store
from .run_option_types import ModeOption
from .runner_options import RunnerOptions
from .workload_options import ModelOnDevice

# The precisions a parity check generates greedy tokens in: the runners export and compare these two only.
TokenPrecision = enum.Enum("TokenPrecision", [("fp32", "fp32"), ("amp_bf16", "amp_bf16")], type=str)


@app.command()
@with_groups
def models(
    runners: RunnerOptions = RunnerOptions(),
    parameters: Annotated[
        bool,
        typer.Option(
            "--parameters",
            help="count each model's trainable parameters too (default shape and options): the runner "
            "builds every model on its CPU, tens of seconds",
        ),
    ] = False,
) -> None:
    """List the models, one row each: task, default input, options, and the runners that build it."""
    choice = runners.choice()
    listing = run(lambda progress: list_models(choice, parameters, progress))
    listings.print_models(listing.models, listing.runners, parameters, listing.plugin_problems)
    report_failures(listing.failures)


@app.command()
@with_groups
def describe(
    runners: RunnerOptions = RunnerOptions(),
) -> None:
    """Show each runner's framework, versions, devices and precisions."""
    choice = runners.choice()
    described, failures = run(lambda progress: describe_use_case(choice, progress))
    listings.print_descriptions(described)
    report_failures(failures)


@app.command()
@with_groups
def parity(
    models: Annotated[
        str | None,
        typer.Option(callback=parse_text, help="comma-separated model names; default: every model both runners list"),
    ] = None,
    runners: RunnerOptions = RunnerOptions(),
    out: Annotated[Path, typer.Option(callback=parse_out, help="folder for parity.csv")] = Path("results"),
    store: Annotated[
        Path,
        typer.Option(
            callback=parse_store,
            help="the results store: each check is kept there, so that a comparison of a plug-in model says whether its "
            "runners were shown to build the same network",
        ),
    ] = Path("results/store"),
    precision: Annotated[
        str,
        typer.Option(
            callback=parse_choice(TokenPrecision, "precision greedy tokens are compared in"),
            metavar=choices_metavar(TokenPrecision),
            help="the precision generating models' greedy tokens are compared in: fp32 (identical tokens required) or "
            "amp_bf16 (where they first diverge is reported; only the models that generate are checked)",
        ),
    ] = "fp32",
) -> None:
    """Show that the runners build the same networks as the first one, the reference.

    Torch is the reference by default, against TensorFlow; --frameworks torch,tensorflow,jax adds JAX. Checked:
    parameters, FLOPs, output shapes, and, where a runner can load the reference's weights, the same output for the
    same input. The weights pass through the runners' reference folder: the runners started here share a temporary
    one; runners given with --runner must be started with one shared --reference-dir.
    """
    choice = runners.choice()
    names = [name for name in models.split(",") if name] if models else None
    result = run(lambda progress: parity_use_case(choice, names, out, progress, store, TokenPrecision(precision).value))
    listings.print_parity(result.tables, result.path)
    report_failures(result.failures)
    if result.differ:
        raise typer.Exit(1)


@app.command("max-batch")
@with_groups
def max_batch(
    workload: ModelOnDevice = ModelOnDevice(),
    mode: ModeOption = "train",
    limit: Annotated[
        int,
        typer.Option(
            min=1, max=plan.MAX_BATCH_SIZE, help="largest batch to try (on a CPU, device memory is the host's)"
        ),
    ] = 4096,
    runners: RunnerOptions = RunnerOptions(),
    store: Annotated[
        Path,
        typer.Option(
            callback=parse_store, help="the results store: each runner's search is kept there (frame max_batch)"
        ),
    ] = Path("results/store"),
) -> None:
    """The largest batch each runner fits in device memory: doubling, then bisection on out-of-memory refusals.

    Each runner's result is stored, to line up with a sweep's runs of the same configuration.
    """
    choice = runners.choice()
    # One step answers "does it fit": no warm-up, no minimum window, no power.
    spec = workload.spec(mode, 1, warmup=0, steps=1, power_rate_hz=0, min_measure_s=0.0)
    result = run(lambda progress: max_batch_use_case(spec, limit, choice, store, progress))
    listings.print_max_batch(result.searches, workload.label(mode), store)
    report_failures(result.failures)
