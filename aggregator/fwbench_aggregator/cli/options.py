"""The command line's options: each declared once, with callbacks that refuse a malformed value before any runner
is started, naming the accepted values and the closest one to a slip."""

from __future__ import annotations

import enum
import os
import re
from pathlib import Path
from typing import Annotated

import typer

from ..analyse import stats
from ..analyse.sequential import DEFAULT_MAX_BLOCKS, DEFAULT_MAX_RUNS
from ..base.folders import models_dir_problem
from ..base.frameworks import default_names as default_framework_names
from ..base.frameworks import framework_of
from ..base.frameworks import names as framework_names
from ..base.suggest import did_you_mean
from ..base.vocabulary import (
    DEVICE_FORMS,
    DEVICES_FORMS,
    SHAPE_FORMS,
    Compilation,
    Layout,
    Mode,
    Precision,
    Profile,
    Scenario,
    Strategy,
    Switch,
    devices_problem,
    is_device,
    is_shape,
)
from ..base.write_paths import write_path_problem
from ..plan import spec as plan
from ..plan.design import MAX_BLOCK_WINDOWS, Design
from ..plan.serving_fields import TARGET_QPS_RANGE, target_qps_ok
from ..plan.settings import SETTINGS, Setting
from ..plan.versions import is_runner_name
from ..run.connection import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV, TOKEN_FILE_ENV
from ..run.runners import RUNNERS_ENV
from ..store.location import store_path_problem


def parse_text(value: str | None) -> str | None:
    """Text a request carries must be UTF-8; bytes that are not reach Python as lone surrogates."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise typer.BadParameter("is not UTF-8 text") from None
    return value


def _choice(choices: type[enum.Enum], what: str):
    """A callback taking one of the enum's values, refusing anything else with the closest value and every one."""

    def parse(value: str | None):
        if value is None or isinstance(value, choices):
            return value
        if value not in choices.__members__:
            raise typer.BadParameter(
                f"{value!r} is not a {what}{did_you_mean(value, choices.__members__)}; accepted "
                f"values: {', '.join(choices.__members__)}"
            )
        return choices(value)

    return parse


def _metavar(choices: type[enum.Enum]) -> str:
    return "[" + "|".join(choices.__members__) + "]"


ModeOption = Annotated[str, typer.Option(callback=_choice(Mode, "mode"), metavar=_metavar(Mode), help="train or infer")]
PrecisionOption = Annotated[
    str,
    typer.Option(
        callback=_choice(Precision, "precision"),
        metavar=_metavar(Precision),
        help="numeric precision, the same on every runner",
    ),
]
LayoutOption = Annotated[
    str | None,
    typer.Option(
        callback=_choice(Layout, "layout"),
        metavar=_metavar(Layout),
        help="image models' memory layout; default channels_last",
    ),
]
CudnnAutotuneOption = Annotated[
    str,
    typer.Option(
        callback=_choice(Switch, "setting"), metavar=_metavar(Switch), help="cuDNN autotuning, the same on every runner"
    ),
]
ModelOption = Annotated[str, typer.Option(callback=parse_text, help="model name, as `fwbench models` lists them")]


def _per_runner_parser(choices: type[enum.Enum]):
    """A callback for an option given as VALUE (every runner) or RUNNER=VALUE (one), repeatable."""

    def parse(values: list[str]) -> list[str]:
        for value in values:
            setting = value.partition("=")[2] if "=" in value else value
            if setting not in choices.__members__:
                raise typer.BadParameter(
                    f"{value!r}: give VALUE for every runner or RUNNER=VALUE for one{did_you_mean(setting, choices.__members__)}; "
                    f"accepted values: {', '.join(choices.__members__)}"
                )
        return values

    return parse


CompilationOption = Annotated[
    list[str],
    typer.Option(
        callback=_per_runner_parser(Compilation),
        help=f"{', '.join(Compilation.__members__)}, for every runner or as RUNNER=VALUE; default: each framework's "
        "default (PyTorch eager, TensorFlow graph, JAX xla)",
    ),
]
StrategyOption = Annotated[
    list[str],
    typer.Option(
        callback=_per_runner_parser(Strategy),
        help=f"{', '.join(Strategy.__members__)}, for every runner or as RUNNER=VALUE; default: single on one device, "
        "else each framework's data-parallel strategy (PyTorch ddp, TensorFlow mirrored; across runners ddp and "
        "multi_worker_mirrored)",
    ),
]


def parse_devices(value: str | None) -> str | None:
    problem = value is not None and devices_problem(value)
    if problem:
        raise typer.BadParameter(f"{value!r}: {problem}; accepted: {DEVICES_FORMS}")
    return value


DevicesOption = Annotated[
    str | None,
    typer.Option(
        callback=parse_devices,
        help="several devices of each runner for one run, e.g. gpu:0,gpu:1 or cpu:0,cpu:1 (instead of --device); "
        "--batch-size is per device, the job's global batch is it times the devices of every runner",
    ),
]
RendezvousPortOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=65535,
        help="first port of a job across runners (--runner NAME=HOST1:PORT,HOST2:PORT): node i's rendezvous endpoint is "
        "HOST_i:PORT+i; default: free ports of this host when every host is loopback, else 29500",
    ),
]
LatencyBudgetOption = Annotated[
    float | None,
    typer.Option(
        min=0.001,
        max=3_600_000.0,
        help="a serving latency budget in ms, the longest a query may take: under a scenario, whether each runner's p99 "
        "stays under it (serve-capacity: the highest load whose chosen percentile does); for back-to-back batches, the "
        "largest batch whose step time does (at 99% confidence over runs)",
    ),
]
ScenarioOption = Annotated[
    str | None,
    typer.Option(
        callback=_choice(Scenario, "scenario"),
        metavar=_metavar(Scenario),
        help="serve inference queries under a load (MLPerf LoadGen's scenarios; docs/serving.md): single_stream (one query "
        "after another), server (Poisson arrivals at --target-qps), offline (every query at once); default: back-to-back "
        "batches",
    ),
]


def parse_target_qps(value: float | None) -> float | None:
    if value is not None and not target_qps_ok(value):
        raise typer.BadParameter(f"{value!r} is not accepted; accepted: {TARGET_QPS_RANGE} (queries per second)")
    return value


TargetQpsOption = Annotated[
    float | None,
    typer.Option(
        callback=parse_target_qps,
        help="--scenario server: the mean arrival rate, queries per second (Poisson, seeded: "
        "every runner sees the same arrivals)",
    ),
]
QueriesOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=plan.MAX_QUERIES,
        help="measured queries per run under a scenario; default: the runner's (single_stream "
        "and server: at least 300 and at least --min-measure-s; offline: 8 batches). p99 needs 299 queries",
    ),
]
BatchTimeoutOption = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        max=plan.MAX_BATCH_TIMEOUT_MS,
        help="--scenario server with --batch-size above 1: the longest the oldest "
        "query waits for a batch to fill (dynamic batching, the same rule on every runner)",
    ),
]
DistributedTimeoutOption = Annotated[
    float | None,
    typer.Option(
        min=plan.MIN_DISTRIBUTED_TIMEOUT_S,
        max=plan.MAX_DISTRIBUTED_TIMEOUT_S,
        help="the longest a rank waits for the others (rendezvous, collectives) or stays silent before the run fails "
        "naming it; default: the runners' (120 s)",
    ),
]


def parse_shape(value: str | None) -> str | None:
    if value is not None and not is_shape(value):
        raise typer.BadParameter(f"{value!r} is not a shape: give {SHAPE_FORMS}")
    return value


ShapeOption = Annotated[
    str | None,
    typer.Option(
        callback=parse_shape,
        help="per-sample input shape: 3x224x224, seq=128, audio=16000, 161x400; default: the model's",
    ),
]


def parse_options(values: list[str]) -> list[str]:
    for value in values:
        if not re.fullmatch(r"[a-z_]+=[A-Za-z0-9_]+", value):
            raise typer.BadParameter(
                f"{value!r} is not NAME=VALUE, e.g. head=mlm (`fwbench models` lists each model's options)"
            )
    return values


ModelOptionsOption = Annotated[
    list[str],
    typer.Option("--option", callback=parse_options, help="model option NAME=VALUE, e.g. head=mlm; repeat for each"),
]


def parse_device(value: str | None) -> str | None:
    if value is not None and not is_device(value):
        raise typer.BadParameter(f"{value!r} is not a device: accepted values are {DEVICE_FORMS}")
    return value


DeviceOption = Annotated[
    str | None,
    typer.Option(callback=parse_device, help="cpu, gpu or gpu:N; default: the runner's first GPU, else its CPU"),
]


def parse_runners(values: list[str]) -> list[str]:
    """NAME=HOST:PORT values, each name once (two runners under one name would be pooled as one)."""
    names = [value.partition("=")[0] for value in values]
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:
        raise typer.BadParameter(f"runner {twice!r} is given twice; give each runner (or FRAMEWORK@VERSION label) once")
    return parse_runner_addresses(values)


def parse_runner_addresses(values: list[str]) -> list[str]:
    """NAME=HOST:PORT values, a name possibly repeated (calibrate's two instances of one runner)."""
    for value in values:
        name, sep, addresses = value.partition("=")
        ports = [re.fullmatch(r"[^\s:,]+:(\d+)", address) for address in addresses.split(",")]
        if (
            not sep
            or not is_runner_name(name)
            or not all(port and 1 <= int(port[1]) <= 65535 for port in ports)
            or len(set(addresses.split(","))) < len(ports)
        ):
            raise typer.BadParameter(
                f"{value!r} is not NAME=HOST:PORT, e.g. torch=localhost:50051, or NAME=HOST:PORT,HOST:PORT,... for one "
                "job across machines, each address once, in node rank order (NAME: letters, digits, '_', '.', '-', or a "
                "label FRAMEWORK@VERSION such as torch@2.14.0; PORT: 1 to 65535)"
            )
    return values


RunnerOption = Annotated[
    list[str],
    typer.Option(
        callback=parse_runners,
        envvar=RUNNERS_ENV,
        help=f"NAME=HOST:PORT of a running runner, or NAME=HOST:PORT,HOST:PORT,... for one job across machines (one "
        f"runner per machine, node rank in this order); repeat for each (or ${RUNNERS_ENV}, space-separated). Default: "
        "start the embedded runners",
    ),
]

# How to reach the runners named with --runner (docs/remote.md).
_READABLE_FILE = dict(exists=True, dir_okay=False, readable=True)
TlsCaOption = Annotated[
    Path | None,
    typer.Option(
        envvar=TLS_CA_ENV,
        **_READABLE_FILE,
        help="talk TLS to the --runner runners, trusting this CA (PEM) to have signed their certificates",
    ),
]
TlsCertOption = Annotated[
    Path | None,
    typer.Option(
        envvar=TLS_CERT_ENV,
        **_READABLE_FILE,
        help="this client's certificate chain (PEM), for runners that require one; with --tls-key",
    ),
]
TlsKeyOption = Annotated[
    Path | None, typer.Option(envvar=TLS_KEY_ENV, **_READABLE_FILE, help="the private key (PEM) of --tls-cert")
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option(envvar=TOKEN_FILE_ENV, **_READABLE_FILE, help="a file holding the token the --runner runners require"),
]


def checked_names(value: str, known, what: str) -> str:
    """A comma-separated list of names, each one of `known`; refused naming the unknown ones, the closest known
    name to each, and every known one."""
    unknown = [name for name in value.split(",") if name not in known]
    if unknown or not value:
        hints = "".join(did_you_mean(name, known) for name in unknown)
        raise typer.BadParameter(
            f"unknown {what}(s) {', '.join(map(repr, unknown)) or repr(value)}{hints}; "
            f"accepted values: {', '.join(known)}"
        )
    return value


def parse_frameworks(value: str) -> str:
    """Declared frameworks, or labels FRAMEWORK@VERSION of them: a runner from .venvs/FRAMEWORK@VERSION."""
    labels = [
        n
        for n in value.split(",")
        if is_runner_name(n) and n != framework_of(n) and framework_of(n) in framework_names()
    ]
    return checked_names(value, [*framework_names(), *labels], "framework")


def every_framework() -> str:
    """The embedded runners a command starts by default: every framework compared by default."""
    return ",".join(default_framework_names())


FrameworksOption = Annotated[
    str,
    typer.Option(
        callback=parse_frameworks,
        help=f"the runners to compare, comma-separated, of: {', '.join(framework_names())} (embedded ones started, or "
        f"those ${RUNNERS_ENV} lists; --runner names its own)",
    ),
]
ProfileOption = Annotated[
    str,
    typer.Option(
        callback=_choice(Profile, "profile"),
        metavar=_metavar(Profile),
        help="how every setting you leave unset is chosen: equal (the same on every runner: images channels_last) or "
        "native (each framework's own out-of-the-box choice: PyTorch channels_first); docs/usage.md#profiles",
    ),
]


def parse_models_dirs(values: list[Path]) -> list[Path]:
    """Each a folder of model plug-ins, by the one rule a sweep file's models_dir follows too; resolved."""
    for value in values:
        problem = models_dir_problem(value)
        if problem:
            raise typer.BadParameter(problem)
    return [value.resolve() for value in values]


ModelsDirOption = Annotated[
    list[Path],
    typer.Option(
        "--models-dir",
        callback=parse_models_dirs,
        help="a folder of your own models (plug-ins: a folder per model with model.toml and build_<framework>.py; "
        "docs/your-model.md), loaded by the runners fwbench starts; repeatable. Runners you start yourself take "
        "their own --models-dir or $FWBENCH_MODELS_DIR",
    ),
]
AllowDifferentModelsOption = Annotated[
    bool,
    typer.Option(
        "--allow-different-models",
        help="compare a plug-in model whose runners build it with different parameter counts (not the same network)",
    ),
]
RunIsolationOption = Annotated[
    str | None,
    typer.Option(
        callback=_choice(plan.RunIsolation, "run isolation"),
        metavar=_metavar(plan.RunIsolation),
        help="where the runners fwbench starts execute each run: in their own process (thread), a fresh process per run "
        "(process: each run samples a process's own offset, so the verdict accounts for it; docs/verdict.md), a worker "
        "process for every 2 CPU runs (process-per-2-runs: the offsets sampled at half the starts), or fresh for GPU runs "
        "only. Default: each runner's own (thread for torch and JAX, process-on-gpu for TensorFlow)",
    ),
]
VenvsOption = Annotated[
    Path | None,
    typer.Option(help="folder holding the embedded runners' environments (default: $FWBENCH_VENVS or .venvs)"),
]


def parse_power_rate(value: float) -> float:
    if not (value == 0 or plan.MIN_POWER_RATE_HZ <= value <= plan.MAX_POWER_RATE_HZ):
        raise typer.BadParameter(
            f"{value} is neither 0 (off) nor in the range {plan.MIN_POWER_RATE_HZ}<=x<={plan.MAX_POWER_RATE_HZ}."
        )
    return value


PowerRateOption = Annotated[
    float, typer.Option(callback=parse_power_rate, help="power telemetry samples per second (1-100; 0: off)")
]
IdleBaselineOption = Annotated[
    float, typer.Option(min=0.0, max=plan.MAX_IDLE_BASELINE_S, help="idle power measured before each run")
]
ThreadsOption = Annotated[
    int, typer.Option(min=1, max=plan.MAX_THREADS, help="threads, every runner (default: all cores)")
]
BatchSizeOption = Annotated[
    int,
    typer.Option(
        min=1,
        max=plan.MAX_BATCH_SIZE,
        help="samples per step on each device (the global batch of a distributed run is this times its devices)",
    ),
]
RepetitionsOption = Annotated[
    int,
    typer.Option(
        min=1,
        max=plan.MAX_REPETITIONS,
        help=f"runs per runner, in counterbalanced order A B B A ...; a verdict needs {stats.MIN_REPETITIONS}",
    ),
]
AUTO = "auto"


def _auto_or_count(value: str | None) -> str | None:
    """'auto', or a whole number of runs within the limits."""
    if value is None or value == AUTO:
        return value
    if not value.isdigit() or not 1 <= int(value) <= plan.MAX_REPETITIONS:
        raise typer.BadParameter(
            f"{value!r}: accepted values: auto, or a number of runs from 1 to {plan.MAX_REPETITIONS}"
        )
    return value


AutoRepetitionsOption = Annotated[
    str,
    typer.Option(
        callback=_auto_or_count,
        metavar="auto|N",
        help="runs per runner, in counterbalanced rounds A B, B A, ... (or blocks, where the design is blocks): auto "
        "looks after each round (blocks: at half of --max-repetitions and at its end) and stops once the verdict is "
        "settled (a difference called, or equivalence within --min-effect), within --max-repetitions and "
        f"--time-budget-s; N runs exactly N (a verdict needs {stats.MIN_REPETITIONS})",
    ),
]
SweepRepetitionsOption = Annotated[
    str | None,
    typer.Option(
        callback=_auto_or_count,
        metavar="auto|N",
        help="runs per runner and point, in counterbalanced rounds: auto (default) looks after each round of a point and "
        "stops it once its verdict is settled, within --max-repetitions and --time-budget-s; N runs exactly N",
    ),
]
DesignOption = Annotated[
    str,
    typer.Option(
        callback=_choice(Design, "design"),
        metavar=_metavar(Design),
        help="how the evidence is made: blocks, each runner in a fresh worker process per block measuring short windows "
        "in turn on one warm build, judged block by block; rounds, whole runs one after another (each its own "
        "build); auto, blocks where the runs can be windows on the CPU and rounds elsewhere, saying which and why "
        "(docs/verdict.md)",
    ),
]
BlockWindowsOption = Annotated[
    int, typer.Option(min=1, max=MAX_BLOCK_WINDOWS, help="under --design blocks: windows per runner in each block")
]
WindowOption = Annotated[
    float,
    typer.Option(
        min=0.01, max=plan.MAX_MEASURE_S, help="under --design blocks: each window measures at least this many seconds"
    ),
]
MaxRepetitionsOption = Annotated[
    int | None,
    typer.Option(
        min=stats.MIN_REPETITIONS,
        max=plan.MAX_REPETITIONS,
        help=f"under --repetitions auto: the most runs per runner [default: {DEFAULT_MAX_RUNS} in rounds, "
        f"{DEFAULT_MAX_BLOCKS} blocks]",
    ),
]
TimeBudgetOption = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        max=plan.MAX_TIME_BUDGET_S,
        help="under --repetitions auto: stop starting rounds after this many seconds of the configuration's runs",
    ),
]
SearchRepetitionsOption = Annotated[
    int,
    typer.Option(
        min=1,
        max=plan.MAX_REPETITIONS,
        help="under --profile best: runs of each candidate setting in each runner's search (the same for every runner)",
    ),
]
CooldownOption = Annotated[float, typer.Option(min=0.0, max=plan.MAX_COOLDOWN_S, help="seconds to wait between runs")]
MinEffectOption = Annotated[
    float, typer.Option(min=0.0, max=1.0, help="smallest difference a verdict calls real, as a fraction")
]


def setting_option(setting: Setting):
    """A run setting's option, made from its one declaration (plan.settings): its type, range and help."""
    kind = setting.kind if setting.default is not None else setting.kind | None
    return Annotated[kind, typer.Option(min=setting.low, max=setting.high, help=setting.help)]


# Every run setting's option, by the setting's name: the option groups and commands take them from here.
SETTING_OPTIONS = {setting.name: setting_option(setting) for setting in SETTINGS}
# A serve-capacity probe warms up and measures under defaults of its own.
WarmupOption, MinMeasureOption = SETTING_OPTIONS["warmup"], SETTING_OPTIONS["min_measure_s"]


def parse_store(value: Path | None) -> Path | None:
    """A results store's path, refused before anything is written where no store can be there (store.location)."""
    problem = value is not None and store_path_problem(value)
    if problem:
        raise typer.BadParameter(problem)
    return value


def parse_out(value: Path | None) -> Path | None:
    """A folder --out names, refused before anything is written where fwbench writes no folder (base.write_paths)."""
    problem = value is not None and write_path_problem(value, "folder")
    if problem:
        raise typer.BadParameter(problem)
    return value


StoreOption = Annotated[
    Path,
    typer.Option(callback=parse_store, help="the results store: every run is kept, and noise floors are read from it"),
]
CPU_COUNT = os.cpu_count() or 1
