"""The fwbench command line: run the same benchmark on every runner and compare."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, replace
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Annotated, Optional

import pandas as pd
import typer
from fwbench.runner.v1 import runner_pb2 as pb
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from typer.core import TyperGroup

from . import analysis, jobs, model_facts, plan, plots, runs, stats
from . import parity as parity_mod
from . import slurm as slurm_mod
from . import report as report_mod
from . import results as results_mod
from . import store as store_mod
from . import sweep as sweep_mod
from .batch_search import BatchSearch
from .client import RunnerClient, RunnerFailure
from .console import Column, err_console, out_console, print_table
from .launch import RunnerStartError, StartupSettings, default_venvs, embedded_command
from .options import (
    BatchSizeOption, DevicesOption, DistributedTimeoutOption, FrameworksOption, LatencyBudgetOption, MinMeasureOption,
    ModelOption,
    RendezvousPortOption, RepetitionsOption, RunnerOption, StepsOption, StoreOption, StrategyOption, TlsCaOption,
    TlsCertOption, TlsKeyOption, TokenFileOption, VenvsOption, WarmupOption, WarmupUntilCvOption, compilation_for,
    every_framework, parse_compilation, parse_device, parse_options, parse_power_rate, parse_runners, parse_shape,
    parse_text, runner_transport, runners_in_use, strategy_for,
)
from .paths import safe_component
from .plan import RunSpec, option_pairs
# The choices come from the contract, as a sweep file's do: one definition of each.
from .vocabulary import Compilation, device_text, shape_text, to_text
from .vocabulary import Layout as LayoutChoice
from .vocabulary import Mode as ModeChoice
from .vocabulary import Precision as PrecisionChoice
from .vocabulary import Switch as SwitchChoice


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt, so that both end a command the same way: the runs
    in flight cancelled, finished runs kept, runners stopped."""


def _terminate(signum, frame) -> None:
    raise Terminated()


def interrupted_status(interrupt: KeyboardInterrupt) -> int:
    """The shell's exit status for a command ended by a signal, 128 + its number: Ctrl-C 130, SIGTERM 143."""
    return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)


class Commands(TyperGroup):
    """Every command ends on SIGTERM as on Ctrl-C, with the signal's exit status."""

    def invoke(self, ctx):
        signal.signal(signal.SIGTERM, _terminate)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as interrupt:
            status = interrupted_status(interrupt)
            err_console.print(f"[bold yellow]interrupted by {signal.Signals(status - 128).name}[/]: runs in flight "
                              "cancelled, finished runs kept, runners stopped")
            raise typer.Exit(status) from None


app = typer.Typer(cls=Commands, add_completion=False, no_args_is_help=True, help=__doc__)


def _energy_cells(row) -> tuple[str, str]:
    per_sample = row.energy_per_sample_j
    if pd.isna(per_sample):
        return "unavailable", "unavailable"
    return f"{per_sample:.3g}", f"{row.mean_power_w:.1f}"


def _ms(value: float) -> str:
    return "–" if pd.isna(value) else f"{value:.2f}"


def print_comparison(rows: pd.DataFrame, title: str) -> None:
    """One configuration's rows (analysis.comparison_rows): a table, the verdicts, and what is missing."""
    ran = rows[rows["status"] == "ok"]
    headers = ("runs", "median ms", "p5 ms", "p95 ms", "run spread", "samples/s", "× fastest", "J/sample", "mean W")
    runners = [(row.runner, f"{row.framework} {row.framework_version}") for row in ran.itertuples()]
    figures = [
        (
            str(row.runs), _ms(row.median_step_ms), _ms(row.p5_step_ms), _ms(row.p95_step_ms),
            "–" if pd.isna(row.run_spread) else f"{row.run_spread:.1%}",
            f"{row.throughput_samples_per_s:.1f}", f"{row.ratio_to_fastest:.3f}", *_energy_cells(row),
        )
        for row in ran.itertuples()
    ]
    if (ran["world_size"] > 1).any():
        # A distributed run: its replicas and how far its slowest rank trailed the fastest.
        headers = (*headers, "devices", "straggler spread")
        figures = [
            (*cells, str(row.world_size), "–" if pd.isna(row.straggler_spread) else f"{row.straggler_spread:.1%}")
            for cells, row in zip(figures, ran.itertuples())
        ]
    columns = [Column("runner", key=True), Column("version", key=True), *(Column(h, numeric=True) for h in headers)]
    print_table(columns, [(*runner, *row) for runner, row in zip(runners, figures)], title)
    for row in rows.itertuples():
        if row.verdict != "fastest":
            out_console.print(f"verdict: {row.runner}: {analysis.flagged_verdict(row.verdict, row.flagged)}")
    floor = rows["noise_floor"].dropna()
    if len(ran) > 1:
        out_console.print(
            f"noise floor: {floor.iloc[0]:.1%} (fwbench calibrate)" if len(floor)
            else "noise floor: not measured for this configuration; `fwbench calibrate` with the same options measures it"
        )
    # Runners on one host mostly share why energy is missing (no RAPL domain readable): said once for all.
    statuses = ran[ran["energy_status"].fillna("") != ""].groupby("energy_status", sort=False)["runner"]
    for status, runners_with_it in statuses:
        out_console.print(f"energy ({', '.join(runners_with_it)}): {status}")


@app.command()
def compare(
    model: ModelOption = "resnet18",
    mode: Annotated[ModeChoice, typer.Option(help="train or infer")] = ModeChoice.train,
    batch_size: BatchSizeOption = 32,
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
    strategy: StrategyOption = [],
    devices: DevicesOption = None,
    cudnn_autotune: Annotated[SwitchChoice, typer.Option(help="cuDNN autotuning, the same on every runner")] = SwitchChoice.off,
    intra_op_threads: Annotated[int, typer.Option(min=1, max=plan.MAX_THREADS, help="threads within an op, every runner (default: all cores)")] = os.cpu_count() or 1,
    inter_op_threads: Annotated[int, typer.Option(min=1, max=plan.MAX_THREADS, help="ops at once, every runner (default: all cores)")] = os.cpu_count() or 1,
    warmup: WarmupOption = plan.DEFAULT_WARMUP,
    warmup_until_cv: WarmupUntilCvOption = plan.DEFAULT_WARMUP_UNTIL_CV,
    stable_window: Annotated[int, typer.Option(min=2, max=plan.MAX_WARMUP, help="steps in the warm-up stability window")] = plan.STABLE_WINDOW,
    steps: StepsOption = plan.DEFAULT_STEPS,
    min_measure_s: MinMeasureOption = plan.DEFAULT_MIN_MEASURE_S,
    power_rate_hz: Annotated[float, typer.Option(callback=parse_power_rate, help="power telemetry samples per second (1-100; 0: off)")] = 20.0,
    idle_baseline_s: Annotated[float, typer.Option(min=0.0, max=plan.MAX_IDLE_BASELINE_S, help="idle power measured before each run")] = 1.0,
    seed: Annotated[int, typer.Option(min=0, max=plan.MAX_SEED, help="random seed for weights and inputs, the same on every runner")] = 0,
    repetitions: RepetitionsOption = stats.DEFAULT_REPETITIONS,
    cooldown_s: Annotated[float, typer.Option(min=0.0, max=plan.MAX_COOLDOWN_S, help="seconds to wait between runs")] = 0.0,
    min_effect: Annotated[float, typer.Option(min=0.0, max=1.0, help="smallest difference a verdict calls real, as a fraction")] = stats.MIN_EFFECT,
    runner: RunnerOption = [],
    rendezvous_port: RendezvousPortOption = None,
    distributed_timeout_s: DistributedTimeoutOption = None,
    tls_ca: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    token_file: TokenFileOption = None,
    frameworks: FrameworksOption = every_framework(),
    venvs: Annotated[Path, typer.Option(help="folder holding the embedded runners' environments (default: $FWBENCH_VENVS or .venvs)")] = None,
    out: Annotated[Path, typer.Option(help="folder to write results into; each comparison gets a subfolder")] = Path("results"),
    store: Annotated[Optional[Path], typer.Option(help="the results store: every run is kept, and noise floors are read from it (default: OUT/store)")] = None,
) -> None:
    """Run one model at one batch size and shape on every runner, and compare them. With --devices, or a
    runner given several addresses (one job across machines), each runner runs data-parallel."""
    transport = runner_transport(runner, tls_ca, tls_cert, tls_key, token_file)
    if device and devices:
        raise typer.BadParameter("give one device with --device or several with --devices, not both", param_hint="--devices")
    store = store or out / "store"
    startup = StartupSettings(intra_op_threads, inter_op_threads, cudnn_autotune.value)
    spec = RunSpec(
        model, mode, batch_size, shape, precision, device, layout, warmup=warmup, steps=steps, seed=seed,
        model_options=option_pairs(option), startup=startup, warmup_until_cv=warmup_until_cv,
        stable_window=stable_window, min_measure_s=min_measure_s, power_rate_hz=power_rate_hz,
        idle_baseline_s=idle_baseline_s, devices=devices, distributed_timeout_s=distributed_timeout_s,
    )
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{safe_component(model)}-{mode.value}-b{batch_size}"
    out_dir = out / run_id
    results_store = store_mod.ResultStore(store)
    with ExitStack() as stack:
        endpoints, failures = runs.resolve_endpoints(runner, frameworks, venvs, out_dir / "logs", stack, startup)
        requests = {
            name: replace(spec, compilation=compilation_for(name, compilation), strategy=strategy_for(name, strategy)).to_request()
            for name in endpoints
        }
        results, run_failures = runs.run_comparison(
            endpoints, transport, requests, repetitions, cooldown_s, results_store, run_id, rendezvous_port
        )
        failures += run_failures
        frames = {
            "steps": results_mod.steps_frame(run_id, results),
            "summary": results_mod.summary_frame(run_id, results, failures),
            "power": results_mod.power_frame(run_id, results),
        }
        # While the runners are up: their count of each model's FLOPs, for the report's FLOP/s and MFU.
        model_facts.record_model_facts(endpoints, transport, results_store, frames["summary"])

    if results:
        rows = analysis.comparison_rows(frames["summary"], frames["steps"], results_store.load("calibration"), min_effect)
        frames["comparison"] = rows
        shape_shown = shape_text(results[0].config.input_shape)
        where = results[0].config.device.name
        if any(r.config.world_size > 1 for r in results):
            where += "; " + ", ".join(
                f"{r.runner}: {len(r.config.devices)} device(s) x {max(1, r.config.cluster.node_count)} runner(s)"
                for r in {r.runner: r for r in results}.values()
            )
        print_comparison(rows, f"{model} {mode.value}, batch {batch_size} per device, {shape_shown}, {precision.value}, {where}")
        scaling = scaling_of(rows, results_store)
        if not scaling.empty:
            frames["scaling"] = scaling
            report_mod.print_scaling(scaling)
    written = results_mod.write_results(out_dir, frames)
    if not frames["power"].empty:
        written += plots.power_timeline(frames["power"], out_dir)
    if results:
        written.append(results_mod.write_manifest(out_dir, run_id, results, requests))
    for r in results:
        for flag in r.summary.flags:
            err_console.print(f"[yellow]{r.runner} #{r.repetition + 1}: {flag}[/]")
    err_console.print(f"results: {', '.join(str(p) for p in written)}; every run also in {store}")
    report_failures(failures)


def scaling_of(rows: pd.DataFrame, results_store: store_mod.ResultStore) -> pd.DataFrame:
    """The scaling rows of these configurations over every run the store holds, where they ran at more than
    one world size (e.g. the user ran them on one device before); else empty."""
    scaling = analysis.scaling_rows(results_store.load("summary"))
    mine = rows[list(analysis.SCALING_COLUMNS)].drop_duplicates()
    scaling = scaling.merge(mine, on=list(analysis.SCALING_COLUMNS)) if not scaling.empty else scaling
    return scaling if analysis.has_scaling(scaling) else scaling.iloc[0:0]


@app.command()
def calibrate(
    model: ModelOption = "resnet18",
    mode: Annotated[ModeChoice, typer.Option(help="train or infer")] = ModeChoice.train,
    batch_size: BatchSizeOption = 32,
    shape: Annotated[Optional[str], typer.Option(callback=parse_shape, help="per-sample input shape; default: the model's")] = None,
    option: Annotated[list[str], typer.Option(callback=parse_options, help="model option NAME=VALUE; repeat for each")] = [],
    precision: Annotated[PrecisionChoice, typer.Option(help="numeric precision")] = PrecisionChoice.fp32,
    device: Annotated[Optional[str], typer.Option(callback=parse_device, help="cpu, gpu or gpu:N; default: the runner's first GPU, else its CPU")] = None,
    layout: Annotated[Optional[LayoutChoice], typer.Option(help="image models' memory layout; default channels_last")] = None,
    warmup: WarmupOption = plan.DEFAULT_WARMUP,
    warmup_until_cv: WarmupUntilCvOption = plan.DEFAULT_WARMUP_UNTIL_CV,
    steps: StepsOption = plan.DEFAULT_STEPS,
    min_measure_s: MinMeasureOption = plan.DEFAULT_MIN_MEASURE_S,
    repetitions: RepetitionsOption = stats.DEFAULT_REPETITIONS,
    runner: Annotated[
        list[str], typer.Option(callback=parse_runners, help="NAME=HOST:PORT, each NAME twice: two instances of one runner. Default: start two of each embedded runner")
    ] = [],
    tls_ca: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    token_file: TokenFileOption = None,
    frameworks: FrameworksOption = every_framework(),
    venvs: Annotated[Optional[Path], typer.Option(help="folder holding the embedded runners' environments")] = None,
    store: StoreOption = Path("results/store"),
) -> None:
    """Measure the noise floor: each runner against a second instance of itself (A/A), for one configuration.
    The floor is the smallest difference this host resolves there; it is stored, and `compare` and `report`
    call no difference below it."""
    transport = runner_transport(runner, tls_ca, tls_cert, tls_key, token_file)
    pairs: dict[str, list[str]] = {}
    for value in runner:
        name, _, address = value.partition("=")
        if "," in address:
            raise typer.BadParameter(f"{value!r}: calibrate compares two single runners, not jobs across machines", param_hint="--runner")
        pairs.setdefault(name, []).append(address)
    uneven = sorted(name for name, addresses in pairs.items() if len(addresses) != 2)
    if uneven:
        raise typer.BadParameter(
            f"{', '.join(uneven)}: give each runner exactly twice, NAME=HOST:PORT of two instances", param_hint="--runner"
        )
    request = RunSpec(
        model, mode, batch_size, shape, precision, device, layout, warmup=warmup, steps=steps,
        model_options=option_pairs(option), warmup_until_cv=warmup_until_cv, min_measure_s=min_measure_s,
    ).to_request()
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-calibrate-{model}-{mode.value}-b{batch_size}"
    results_store = store_mod.ResultStore(store)
    table_rows = []
    failures: list[RunnerFailure] = []
    with ExitStack() as stack, TemporaryDirectory() as logs:
        if not pairs:
            first, failures = runs.start_embedded(frameworks.split(","), venvs or default_venvs(), Path(logs) / "a", stack)
            second, more = runs.start_embedded(frameworks.split(","), venvs or default_venvs(), Path(logs) / "b", stack)
            failures += more
            pairs = {name: [first[name], second[name]] for name in first if name in second}
        for name, addresses in pairs.items():
            calibration, run_failures = runs.calibrate_twins(name, addresses, transport, request, repetitions, results_store, run_id)
            failures += run_failures
            if calibration is None:
                continue
            c = calibration.comparison
            table_rows.append((
                name, str(calibration.row["runs"]), f"{c.ratio:.3f}",
                f"[{c.ci_low:.3f}, {c.ci_high:.3f}]" if c.enough_runs else "–", f"{calibration.run_spread:.1%}",
                f"{calibration.row['noise_floor']:.1%}" if c.enough_runs else "too few runs",
            ))
    columns = [Column("runner", key=True), *(Column(h, numeric=True) for h in ("runs", "A/A ratio", "99% interval", "run spread", "noise floor"))]
    print_table(columns, table_rows, f"noise floor: {model} {mode.value}, batch {batch_size}, {precision.value}")
    out_console.print(
        "A difference below a runner's noise floor is what two instances of that runner already show on this host: "
        f"`fwbench compare` and `fwbench report` with the store {store} call it no significant difference."
    )
    report_failures(failures)


@app.command()
def models(
    runner: RunnerOption = [],
    tls_ca: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    token_file: TokenFileOption = None,
    frameworks: FrameworksOption = every_framework(),
    venvs: VenvsOption = None,
    parameters: Annotated[bool, typer.Option(
        "--parameters", help="count each model's trainable parameters too (default shape and options): the runner "
        "builds every model on its CPU, tens of seconds",
    )] = False,
) -> None:
    """List every runner's models: task, default, minimum and maximum input shape, options; with --parameters,
    trainable parameters."""
    transport = runner_transport(runner, tls_ca, tls_cert, tls_key, token_file)
    columns = [
        Column("runner", key=True), Column("model", key=True), Column("task"), Column("input"), Column("default shape"),
        Column("min shape"), Column("max shape"), Column("options"),
        *([Column("parameters", numeric=True)] if parameters else []),
    ]
    rows = []

    def add_rows(name: str, address: str, client: RunnerClient) -> None:
        listed = client.list_models()
        counts = parameter_counts(name, client, [m.name for m in listed]) if parameters else {}
        for m in listed:
            rows.append((
                name, m.name, to_text(pb.Task, m.task), m.input_convention,
                shape_text(m.default_input_shape), shape_text(m.min_input_shape), shape_text(m.max_input_shape),
                " ".join(f"{o.name}={'|'.join(o.choices)}" for o in m.options),
                *([f"{counts[m.name]:,}"] if parameters else []),
            ))

    failures = runs.each_runner(runner, frameworks, venvs, transport, add_rows)
    print_table(columns, rows, "models")
    report_failures(failures)


def parameter_counts(name: str, client: RunnerClient, models: list[str]) -> dict[str, int]:
    """Each model's trainable parameters as the runner's InspectModel counts them, one model at a time."""
    counts = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=err_console, transient=True) as progress:
        task = progress.add_task(f"{name}: counting parameters", total=len(models))
        for model in models:
            progress.update(task, description=f"{name}: building {model}")
            counts[model] = client.inspect(model).parameter_count
            progress.advance(task)
    return counts


@app.command()
def describe(
    runner: RunnerOption = [],
    tls_ca: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    token_file: TokenFileOption = None,
    frameworks: FrameworksOption = every_framework(),
    venvs: VenvsOption = None,
) -> None:
    """Show each runner's framework, versions, devices and precisions."""
    transport = runner_transport(runner, tls_ca, tls_cert, tls_key, token_file)
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

    failures = runs.each_runner(runner, frameworks, venvs, transport, show)
    print_table(columns, rows, "runners")
    report_failures(failures)


def report_failures(failures: list[RunnerFailure]) -> None:
    for failure in failures:
        # The message may repeat what the user typed: printed as text, never read as console markup.
        err_console.print(f"[bold red]runner {failure.runner} failed[/]: {failure.code}: {escape(failure.message)}")
    if failures:
        raise typer.Exit(1)


@app.command()
def parity(
    models: Annotated[Optional[str], typer.Option(callback=parse_text, help="comma-separated model names; default: every model both runners list")] = None,
    runner: RunnerOption = [],
    tls_ca: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    token_file: TokenFileOption = None,
    venvs: VenvsOption = None,
    frameworks: FrameworksOption = every_framework(),
    out: Annotated[Path, typer.Option(help="folder for parity.csv")] = Path("results"),
) -> None:
    """Show that the runners build the same networks as the first one, the reference (torch by default, against
    TensorFlow; --frameworks torch,tensorflow,jax adds JAX): parameters, FLOPs, output shapes, and, where a
    runner can load the reference's weights, the same output for the same input. The weights pass through the
    runners' reference folder: the runners started here share a temporary one; runners given with --runner must
    be started with one shared --reference-dir."""
    transport = runner_transport(runner, tls_ca, tls_cert, tls_key, token_file)
    reference_name, *other_names = frameworks.split(",")
    if not other_names:
        raise typer.BadParameter(f"{frameworks!r}: give the reference and at least one runner to check against it",
                                 param_hint="--frameworks")
    names = [name for name in models.split(",") if name] if models else None
    run_dir = out / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-parity")
    failures: list[RunnerFailure] = []
    tables = []
    with ExitStack() as stack:
        # Entered before the runners start, so it is removed only after they stop.
        shared = StartupSettings(reference_dir=stack.enter_context(TemporaryDirectory(prefix="fwbench-references-")))
        endpoints, failures = runs.resolve_endpoints(runner, frameworks, venvs, run_dir / "logs", stack, shared)
        if reference_name in endpoints:
            reference = stack.enter_context(RunnerClient(reference_name, endpoints[reference_name], transport))
            known = [m.name for m in reference.list_models()]
            unknown = sorted(set(names or []) - set(known))
            if unknown:
                raise typer.BadParameter(f"unknown model(s) {unknown}; known models: {', '.join(known)}", param_hint="--models")
            for other_name in other_names:
                if other_name not in endpoints:
                    continue
                other = stack.enter_context(RunnerClient(other_name, endpoints[other_name], transport))
                with err_console.status(f"checking parity with {other_name}") as status:
                    try:
                        table = parity_mod.parity_table(
                            reference, other, names, lambda v: status.update(f"checking {v.label} on {other_name}")
                        )
                    except RunnerFailure as failure:
                        failures.append(failure)
                        continue
                print_parity(table, reference_name, other_name)
                if table.attrs["only_reference"]:
                    err_console.print(f"{other_name} builds no {', '.join(table.attrs['only_reference'])}: not checked")
                tables.append(table.assign(other=other_name))
    if tables:
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / "parity.csv"
        table = pd.concat(tables, ignore_index=True)
        table.to_csv(path, index=False)
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
    model: ModelOption = "resnet18",
    mode: Annotated[ModeChoice, typer.Option(help="train or infer")] = ModeChoice.train,
    shape: Annotated[Optional[str], typer.Option(callback=parse_shape, help="per-sample input shape; default: the model's")] = None,
    option: Annotated[list[str], typer.Option(callback=parse_options, help="model option NAME=VALUE")] = [],
    precision: Annotated[PrecisionChoice, typer.Option(help="numeric precision")] = PrecisionChoice.fp32,
    device: Annotated[Optional[str], typer.Option(callback=parse_device, help="cpu, gpu or gpu:N")] = None,
    limit: Annotated[int, typer.Option(min=1, max=plan.MAX_BATCH_SIZE, help="largest batch to try (on a CPU, device memory is the host's)")] = 4096,
    runner: RunnerOption = [],
    tls_ca: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    token_file: TokenFileOption = None,
    frameworks: FrameworksOption = every_framework(),
    venvs: VenvsOption = None,
    store: Annotated[Path, typer.Option(help="the results store: each runner's search is kept there (frame max_batch)")] = Path("results/store"),
) -> None:
    """The largest batch each runner fits in device memory: doubling, then bisection on out-of-memory refusals.
    Each runner's result is stored, to line up with a sweep's runs of the same configuration."""
    transport = runner_transport(runner, tls_ca, tls_cert, tls_key, token_file)
    # One step answers "does it fit": no warm-up, no minimum window, no power.
    request = RunSpec(
        model, mode, 1, shape, precision, device, warmup=0, steps=1, model_options=option_pairs(option), power_rate_hz=0,
        min_measure_s=0.0,
    ).to_request()
    rows = []
    failures: list[RunnerFailure] = []
    results_store = store_mod.ResultStore(store)
    with ExitStack() as stack, TemporaryDirectory() as logs:
        endpoints, failures = runs.resolve_endpoints(runner, frameworks, venvs, Path(logs), stack)
        for name, address in endpoints.items():
            searched_at_unix_s = time.time()

            def fits(batch: int, name=name, address=address) -> bool:
                request.batch_size = batch
                try:
                    jobs.run_job(name, address, transport, request)
                except RunnerFailure as failure:
                    if failure.out_of_memory:
                        return False
                    raise  # a busy runner, or any other refusal, says nothing about the batch
                return True

            search = BatchSearch(fits, limit=limit)
            with err_console.status(f"{name}: searching"):
                try:
                    largest = search.largest()
                    # The configuration as a run's summary row names it (results.py), defaults resolved, so that
                    # the result lines up with runs of it: the runner's default device and shape, every option.
                    facts = runs.runner_facts(name, jobs.addresses_of(address)[0], transport)
                    where = facts.failure_columns(model, device, shape)
                    with RunnerClient(name, jobs.addresses_of(address)[0], transport) as client:
                        (listed,) = [m for m in client.list_models() if m.name == model]  # the search found it
                except RunnerFailure as failure:
                    failures.append(failure)
                    continue
            tried = ", ".join(f"{b}{'' if ok else ' (OOM)'}" for b, ok in sorted(search.tried.items()))
            rows.append((name, "none fits" if largest is None else str(largest), tried))
            defaults = {o.name: o.default for o in listed.options}
            searched = {
                "model": model,
                "model_options": ";".join(f"{k}={v}" for k, v in sorted({**defaults, **dict(option_pairs(option))}.items())),
                "mode": mode.value, "input_shape": where["input_shape"], "precision": precision.value,
                "device": where["device"], "runner": name,
            }
            row = {
                **searched, "framework": where["framework"], "framework_version": where["framework_version"],
                "largest_batch": -1 if largest is None else largest, "limit": limit, "capped": largest == limit,
                "batches_tried": tried, "searched_at_unix_s": searched_at_unix_s,
            }
            config = {"max_batch": searched_at_unix_s, **searched, "limit": limit}
            manifest = {"command": sys.argv, "runner_address": address, "runner_options": facts.options}
            results_store.append(store_mod.run_key(config), config, {"max_batch": pd.DataFrame([row])}, manifest)
    columns = [Column("runner", key=True), Column("largest batch"), Column("batches tried", wrap_at=BATCHES_TRIED_WIDTH)]
    print_table(columns, rows, f"largest batch: {model} {mode.value}, {precision.value}")
    if rows:
        err_console.print(f"stored in {store}")
    report_failures(failures)


@app.command()
def sweep(
    file: Annotated[Optional[Path], typer.Argument(help="a sweep file (YAML); or use the options below")] = None,
    models: Annotated[Optional[str], typer.Option(help="comma-separated models")] = None,
    modes: Annotated[Optional[str], typer.Option(help="comma-separated: train, infer")] = None,
    batch_sizes: Annotated[Optional[str], typer.Option(help="comma-separated, e.g. 1,2,4,8")] = None,
    shapes: Annotated[Optional[str], typer.Option(help="comma-separated shapes, e.g. 3x32x32,3x64x64")] = None,
    precisions: Annotated[Optional[str], typer.Option(help="comma-separated precisions")] = None,
    strategies: Annotated[Optional[str], typer.Option(help="comma-separated strategies, each for every runner (a sweep file can give them per runner, and lists of devices)")] = None,
    repetitions: Annotated[Optional[int], typer.Option(min=1, max=plan.MAX_REPETITIONS, help=f"runs per runner and point (default {stats.DEFAULT_REPETITIONS})")] = None,
    warmup: Annotated[Optional[int], typer.Option(min=0, max=plan.MAX_WARMUP, help=f"the most warm-up steps (default {plan.DEFAULT_WARMUP})")] = None,
    warmup_until_cv: Annotated[Optional[float], typer.Option(min=0.0, max=0.99, help=f"warm up until stable within this (default {plan.DEFAULT_WARMUP_UNTIL_CV}; 0: a fixed count)")] = None,
    steps: Annotated[Optional[int], typer.Option(min=1, max=plan.MAX_STEPS, help=f"measured steps, at least (default {plan.DEFAULT_STEPS})")] = None,
    min_measure_s: Annotated[Optional[float], typer.Option(min=0.0, max=plan.MAX_MEASURE_S, help=f"measured seconds per run, at least (default {plan.DEFAULT_MIN_MEASURE_S})")] = None,
    reuse_builds: Annotated[Optional[bool], typer.Option(
        "--reuse-builds/--no-reuse-builds",
        help="a runner's batch sizes of one repetition share one build, each run restarted from the seed (default: on)",
    )] = None,
    store: Annotated[Path, typer.Option(help="the results store (append-only; every completed run is kept)")] = Path("results/store"),
    resume: Annotated[bool, typer.Option(help="skip configurations already in the store")] = False,
    report: Annotated[bool, typer.Option(help="write the HTML report from the store when the sweep ends")] = True,
    latency_budget_ms: LatencyBudgetOption = None,
    runner: RunnerOption = [],
    tls_ca: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    token_file: TokenFileOption = None,
    venvs: VenvsOption = None,
) -> None:
    """Run a whole study, one run at a time, each stored the moment it completes; Ctrl-C or SIGTERM keeps every
    finished run."""
    transport = runner_transport(runner, tls_ca, tls_cert, tls_key, token_file)
    # A sweep without a file compares the runners given, as `compare` would (an opt-in one only where named).
    given = [value.split("=", 1)[0] for value in runners_in_use(runner, every_framework())]
    try:
        if file is not None:
            study = sweep_mod.load_sweep(file)
        elif models:
            study = sweep_mod.sweep_from_options(
                models, runners=given or None, batch_sizes=batch_sizes, shapes=shapes, modes=modes, precisions=precisions, strategies=strategies,
                repetitions=repetitions, warmup=warmup, steps=steps, warmup_until_cv=warmup_until_cv,
                min_measure_s=min_measure_s, reuse_builds=reuse_builds,
            )
        else:
            raise typer.BadParameter("give a sweep file or at least --models", param_hint="FILE / --models")
    except sweep_mod.SweepError as error:
        raise typer.BadParameter(str(error)) from None
    reachable = [value.split("=", 1)[0] for value in runners_in_use(runner, ",".join(study.runners))]
    unreachable = [name for name in study.runners if runner and name not in reachable]
    if unreachable:
        raise typer.BadParameter(f"the sweep's runner(s) {', '.join(unreachable)} have no address; give each as "
                                 f"NAME=HOST:PORT, or list only {', '.join(reachable)} in its runners", param_hint="--runner")
    spanning = sorted({c.nodes for c in study.configurations() if c.nodes > 1})
    if spanning:
        raise typer.BadParameter(
            f"nodes: {spanning} spreads a run over several machines: run the study on a Slurm allocation with "
            "`fwbench slurm`, or give a runner its machines as --runner NAME=HOST:PORT,HOST:PORT (every run of it "
            "then spans them) and leave nodes out", param_hint="nodes")
    results_store = store_mod.ResultStore(store)
    results_store.clean_partials()
    startup = StartupSettings()
    pending, done_before = runs.pending_runs(study.configurations(), results_store, startup)
    if done_before and not resume:
        _, c = done_before[0]
        raise typer.BadParameter(f"{store} already holds {c.runner} {c.model}; use --resume to skip what is done", param_hint="--store")
    err_console.print(f"{len(pending)} runs to do, {len(done_before)} already in {store}")
    failures: list[RunnerFailure] = []
    with ExitStack() as stack:
        names = ",".join(sorted({c.runner for _, c in pending}))
        endpoints, failures = (runs.resolve_endpoints(runner, names, venvs, store / "logs", stack, startup) if pending else ({}, []))
        run_failures, interrupted = runs.run_sweep(pending, endpoints, transport, startup, results_store, study.cooldown_s)
        failures += run_failures
        if interrupted is None and pending:
            # While the runners are up: their count of each model's FLOPs, for the report's FLOP/s and MFU.
            summary = results_store.load("summary")
            # The whole study's runs: those a killed sweep completed have no facts yet.
            ran = summary[summary["run_key"].isin({key for key, _ in pending + done_before})] if not summary.empty else summary
            model_facts.record_model_facts(endpoints, transport, results_store, ran)
    done = len(results_store.run_keys())
    if interrupted is not None:
        err_console.print(f"[bold yellow]interrupted[/]: the run in flight was cancelled; {done} runs are kept in {store}")
        raise typer.Exit(interrupted_status(interrupted))
    if report and done:
        show_store_report(results_store, store / "report", latency_budget_ms)
    for failure in failures:
        err_console.print(f"[red]{failure.runner}: {failure.code}: {escape(failure.message)}[/]")


@app.command("slurm")
def slurm_command(
    file: Annotated[Path, typer.Argument(help="the study: a sweep file (YAML)")],
    store: Annotated[Path, typer.Option(help="the results store, on the file system every node shares")] = Path("results/store"),
    nodes: Annotated[int, typer.Option(min=1, max=plan.MAX_NODES, help="nodes to allocate")] = 1,
    partition: Annotated[Optional[str], typer.Option(help="Slurm partition (default: the cluster's)")] = None,
    account: Annotated[Optional[str], typer.Option(help="Slurm account to charge")] = None,
    time_limit: Annotated[Optional[str], typer.Option("--time", help="the job's time limit, as sbatch takes it: 30, 4:00:00, 1-12")] = None,
    gpus_per_node: Annotated[int, typer.Option(min=0, max=64, help="GPUs to allocate on each node (0: a CPU study)")] = 0,
    runner_per_gpu: Annotated[Optional[bool], typer.Option(
        "--runner-per-gpu/--runner-per-node",
        help="start each framework's runner once per GPU (each its own place for the study's runs) or once per node "
        "(all its GPUs). Default: per GPU, unless a run spans several devices or nodes",
    )] = None,
    exclusive: Annotated[bool, typer.Option("--exclusive/--shared-nodes", help="the nodes to this job alone (default), or shared with other jobs")] = True,
    sbatch_option: Annotated[list[str], typer.Option(help="a further sbatch option, e.g. --sbatch-option=--qos=long; repeat for each")] = [],
    resume: Annotated[bool, typer.Option(help="run only what the store does not hold yet")] = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="wait for the job to end, and exit with its status")] = False,
    rendezvous_port: Annotated[int, typer.Option(min=1, max=65535, help="first rendezvous port of a run across nodes (node i uses PORT + i)")] = jobs.DEFAULT_RENDEZVOUS_PORT,
    report: Annotated[bool, typer.Option(help="write the HTML report from the store when the study ends")] = True,
    latency_budget_ms: LatencyBudgetOption = None,
    venvs: VenvsOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="write the batch script and show it; submit nothing")] = False,
) -> None:
    """Run a study on a Slurm cluster: one job of NODES nodes, each node's runners started by srun, the study's
    runs spread over them, every run stored the moment it completes. A node that fails ends its run in flight
    (named, and left for --resume); the study goes on with the others."""
    try:
        study = sweep_mod.load_sweep(file)
    except sweep_mod.SweepError as error:
        raise typer.BadParameter(str(error)) from None
    configurations = study.configurations()
    widest = max(c.nodes for c in configurations)
    if widest > nodes:
        raise typer.BadParameter(f"the study's nodes reach {widest}, but the job asks for {nodes}: give --nodes {widest} or more", param_hint="--nodes")
    venvs = (venvs or default_venvs()).absolute()
    for name in study.runners:
        try:
            embedded_command(name, venvs)
        except RunnerStartError as error:
            raise typer.BadParameter(f"{error}; the environments must be on the file system every node shares", param_hint="--venvs") from None
    store = store.absolute()
    results_store = store_mod.ResultStore(store)
    pending, done_before = runs.pending_runs(configurations, results_store, StartupSettings())
    if done_before and not resume:
        _, c = done_before[0]
        raise typer.BadParameter(f"{store} already holds {c.runner} {c.model}; use --resume to skip what is done", param_hint="--store")
    if not pending:
        err_console.print(f"nothing to do: {store} holds all {len(done_before)} runs of the study")
        return
    # A runner per GPU sees one GPU, its gpu:0: runs across devices or nodes, or on a named GPU, need one per node.
    whole = any(c.devices or c.nodes > 1 or (c.device or "gpu").split(":")[-1] not in ("gpu", "cpu", "0")
                for c in configurations)
    if runner_per_gpu and whole:
        raise typer.BadParameter("the study has runs across several devices or nodes, or on a named GPU: they need a "
                                 "runner that sees all of a node's GPUs; give --runner-per-node", param_hint="--runner-per-gpu")
    options = slurm_mod.SlurmOptions(nodes, partition, account, time_limit, gpus_per_node, exclusive, tuple(sbatch_option))
    submission = slurm_mod.Submission(
        store=str(store), frameworks=list(study.runners), venvs=str(venvs), slurm=asdict(options),
        runner_per_gpu=(gpus_per_node > 1 and not whole) if runner_per_gpu is None else runner_per_gpu,
        rendezvous_port=rendezvous_port, report=report, latency_budget_ms=latency_budget_ms,
    )
    if not dry_run:
        try:
            slurm_mod.command("sbatch")
        except slurm_mod.SlurmError as error:
            raise typer.BadParameter(str(error), param_hint="Slurm") from None
    folder = slurm_mod.prepare(file, store, options, submission)
    err_console.print(f"{len(pending)} runs to do, {len(done_before)} already in {store}; batch script: {folder / 'job.sh'}")
    if dry_run:
        out_console.print((folder / "job.sh").read_text(), markup=False, highlight=False)
        return
    try:
        job_id = slurm_mod.submit(folder)
    except slurm_mod.SlurmError as error:
        raise typer.BadParameter(str(error), param_hint="Slurm") from None
    if not wait:
        err_console.print(f"follow it with: squeue -j {job_id}; the report goes to {store / 'report'} when it ends")
        return
    status = slurm_mod.wait_for(folder, job_id)
    record = slurm_mod.record_of(folder, job_id)
    if record is not None:
        slurm_mod.print_record(json.loads(record.read_text()))
    if status:
        raise typer.Exit(status)


@app.command("slurm-job", hidden=True)
def slurm_job(folder: Annotated[Path, typer.Argument(help="the submission folder fwbench slurm wrote")]) -> None:
    """Inside the allocation (the batch script): the runners on every node, then the study."""
    raise typer.Exit(slurm_mod.run_job(folder))


@app.command("slurm-node", hidden=True)
def slurm_node(run_dir: Annotated[Path, typer.Argument(help="the job's folder")]) -> None:
    """On one node (an srun step): its runners, until the job ends."""
    raise typer.Exit(slurm_mod.serve_node(run_dir))


@app.command("report")
def report_command(
    store: Annotated[Path, typer.Option(help="the results store a sweep wrote")] = Path("results/store"),
    out: Annotated[Optional[Path], typer.Option(help="folder for report.html, tables and plots (default: STORE/report)")] = None,
    latency_budget_ms: LatencyBudgetOption = None,
) -> None:
    """Tables, plots, verdicts and the manifest from the store alone: no runner is needed."""
    results_store = store_mod.ResultStore(store)
    if not results_store.run_keys():
        raise typer.BadParameter(f"{store} holds no runs", param_hint="--store")
    show_store_report(results_store, out or store / "report", latency_budget_ms)


def show_store_report(results_store: store_mod.ResultStore, out: Path, latency_budget_ms: Optional[float]) -> None:
    """Write the store's report, then print its comparison table and findings and where the report is."""
    rows, path, study = report_mod.write_store_report(results_store, out, latency_budget_ms)
    report_mod.print_rows(rows)
    report_mod.print_findings(study.findings)
    err_console.print(f"report: {path}")
