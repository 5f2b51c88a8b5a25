"""The options of which runners a command uses and how it reaches them (docs/remote.md), each declared once as an
option type; cli.runner_options groups them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from ..base.folders import models_dir_problem
from ..base.frameworks import default_names as default_framework_names
from ..base.frameworks import framework_of
from ..base.frameworks import names as framework_names
from ..plan import spec as plan
from ..plan.versions import is_runner_name
from ..run.connection import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV, TOKEN_FILE_ENV
from ..run.runners import RUNNERS_ENV
from .option_parsing import checked_names, choices_metavar, parse_choice


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
        callback=parse_choice(plan.RunIsolation, "run isolation"),
        metavar=choices_metavar(plan.RunIsolation),
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
