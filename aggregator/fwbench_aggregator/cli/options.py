"""The command line's own vocabulary: callbacks that refuse a malformed option before any runner is started,
naming the accepted values, and the options several commands share."""

from __future__ import annotations

import enum
import os
import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import plan, stats
from .connection import EMBEDDED, TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV, TOKEN_FILE_ENV, Transport
from .frameworks import default_names as default_framework_names
from .frameworks import names as framework_names
from .vocabulary import DEVICE_FORMS, DEVICES_FORMS, SHAPE_FORMS, Compilation, Strategy, devices_problem, is_device, is_shape


def parse_text(value: Optional[str]) -> Optional[str]:
    """Text a request carries must be UTF-8; bytes that are not reach Python as lone surrogates."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise typer.BadParameter("is not UTF-8 text") from None
    return value


ModelOption = Annotated[str, typer.Option(callback=parse_text, help="model name, as `fwbench models` lists them")]


def _per_runner_parser(choices: type[enum.Enum]):
    """A callback for an option given as VALUE (every runner) or RUNNER=VALUE (one), repeatable."""

    def parse(values: list[str]) -> list[str]:
        for value in values:
            setting = value.partition("=")[2] if "=" in value else value
            if setting not in choices.__members__:
                raise typer.BadParameter(
                    f"{value!r}: give VALUE for every runner or RUNNER=VALUE for one; accepted values: {', '.join(choices.__members__)}"
                )
        return values

    return parse


def _for_runner(runner: str, values: list[str], choices: type[enum.Enum]):
    """The value asked for this runner: RUNNER=VALUE wins over a plain VALUE; None leaves its default."""
    chosen = None
    for value in values:
        name, sep, setting = value.partition("=")
        if not sep:
            chosen = chosen or value
        elif name == runner:
            return choices(setting)
    return chosen and choices(chosen)


parse_compilation = _per_runner_parser(Compilation)
parse_strategy = _per_runner_parser(Strategy)


def compilation_for(runner: str, values: list[str]) -> Optional[Compilation]:
    return _for_runner(runner, values, Compilation)


def strategy_for(runner: str, values: list[str]) -> Optional[Strategy]:
    return _for_runner(runner, values, Strategy)


StrategyOption = Annotated[
    list[str],
    typer.Option(
        callback=parse_strategy,
        help=f"{', '.join(Strategy.__members__)}, for every runner or as RUNNER=VALUE; default: single on one device, "
        "else each framework's data-parallel strategy (PyTorch ddp, TensorFlow mirrored; across runners ddp and "
        "multi_worker_mirrored)",
    ),
]


def parse_devices(value: Optional[str]) -> Optional[str]:
    problem = value is not None and devices_problem(value)
    if problem:
        raise typer.BadParameter(f"{value!r}: {problem}; accepted: {DEVICES_FORMS}")
    return value


DevicesOption = Annotated[
    Optional[str],
    typer.Option(
        callback=parse_devices,
        help="several devices of each runner for one run, e.g. gpu:0,gpu:1 or cpu:0,cpu:1 (instead of --device); "
        "--batch-size is per device, the job's global batch is it times the devices of every runner",
    ),
]
RendezvousPortOption = Annotated[
    Optional[int],
    typer.Option(
        min=1, max=65535,
        help="first port of a job across runners (--runner NAME=HOST1:PORT,HOST2:PORT): node i's rendezvous "
        "endpoint is HOST_i:PORT+i; default: free ports of this host when every host is loopback, else 29500",
    ),
]
LatencyBudgetOption = Annotated[
    Optional[float],
    typer.Option(
        min=0.001, max=3_600_000.0,
        help="a serving latency budget in ms: the report names, per runner and series, the largest batch whose step "
        "time stays under it (at 99% confidence over runs)",
    ),
]
DistributedTimeoutOption = Annotated[
    Optional[float],
    typer.Option(
        min=plan.MIN_DISTRIBUTED_TIMEOUT_S, max=plan.MAX_DISTRIBUTED_TIMEOUT_S,
        help="the longest a rank waits for the others (rendezvous, collectives) or stays silent before the run "
        "fails naming it; default: the runners' (120 s)",
    ),
]


def parse_shape(value: Optional[str]) -> Optional[str]:
    if value is not None and not is_shape(value):
        raise typer.BadParameter(f"{value!r} is not a shape: give {SHAPE_FORMS}")
    return value


def parse_options(values: list[str]) -> list[str]:
    for value in values:
        if not re.fullmatch(r"[a-z_]+=[A-Za-z0-9_]+", value):
            raise typer.BadParameter(f"{value!r} is not NAME=VALUE, e.g. head=mlm (`fwbench models` lists each model's options)")
    return values


def parse_device(value: Optional[str]) -> Optional[str]:
    if value is not None and not is_device(value):
        raise typer.BadParameter(f"{value!r} is not a device: accepted values are {DEVICE_FORMS}")
    return value


# Where the runners already run (compose.yaml sets it in the aggregator's container, naming every runner
# Compose can start; runners_in_use picks the ones a command compares).
RUNNERS_ENV = "FWBENCH_RUNNERS"


def parse_runners(values: list[str]) -> list[str]:
    for value in values:
        name, sep, addresses = value.partition("=")
        ports = [re.fullmatch(r"[^\s:,]+:(\d+)", address) for address in addresses.split(",")]
        if (
            not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name)
            or not all(port and 1 <= int(port[1]) <= 65535 for port in ports)
            or len(set(addresses.split(","))) < len(ports)
        ):
            raise typer.BadParameter(
                f"{value!r} is not NAME=HOST:PORT, e.g. torch=localhost:50051, or NAME=HOST:PORT,HOST:PORT,... for one "
                "job across machines, each address once, in node rank order (NAME: letters, digits, '_', '.', '-'; "
                "PORT: 1 to 65535)"
            )
    return values


def runners_in_use(runner: list[str], frameworks: str) -> list[str]:
    """The runners a command uses: every one named with --runner; of those $FWBENCH_RUNNERS lists, a runner
    of a framework not compared by default (jax) only where --frameworks names it, as if it were embedded,
    so that one list can name every runner Compose can start."""
    if runner != os.environ.get(RUNNERS_ENV, "").split():
        return runner
    opt_in = set(framework_names()) - set(default_framework_names())
    wanted = set(frameworks.split(","))
    return [value for value in runner if value.split("=", 1)[0] not in opt_in - wanted]


RunnerOption = Annotated[
    list[str],
    typer.Option(
        callback=parse_runners, envvar=RUNNERS_ENV,
        help=f"NAME=HOST:PORT of a running runner, or NAME=HOST:PORT,HOST:PORT,... for one job across machines (one runner per machine, node rank in this order); repeat for each (or ${RUNNERS_ENV}, space-separated). Default: start the embedded runners",
    ),
]


# How to reach the runners named with --runner (README, "A runner on a remote GPU host").
_READABLE_FILE = dict(exists=True, dir_okay=False, readable=True)
TlsCaOption = Annotated[Optional[Path], typer.Option(
    envvar=TLS_CA_ENV, **_READABLE_FILE, help="talk TLS to the --runner runners, trusting this CA (PEM) to have signed their certificates",
)]
TlsCertOption = Annotated[Optional[Path], typer.Option(
    envvar=TLS_CERT_ENV, **_READABLE_FILE, help="this client's certificate chain (PEM), for runners that require one; with --tls-key",
)]
TlsKeyOption = Annotated[Optional[Path], typer.Option(envvar=TLS_KEY_ENV, **_READABLE_FILE, help="the private key (PEM) of --tls-cert")]
TokenFileOption = Annotated[Optional[Path], typer.Option(
    envvar=TOKEN_FILE_ENV, **_READABLE_FILE, help="a file holding the token the --runner runners require",
)]


def runner_transport(
    runner: list[str], tls_ca: Optional[Path], tls_cert: Optional[Path], tls_key: Optional[Path], token_file: Optional[Path]
) -> Transport:
    """How to reach the runners: those named with --runner as the options say, the embedded ones with the
    token they were started with."""
    if not runner:
        return EMBEDDED
    try:
        return Transport.from_files(tls_ca, tls_cert, tls_key, token_file)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None


def parse_frameworks(value: str) -> str:
    known = framework_names()
    unknown = [name for name in value.split(",") if name not in known]
    if unknown or not value:
        raise typer.BadParameter(f"unknown framework(s) {unknown}; accepted values: {', '.join(known)}")
    return value


def every_framework() -> str:
    """The embedded runners a command starts by default: every framework compared by default."""
    return ",".join(default_framework_names())


FrameworksOption = Annotated[str, typer.Option(
    callback=parse_frameworks,
    help=f"the runners to compare, comma-separated, of: {', '.join(framework_names())} (embedded ones started, or those ${RUNNERS_ENV} lists; --runner names its own)")]
VenvsOption = Annotated[Optional[Path], typer.Option(help="folder holding the embedded runners' environments (default: $FWBENCH_VENVS or .venvs)")]


def parse_power_rate(value: float) -> float:
    if not (value == 0 or plan.MIN_POWER_RATE_HZ <= value <= plan.MAX_POWER_RATE_HZ):
        raise typer.BadParameter(
            f"{value} is neither 0 (off) nor in the range {plan.MIN_POWER_RATE_HZ}<=x<={plan.MAX_POWER_RATE_HZ}."
        )
    return value


BatchSizeOption = Annotated[int, typer.Option(min=1, max=plan.MAX_BATCH_SIZE, help="samples per step on each device (the global batch of a distributed run is this times its devices)")]
WarmupOption = Annotated[
    int, typer.Option(min=0, max=plan.MAX_WARMUP, help="the most warm-up steps (a fixed count with --warmup-until-cv 0 or below --stable-window); excluded from the figures")
]
WarmupUntilCvOption = Annotated[
    float, typer.Option(min=0.0, max=0.99, help="warm up until the last --stable-window steps vary less than this; 0: exactly --warmup steps")
]
StepsOption = Annotated[int, typer.Option(min=1, max=plan.MAX_STEPS, help="measured steps (at least)")]
MinMeasureOption = Annotated[float, typer.Option(min=0.0, max=plan.MAX_MEASURE_S, help="measure for at least this many seconds per run")]
RepetitionsOption = Annotated[
    int, typer.Option(min=1, max=plan.MAX_REPETITIONS, help=f"runs per runner, in counterbalanced order A B B A ...; a verdict needs {stats.MIN_REPETITIONS}")
]
StoreOption = Annotated[Path, typer.Option(help="the results store: every run is kept, and noise floors are read from it")]
