"""The runners a use case talks to: given as NAME=HOST:PORT or started here (embedded), their logs kept with the
results once something ran, and how they are reached."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from tempfile import TemporaryDirectory

from ..base.progress import Progress
from ..plan.spec import StartupSettings
from ..run.client import RunnerFailure
from ..run.connection import EMBEDDED, Transport
from ..run.runners import resolve_endpoints
from .errors import UsageError


@dataclass(frozen=True)
class RunnerChoice:
    """Which runners the user chose, and how to reach them."""

    given: tuple[str, ...] = ()  # NAME=HOST:PORT[,HOST:PORT...]; empty: start the embedded ones
    frameworks: str = ""  # the embedded runners to start, comma-separated
    venvs: Path | None = None
    transport: Transport = EMBEDDED
    models_dirs: tuple[str, ...] = ()  # plug-in folders for the embedded runners
    run_isolation: str = ""  # the embedded runners' --run-isolation; "": each runner's own

    @property
    def embedded(self) -> bool:
        return not self.given

    def startup(self, settings: StartupSettings) -> StartupSettings:
        """`settings` for the embedded runners, with the plug-in folders and run isolation the user chose; a
        UsageError where the user chose either (--models-dir, a sweep file's models_dir in `settings`,
        --run-isolation) for runners fwbench does not start."""
        if self.given and (self.models_dirs or settings.models_dirs):
            raise UsageError(
                "applies to the runners fwbench starts; a runner given with --runner loads model plug-ins from its own "
                "configuration only: start it with --models-dir or $FWBENCH_MODELS_DIR",
                hint="--models-dir" if self.models_dirs else "models_dir",
            )
        if self.given and self.run_isolation:
            raise UsageError(
                "applies to the runners fwbench starts; a runner given with --runner runs as it was "
                "started: start it with --run-isolation",
                hint="--run-isolation",
            )
        return replace(
            settings,
            models_dirs=(*settings.models_dirs, *self.models_dirs),
            run_isolation=self.run_isolation or settings.run_isolation,
        )


@dataclass
class Runners:
    """The runners in use: their addresses, those that could not be started or reached, and their logs."""

    endpoints: dict[str, str]
    failures: list[RunnerFailure]
    transport: Transport
    log_dir: Path | None = None
    kept_logs: list[Path] = field(default_factory=list)

    def keep_logs(self, folder: Path) -> None:
        """Copy the embedded runners' logs into `folder` (a results folder, once something ran there)."""
        if self.log_dir is None or not self.log_dir.is_dir():
            return
        folder.mkdir(parents=True, exist_ok=True)
        for log in sorted(self.log_dir.glob("*.log")):
            shutil.copy2(log, folder / log.name)
            self.kept_logs.append(folder / log.name)


@contextmanager
def runners_for(
    choice: RunnerChoice,
    progress: Progress = Progress(),
    settings: StartupSettings = StartupSettings(),
    log_dir: Path | None = None,
) -> Iterator[Runners]:
    """The chosen runners, started where embedded (their logs in `log_dir`, else a temporary folder), stopped when
    the block ends."""
    with ExitStack() as stack:
        logs = log_dir or Path(stack.enter_context(TemporaryDirectory(prefix="fwbench-logs-")))
        endpoints, failures = resolve_endpoints(
            list(choice.given), choice.frameworks, choice.venvs, logs, stack, choice.startup(settings), progress
        )
        yield Runners(endpoints, failures, choice.transport, logs if choice.embedded else None)


def names_of(given: Sequence[str]) -> list[str]:
    """The runner names of NAME=HOST:PORT values."""
    return [value.split("=", 1)[0] for value in given]
