"""The runners a command uses and how it reaches them: one option group (cli.groups) that every command starting or
reaching runners takes, and the runner choice it builds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import typer

from ..app.runners import RunnerChoice
from ..run.connection import EMBEDDED, Transport
from .runner_option_types import (
    FrameworksOption,
    ModelsDirOption,
    RunIsolationOption,
    RunnerOption,
    TlsCaOption,
    TlsCertOption,
    TlsKeyOption,
    TokenFileOption,
    VenvsOption,
    every_framework,
    parse_runner_addresses,
)


@dataclass(frozen=True)
class RunnerAccess:
    """--runner, --venvs, --models-dir, --run-isolation and how to reach the --runner runners (TLS, a token); the
    runners themselves are the command's to name (a sweep file names its own)."""

    runner: RunnerOption = field(default_factory=list)
    venvs: VenvsOption = None
    models_dir: ModelsDirOption = field(default_factory=list)
    run_isolation: RunIsolationOption = None
    tls_ca: TlsCaOption = None
    tls_cert: TlsCertOption = None
    tls_key: TlsKeyOption = None
    token_file: TokenFileOption = None

    def transport(self) -> Transport:
        """Those named with --runner as the options say; the embedded ones with the token they were started with."""
        if not self.runner:
            return EMBEDDED
        try:
            return Transport.from_files(self.tls_ca, self.tls_cert, self.tls_key, self.token_file)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None

    def choice(self, frameworks: str = "") -> RunnerChoice:
        return RunnerChoice(
            tuple(self.runner),
            frameworks,
            self.venvs,
            self.transport(),
            tuple(map(str, self.models_dir)),
            self.run_isolation.value if self.run_isolation else "",
        )


@dataclass(frozen=True)
class RunnerOptions(RunnerAccess):
    """RunnerAccess and --frameworks: the runners to use."""

    frameworks: FrameworksOption = field(default_factory=every_framework)

    def choice(self, frameworks: str = "") -> RunnerChoice:
        return super().choice(frameworks or self.frameworks)


@dataclass(frozen=True)
class CalibrationRunnerOptions(RunnerOptions):
    """calibrate's: each runner named twice with --runner, two instances of it."""

    runner: Annotated[
        list[str],
        typer.Option(
            callback=parse_runner_addresses,
            help="NAME=HOST:PORT, each NAME twice: two instances of one runner. Default: start two of each embedded runner",
        ),
    ] = field(default_factory=list)
