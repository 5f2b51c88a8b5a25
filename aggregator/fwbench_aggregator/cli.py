"""The fwbench command line: run the same benchmark on every runner and compare."""

from __future__ import annotations

import functools
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Annotated, NamedTuple, Optional

import pandas as pd
import typer
from fwbench.runner.v1 import runner_pb2 as pb
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import parity as parity_mod
from . import plots
from . import report as report_mod
from . import store as store_mod
from . import sweep as sweep_mod
from . import stats
from . import results as results_mod
from .batch_search import BatchSearch
from .client import RunnerClient, RunnerFailure, RunResult
from .console import Column, err_console, out_console, print_table
from .scheduler import device_group, run_grouped
from .plan import RunSpec, option_pairs
# The choices come from the contract, as a sweep file's do: one definition of each.
from .vocabulary import (
    DEVICE, DEVICE_FORMS, SHAPE, SHAPE_FORMS, Compilation, device_text, indexed_device, shape_dims, shape_text, to_text,
)
from .vocabulary import Layout as LayoutChoice
from .vocabulary import Mode as ModeChoice
from .vocabulary import Precision as PrecisionChoice
from .vocabulary import Switch as SwitchChoice
from .frameworks import names as framework_names
from .launch import LocalRunner, RunnerStartError, StartupSettings, default_venvs, embedded_command

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


def parse_compilation(values: list[str]) -> list[str]:
    for value in values:
        setting = value.partition("=")[2] if "=" in value else value
        if setting not in Compilation.__members__:
            raise typer.BadParameter(
                f"{value!r}: give VALUE for every runner or RUNNER=VALUE for one; accepted values: {', '.join(Compilation.__members__)}"
            )
    return values


def compilation_for(runner: str, values: list[str]) -> Optional[Compilation]:
    """The compilation asked for this runner: RUNNER=VALUE wins over a plain VALUE; None leaves its default."""
    chosen = None
    for value in values:
        name, sep, setting = value.partition("=")
        if not sep:
            chosen = chosen or value
        elif name == runner:
            return Compilation(setting)
    return chosen and Compilation(chosen)


def parse_shape(value: Optional[str]) -> Optional[str]:
    if value is not None and not SHAPE.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not a shape: give {SHAPE_FORMS}")
    return value


def parse_options(values: list[str]) -> list[str]:
    for value in values:
        if not re.fullmatch(r"[a-z_]+=[A-Za-z0-9_]+", value):
            raise typer.BadParameter(f"{value!r} is not NAME=VALUE, e.g. head=mlm (`fwbench models` lists each model's options)")
    return values


def parse_device(value: Optional[str]) -> Optional[str]:
    if value is not None and not DEVICE.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not a device: accepted values are {DEVICE_FORMS}")
    return value


# Where the runners already run (compose.yaml sets it in the aggregator's container).
RUNNERS_ENV = "FWBENCH_RUNNERS"


def parse_runners(values: list[str]) -> list[str]:
    for value in values:
        name, sep, address = value.partition("=")
        if not sep or not name or not re.fullmatch(r"[^\s:]+:\d+", address):
            raise typer.BadParameter(f"{value!r} is not NAME=HOST:PORT, e.g. torch=localhost:50051")
    return values


RunnerOption = Annotated[
    list[str],
    typer.Option(
        callback=parse_runners, envvar=RUNNERS_ENV,
        help=f"NAME=HOST:PORT of a running runner; repeat for each (or ${RUNNERS_ENV}, space-separated). Default: start the embedded runners",
    ),
]


def parse_frameworks(value: str) -> str:
    known = framework_names()
    unknown = [name for name in value.split(",") if name not in known]
    if unknown or not value:
        raise typer.BadParameter(f"unknown framework(s) {unknown}; accepted values: {', '.join(known)}")
    return value


def every_framework() -> str:
    """The embedded runners a command starts by default: every declared framework."""
    return ",".join(framework_names())


FrameworksOption = Annotated[str, typer.Option(callback=parse_frameworks, help="embedded runners to start, comma-separated")]
VenvsOption = Annotated[Optional[Path], typer.Option(help="folder holding the embedded runners' environments (default: $FWBENCH_VENVS or .venvs)")]


def start_embedded(
    frameworks: list[str], venvs: Path, log_dir: Path, stack: ExitStack, settings: StartupSettings = StartupSettings()
) -> tuple[dict, list]:
    """Start each framework's runner locally, all at once; returns their addresses and the failures."""
    log_dir.mkdir(parents=True, exist_ok=True)
    failures: list[RunnerFailure] = []
    runners: dict[str, LocalRunner] = {}
    for name in frameworks:
        try:
            runners[name] = LocalRunner(name, embedded_command(name, venvs, settings), log_dir / f"{name}-runner.log")
        except RunnerStartError as error:
            failures.append(RunnerFailure(name, "UNAVAILABLE", str(error)))
    addresses: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(runners))) as pool:
        started = {name: pool.submit(runner.start) for name, runner in runners.items()}
        for name, future in started.items():
            stack.callback(runners[name].stop)
            try:
                addresses[name] = future.result()
            except RunnerStartError as error:
                failures.append(RunnerFailure(name, "UNAVAILABLE", str(error)))
    return addresses, failures


def resolve_endpoints(
    runner: list[str], frameworks: str, venvs: Optional[Path], log_dir: Path, stack: ExitStack,
    settings: StartupSettings = StartupSettings(),
) -> tuple[dict[str, str], list[RunnerFailure]]:
    """The runners given as NAME=HOST:PORT, or else the embedded ones, started now."""
    if runner:
        return dict(value.split("=", 1) for value in runner), []
    err_console.print(f"starting the embedded runners: {frameworks}")
    return start_embedded(frameworks.split(","), venvs or default_venvs(), log_dir, stack, settings)


def run_all(
    endpoints: dict[str, str], requests: dict[str, pb.RunRequest], repetitions: int = 1, cooldown_s: float = 0.0
) -> tuple[list[RunResult], list[RunnerFailure]]:
    """Run the request on each runner, one after the other (they may share a device), repetition
    after repetition, the frameworks interleaved (A, B, A, B, ...) so that drift favours neither.
    A runner that fails is named once and left out of later repetitions."""
    results, failures = [], []
    failed: set[str] = set()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console) as progress:
        for repetition in range(repetitions):
            for name, address in endpoints.items():
                if name in failed:
                    continue
                if cooldown_s and (repetition or name != next(iter(endpoints))):
                    time.sleep(cooldown_s)
                label = f"{name} #{repetition + 1}/{repetitions}"
                task = progress.add_task(f"{label}: starting", total=None)

                def on_progress(p: pb.Progress, task=task, label=label) -> None:
                    phase = to_text(pb.Phase, p.phase)
                    progress.update(task, description=f"{label}: {phase}", completed=p.steps_done, total=p.steps_total)

                try:
                    with RunnerClient(name, address) as client:
                        results.append(client.run(requests[name], on_progress, repetition))
                    progress.update(task, description=f"{label}: done")
                except RunnerFailure as failure:
                    failures.append(failure)
                    failed.add(name)
                    progress.update(task, description=f"{label}: failed")
    return results, failures


def _energy_cells(row) -> tuple[str, str]:
    per_sample = getattr(row, "energy_per_sample_j", None)
    if per_sample is None or pd.isna(per_sample):
        return "unavailable", "unavailable"
    return f"{per_sample:.3g}", f"{row.mean_power_w:.1f}"


def print_comparison(table, verdicts, title: str) -> None:
    headers = ("median ms", "p5 ms", "p95 ms", "std ms", "samples/s", "× fastest", "rep. CV", "J/sample", "mean W")
    runners = [(row.runner, f"{row.framework} {row.version}") for row in table.itertuples()]
    figures = [
        (
            f"{row.median_step_time_s * 1e3:.2f}", f"{row.p5_step_time_s * 1e3:.2f}",
            f"{row.p95_step_time_s * 1e3:.2f}", f"{row.std_step_time_s * 1e3:.2f}",
            f"{row.throughput_samples_per_s:.1f}", f"{row.ratio_to_fastest:.3f}",
            "-" if row.repetitions < 2 else f"{row.repetition_median_cv:.1%}",
            *_energy_cells(row),
        )
        for row in table.itertuples()
    ]
    columns = [Column("runner", key=True), Column("version", key=True), *(Column(h, numeric=True) for h in headers)]
    print_table(columns, [(*runner, *row) for runner, row in zip(runners, figures)], title)
    for verdict in verdicts:
        out_console.print(f"verdict: {verdict.verdict}")
    for row in table.itertuples():
        status = getattr(row, "energy_status", "")
        if isinstance(status, str) and status.startswith("unavailable"):
            out_console.print(f"energy ({row.runner}): {status}")


@app.command()
def compare(
    model: Annotated[str, typer.Option(help="model name, as `fwbench models` lists them")] = "resnet18",
    mode: Annotated[ModeChoice, typer.Option(help="train or infer")] = ModeChoice.train,
    batch_size: Annotated[int, typer.Option(min=1, help="samples per step")] = 32,
    shape: Annotated[
        Optional[str], typer.Option(callback=parse_shape, help="per-sample input shape: 3x224x224, seq=128, audio=16000, 161x400; default: the model's")
    ] = None,
    option: Annotated[
        list[str], typer.Option(callback=parse_options, help="model option NAME=VALUE, e.g. head=mlm; repeat for each")
    ] = [],
    precision: Annotated[PrecisionChoice, typer.Option(help="numeric precision, identical on every runner")] = PrecisionChoice.fp32,
    device: Annotated[Optional[str], typer.Option(callback=parse_device, help="cpu, gpu or gpu:N; default: the runner's first GPU, else its CPU")] = None,
    layout: Annotated[Optional[LayoutChoice], typer.Option(help="image models' memory layout; default channels_last")] = None,
    compilation: Annotated[
        list[str], typer.Option(callback=parse_compilation, help=f"{', '.join(Compilation.__members__)}, for every runner or as RUNNER=VALUE; default: each framework's default (PyTorch eager, TensorFlow graph)")
    ] = [],
    cudnn_autotune: Annotated[SwitchChoice, typer.Option(help="cuDNN autotuning, the same on every runner")] = SwitchChoice.off,
    intra_op_threads: Annotated[int, typer.Option(min=1, help="threads within an op, every runner (default: all cores)")] = os.cpu_count() or 1,
    inter_op_threads: Annotated[int, typer.Option(min=1, help="ops at once, every runner (default: all cores)")] = os.cpu_count() or 1,
    warmup: Annotated[int, typer.Option(min=0, help="warm-up steps, excluded from the figures (with --warmup-until-cv: the most)")] = 5,
    warmup_until_cv: Annotated[
        Optional[float], typer.Option(min=0.0, max=1.0, help="warm up until the last --stable-window steps vary less than this (e.g. 0.05)")
    ] = None,
    stable_window: Annotated[int, typer.Option(min=2, help="steps in the warm-up stability window")] = 5,
    steps: Annotated[int, typer.Option(min=1, help="measured steps (at least)")] = 20,
    min_measure_s: Annotated[Optional[float], typer.Option(min=0.0, help="measure for at least this many seconds")] = None,
    power_rate_hz: Annotated[float, typer.Option(min=0.0, max=100.0, help="power telemetry samples per second (1-100; 0: off)")] = 20.0,
    idle_baseline_s: Annotated[float, typer.Option(min=0.0, max=60.0, help="idle power measured before each run")] = 1.0,
    seed: Annotated[int, typer.Option(min=0)] = 0,
    repetitions: Annotated[int, typer.Option(min=1, help="runs per framework, interleaved A, B, A, B, ...")] = 1,
    cooldown_s: Annotated[float, typer.Option(min=0.0, help="seconds to wait between runs")] = 0.0,
    min_effect: Annotated[float, typer.Option(min=0.0, help="smallest difference a verdict calls real, as a fraction")] = stats.MIN_EFFECT,
    runner: RunnerOption = [],
    frameworks: FrameworksOption = every_framework(),
    venvs: Annotated[Path, typer.Option(help="folder holding the embedded runners' environments (default: $FWBENCH_VENVS or .venvs)")] = None,
    out: Annotated[Path, typer.Option(help="folder to write results into; each comparison gets a subfolder")] = Path("results"),
) -> None:
    """Run one model at one batch size and shape on every runner, and compare them."""
    startup = StartupSettings(intra_op_threads, inter_op_threads, cudnn_autotune.value)
    spec = RunSpec(
        model, mode, batch_size, shape, precision, device, layout, warmup=warmup, steps=steps, seed=seed,
        model_options=option_pairs(option), startup=startup, warmup_until_cv=warmup_until_cv,
        stable_window=stable_window, min_measure_s=min_measure_s, power_rate_hz=power_rate_hz,
        idle_baseline_s=idle_baseline_s,
    )
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{model}-{mode.value}-b{batch_size}"
    out_dir = out / run_id
    with ExitStack() as stack:
        endpoints, failures = resolve_endpoints(runner, frameworks, venvs, out_dir / "logs", stack, startup)
        requests = {name: replace(spec, compilation=compilation_for(name, compilation)).to_request() for name in endpoints}
        results, run_failures = run_all(endpoints, requests, repetitions, cooldown_s)
        failures += run_failures

    steps = results_mod.steps_frame(run_id, results)
    frames = {
        "steps": steps,
        "summary": results_mod.summary_frame(run_id, results, failures),
        "power": results_mod.power_frame(run_id, results),
    }
    if results:
        table = results_mod.comparison_table(steps, frames["summary"], batch_size)
        found = results_mod.verdicts(steps, min_effect)
        table["verdict"] = [next((v.verdict for v in found if v.slower == r), "fastest" if found else "") for r in table["runner"]]
        frames["comparison"] = table
        shape_shown = shape_text(results[0].config.input_shape)
        print_comparison(
            table, found,
            f"{model} {mode.value}, batch {batch_size}, {shape_shown}, {precision.value}, {results[0].config.device.name}",
        )
    written = results_mod.write_results(out_dir, frames)
    if not frames["power"].empty:
        written += plots.power_timeline(frames["power"], out_dir)
    if results:
        written.append(results_mod.write_manifest(out_dir, run_id, results, requests))
    for r in results:
        for flag in r.summary.flags:
            err_console.print(f"[yellow]{r.runner} #{r.repetition + 1}: {flag}[/]")
    err_console.print(f"results: {', '.join(str(p) for p in written)}")
    report_failures(failures)






def each_runner(
    runner: list[str], frameworks: str, venvs: Optional[Path], visit: Callable[[str, str, RunnerClient], None]
) -> list[RunnerFailure]:
    """Call `visit(name, address, client)` for every runner, started or named; returns the runners that failed."""
    with ExitStack() as stack, TemporaryDirectory() as logs:
        endpoints, failures = resolve_endpoints(runner, frameworks, venvs, Path(logs), stack)
        for name, address in endpoints.items():
            try:
                with RunnerClient(name, address) as client:
                    visit(name, address, client)
            except RunnerFailure as failure:
                failures.append(failure)
    return failures


@app.command()
def models(runner: RunnerOption = [], frameworks: FrameworksOption = every_framework(), venvs: VenvsOption = None) -> None:
    """List every runner's models: task, default and minimum input shape, trainable parameters."""
    columns = [
        Column("runner", key=True), Column("model", key=True), Column("task"), Column("input"), Column("default shape"),
        Column("min shape"), Column("max shape"), Column("options"), Column("parameters", numeric=True),
    ]
    rows = []

    def add_rows(name: str, address: str, client: RunnerClient) -> None:
        for m in client.list_models():
            rows.append((
                name, m.name, to_text(pb.Task, m.task), m.input_convention,
                shape_text(m.default_input_shape), shape_text(m.min_input_shape), shape_text(m.max_input_shape),
                " ".join(f"{o.name}={'|'.join(o.choices)}" for o in m.options),
                f"{m.parameter_count:,}",
            ))

    failures = each_runner(runner, frameworks, venvs, add_rows)
    print_table(columns, rows, "models")
    report_failures(failures)


@app.command()
def describe(runner: RunnerOption = [], frameworks: FrameworksOption = every_framework(), venvs: VenvsOption = None) -> None:
    """Show each runner's framework, versions, devices and precisions."""
    columns = [
        Column("runner", key=True), Column("address"), Column("framework"), Column("version"), Column("python"),
        Column("CUDA"), Column("cuDNN"), Column("runner version"), Column("protocol"), Column("devices"),
        Column("precisions"), Column("options"),
    ]
    rows = []

    def show(name: str, address: str, client: RunnerClient) -> None:
        info = client.describe()
        devices = [
            f"{device_text(d)} {d.name}" + (f", {d.memory_bytes / 2**30:.1f} GiB" if d.memory_bytes else "")
            + (f", driver {d.driver_version}" if d.driver_version else "")
            for d in info.devices
        ]
        rows.append((
            name, address, info.framework, info.framework_version, info.python_version, info.cuda_version or "-",
            info.cudnn_version or "-", info.runner_version, info.protocol, "\n".join(devices),
            ", ".join(to_text(pb.Precision, p) for p in info.precisions),
            "\n".join(f"{key}={value}" for key, value in sorted(info.options.items())),
        ))

    failures = each_runner(runner, frameworks, venvs, show)
    print_table(columns, rows, "runners")
    report_failures(failures)


def report_failures(failures: list[RunnerFailure]) -> None:
    for failure in failures:
        err_console.print(f"[bold red]runner {failure.runner} failed[/]: {failure.code}: {failure.message}")
    if failures:
        raise typer.Exit(1)


@app.command()
def parity(
    models: Annotated[Optional[str], typer.Option(help="comma-separated model names; default: every model both runners list")] = None,
    runner: RunnerOption = [],
    venvs: VenvsOption = None,
    out: Annotated[Path, typer.Option(help="folder for parity.csv and the weight files both runners exchange")] = Path("results"),
) -> None:
    """Show that the first two declared runners (torch, the reference, and TensorFlow) build the same networks:
    parameters, FLOPs, output shapes, and, where the other runner can load the reference's weights, the same
    output for the same input."""
    pair = reference_name, other_name = tuple(framework_names()[:2])
    names = [name for name in models.split(",") if name] if models else None
    run_dir = out / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-parity")
    failures: list[RunnerFailure] = []
    table = None
    with ExitStack() as stack:
        endpoints, failures = resolve_endpoints(runner, ",".join(pair), venvs, run_dir / "logs", stack)
        if set(pair) <= endpoints.keys():
            reference = stack.enter_context(RunnerClient(reference_name, endpoints[reference_name]))
            other = stack.enter_context(RunnerClient(other_name, endpoints[other_name]))
            known = [m.name for m in reference.list_models()]
            unknown = sorted(set(names or []) - set(known))
            if unknown:
                raise typer.BadParameter(f"unknown model(s) {unknown}; known models: {', '.join(known)}", param_hint="--models")
            with err_console.status("checking parity") as status:
                try:
                    table = parity_mod.parity_table(
                        reference, other, names, run_dir, lambda v: status.update(f"checking {v.label}")
                    )
                except RunnerFailure as failure:
                    failures.append(failure)
    if table is not None:
        path = run_dir / "parity.csv"
        table.to_csv(path, index=False)
        print_parity(table, reference_name, other_name)
        err_console.print(f"results: {path}")
        if (table["verdict"] != "same").any():
            err_console.print("[bold red]some models differ between the runners[/]")
            raise typer.Exit(1)
    report_failures(failures)


def print_parity(table, reference: str, other: str) -> None:
    columns = [
        Column("model", key=True), Column("input"), Column("params", numeric=True), Column("GFLOPs", numeric=True),
        Column("output"), Column("max rel diff"), Column("verdict"),
    ]
    rows = []
    for row in table.to_dict("records"):
        numeric = row["numeric"] if pd.isna(row["max_rel_diff"]) else f"{row['max_rel_diff']:.1e} ({row['numeric']})"
        rows.append((
            row["model"], row["input_shape"],
            f"{row[f'params_{reference}']:,} / {row[f'params_{other}']:,}",
            f"{row[f'flops_{reference}'] / 1e9:.3f} / {row[f'flops_{other}'] / 1e9:.3f}",
            f"{row[f'output_{reference}']} / {row[f'output_{other}']}", numeric, row["verdict"],
        ))
    print_table(columns, rows, f"parity: {reference} / {other}")


# The list of batches a search tried wraps at this width rather than widening the table.
BATCHES_TRIED_WIDTH = 40


@app.command("max-batch")
def max_batch(
    model: Annotated[str, typer.Option(help="model name, as `fwbench models` lists them")] = "resnet18",
    mode: Annotated[ModeChoice, typer.Option(help="train or infer")] = ModeChoice.train,
    shape: Annotated[Optional[str], typer.Option(callback=parse_shape, help="per-sample input shape; default: the model's")] = None,
    option: Annotated[list[str], typer.Option(callback=parse_options, help="model option NAME=VALUE")] = [],
    precision: Annotated[PrecisionChoice, typer.Option(help="numeric precision")] = PrecisionChoice.fp32,
    device: Annotated[Optional[str], typer.Option(callback=parse_device, help="cpu, gpu or gpu:N")] = None,
    limit: Annotated[int, typer.Option(min=1, max=65536, help="largest batch to try (on a CPU, device memory is the host's)")] = 4096,
    runner: RunnerOption = [],
    frameworks: FrameworksOption = every_framework(),
    venvs: VenvsOption = None,
) -> None:
    """The largest batch each runner fits in device memory: doubling, then bisection on RESOURCE_EXHAUSTED."""
    request = RunSpec(
        model, mode, 1, shape, precision, device, warmup=0, steps=1, model_options=option_pairs(option), power_rate_hz=0
    ).to_request()
    rows = []
    failures: list[RunnerFailure] = []
    with ExitStack() as stack, TemporaryDirectory() as logs:
        endpoints, failures = resolve_endpoints(runner, frameworks, venvs, Path(logs), stack)
        for name, address in endpoints.items():
            client = stack.enter_context(RunnerClient(name, address))

            def fits(batch: int, client=client) -> bool:
                request.batch_size = batch
                try:
                    client.run(request)
                except RunnerFailure as failure:
                    if failure.code == "RESOURCE_EXHAUSTED":
                        return False
                    raise
                return True

            search = BatchSearch(fits, limit=limit)
            with err_console.status(f"{name}: searching"):
                try:
                    largest = search.largest()
                except RunnerFailure as failure:
                    failures.append(failure)
                    continue
            tried = ", ".join(f"{b}{'' if ok else ' (OOM)'}" for b, ok in sorted(search.tried.items()))
            rows.append((name, "none fits" if largest is None else str(largest), tried))
    columns = [Column("runner", key=True), Column("largest batch"), Column("batches tried", wrap_at=BATCHES_TRIED_WIDTH)]
    print_table(columns, rows, f"largest batch: {model} {mode.value}, {precision.value}")
    report_failures(failures)


# Failures that belong to the configuration and would repeat: stored, so --resume skips them and
# reports mark them. An unreachable runner or an internal error is not stored: a resume retries it.
REPEATABLE_FAILURES = {"RESOURCE_EXHAUSTED", "INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND"}


@app.command()
def sweep(
    file: Annotated[Optional[Path], typer.Argument(help="a sweep file (YAML); or use the options below")] = None,
    models: Annotated[Optional[str], typer.Option(help="comma-separated models")] = None,
    modes: Annotated[Optional[str], typer.Option(help="comma-separated: train, infer")] = None,
    batch_sizes: Annotated[Optional[str], typer.Option(help="comma-separated, e.g. 1,2,4,8")] = None,
    shapes: Annotated[Optional[str], typer.Option(help="comma-separated shapes, e.g. 3x32x32,3x64x64")] = None,
    precisions: Annotated[Optional[str], typer.Option(help="comma-separated precisions")] = None,
    repetitions: Annotated[Optional[int], typer.Option(min=1)] = None,
    warmup: Annotated[Optional[int], typer.Option(min=0)] = None,
    steps: Annotated[Optional[int], typer.Option(min=1)] = None,
    store: Annotated[Path, typer.Option(help="the results store (append-only; every completed run is kept)")] = Path("results/store"),
    resume: Annotated[bool, typer.Option(help="skip configurations already in the store")] = False,
    report: Annotated[bool, typer.Option(help="write the HTML report from the store when the sweep ends")] = True,
    runner: RunnerOption = [],
    venvs: VenvsOption = None,
) -> None:
    """Run a whole study, one run at a time, each stored the moment it completes; Ctrl-C keeps every finished run."""
    try:
        if file is not None:
            plan = sweep_mod.load_sweep(file)
        elif models:
            plan = sweep_mod.sweep_from_options(
                models, batch_sizes=batch_sizes, shapes=shapes, modes=modes, precisions=precisions,
                repetitions=repetitions, warmup=warmup, steps=steps,
            )
        else:
            raise typer.BadParameter("give a sweep file or at least --models", param_hint="FILE / --models")
    except sweep_mod.SweepError as error:
        raise typer.BadParameter(str(error)) from None
    results_store = store_mod.ResultStore(store)
    results_store.clean_partials()
    startup = StartupSettings()
    pending = []
    for c in plan.configurations():
        key = store_mod.run_key(c.key_fields(seed=0, intra_op_threads=startup.intra_op_threads,
                                             inter_op_threads=startup.inter_op_threads, cudnn_autotune=startup.cudnn_autotune))
        if results_store.has(key):
            if not resume:
                raise typer.BadParameter(f"{store} already holds {c.runner} {c.model}; use --resume to skip what is done", param_hint="--store")
            continue
        pending.append((key, c))
    skipped = len(plan.configurations()) - len(pending)
    err_console.print(f"{len(pending)} runs to do, {skipped} already in {store}")
    failures: list[RunnerFailure] = []
    interrupted = False
    with ExitStack() as stack:
        names = ",".join(sorted({c.runner for _, c in pending}))
        endpoints, failures = (resolve_endpoints(runner, names, venvs, store / "logs", stack, startup) if pending else ({}, []))
        facts = {name: runner_facts(name, address) for name, address in endpoints.items()}
        store_lock = threading.Lock()
        active: set[RunnerClient] = set()
        stop = threading.Event()
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
        with Progress(*columns, console=err_console) as progress:
            overall = progress.add_task("sweep", total=len(pending))

            def run_one(job) -> None:
                key, c = job
                progress.update(overall, description=f"{c.runner} {c.model} {c.mode.value} b{c.batch_size} #{c.repetition + 1}")
                request = c.run_spec(startup).to_request()
                config = c.key_fields()
                client = RunnerClient(c.runner, endpoints[c.runner])
                active.add(client)
                try:
                    result = client.run(request, repetition=c.repetition)
                except RunnerFailure as failure:
                    failures.append(failure)
                    if failure.code in REPEATABLE_FAILURES and not stop.is_set():
                        # Where the run would have been: the device and shape a success would report.
                        where = facts[c.runner].failure_columns(c.model, c.device, c.shape)
                        with store_lock:
                            results_store.append_failure(key, config, failure.code, failure.message, columns=where)
                else:
                    frames = {
                        "steps": results_mod.steps_frame(key, [result]),
                        "summary": results_mod.summary_frame(key, [result], []),
                        "power": results_mod.power_frame(key, [result]),
                    }
                    with store_lock:
                        results_store.append(key, config, frames, results_mod.manifest(key, [result], {c.runner: request}))
                finally:
                    active.discard(client)
                    client.close()
                progress.advance(overall)

            jobs = [
                (device_group(endpoints[c.runner], c.device or facts[c.runner].default_device, facts[c.runner].options), (key, c))
                for key, c in pending
                if c.runner in endpoints
            ]
            try:
                run_grouped(jobs, run_one, stop, between=lambda: time.sleep(plan.cooldown_s))
            except KeyboardInterrupt:
                interrupted = True
                # Closing the channels cancels the runs in flight: each runner stops between steps.
                for client in list(active):
                    client.close()
    done = len(results_store.keys())
    if interrupted:
        err_console.print(f"[bold yellow]interrupted[/]: the run in flight was cancelled; {done} runs are kept in {store}")
        raise typer.Exit(130)
    if report and done:
        path = write_store_report(results_store, store / "report")
        err_console.print(f"report: {path}")
    for failure in failures:
        err_console.print(f"[red]{failure.runner}: {failure.code}: {failure.message}[/]")


class RunnerFacts(NamedTuple):
    """What a sweep needs to know of a runner beyond its results."""

    default_device: str
    failure_columns: Callable[[str, Optional[str], Optional[str]], dict]  # (model, device, shape) of a failed run
    options: dict[str, str]  # its Describe options: which machine, which GPUs


def runner_facts(name: str, address: str) -> RunnerFacts:
    """The runner's default device; for a failed run, the runner, framework, device and shape a
    successful one would have reported; and its Describe options."""
    with RunnerClient(name, address) as client:
        info = client.describe()
    gpus = [d for d in info.devices if d.kind == pb.DEVICE_KIND_GPU]
    default_device = f"gpu:{gpus[0].index}" if gpus else "cpu:0"

    @functools.cache
    def default_shapes() -> dict[str, str]:
        # Listing models builds each once on the runner: only worth it once a run has failed.
        with RunnerClient(name, address) as client:
            return {m.name: shape_text(m.default_input_shape) for m in client.list_models()}

    def columns(model: str, device: Optional[str], shape: Optional[str]) -> dict:
        return {
            "runner": name,
            "framework": info.framework,
            "framework_version": info.framework_version,
            "device": indexed_device(device or default_device),
            "input_shape": shape_text(shape_dims(shape)) if shape else default_shapes().get(model, ""),
        }

    return RunnerFacts(default_device, columns, dict(info.options))


def write_store_report(results_store, out_dir: Path) -> Path:
    summary, steps = results_store.load("summary"), results_store.load("steps")
    rows = report_mod.comparison_rows(summary, steps)
    report_mod.print_rows(rows)
    manifests = {key: results_store.manifest(key) for key in sorted(results_store.keys())}
    return report_mod.write_report(summary, steps, manifests, out_dir)


@app.command("report")
def report_command(
    store: Annotated[Path, typer.Option(help="the results store a sweep wrote")] = Path("results/store"),
    out: Annotated[Optional[Path], typer.Option(help="folder for report.html, tables and plots (default: STORE/report)")] = None,
) -> None:
    """Tables, plots, verdicts and the manifest from the store alone: no runner is needed."""
    results_store = store_mod.ResultStore(store)
    if not results_store.keys():
        raise typer.BadParameter(f"{store} holds no runs", param_hint="--store")
    err_console.print(f"report: {write_store_report(results_store, out or store / 'report')}")
