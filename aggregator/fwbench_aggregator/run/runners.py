"""Which runners a command uses: those given as NAME=HOST:PORT, or the embedded ones, started here from their own
environments; and the facts about a runner a study needs beyond its results."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import NamedTuple

from ..base.frameworks import default_names as default_framework_names
from ..base.frameworks import names as framework_names
from ..base.progress import Progress
from ..base.vocabulary import DeviceKind, indexed_device, shape_dims, shape_text
from ..plan.spec import StartupSettings
from . import jobs
from .client import RunnerClient, RunnerFailure
from .connection import EMBEDDED, Transport, embedded_runner_env
from .launch import LocalRunner, RunnerStartError, default_venvs, embedded_command, ensure_environment

# Where the runners already run (compose.yaml sets it in the aggregator's container, naming every runner
# Compose can start; runners_in_use picks the ones a command compares).
RUNNERS_ENV = "FWBENCH_RUNNERS"


def runners_in_use(runner: Sequence[str], frameworks: str) -> list[str]:
    """The runners a command uses: every one named with --runner; of those $FWBENCH_RUNNERS lists, a runner
    of a framework not compared by default (jax) only where --frameworks names it, as if it were embedded,
    so that one list can name every runner Compose can start."""
    if list(runner) != os.environ.get(RUNNERS_ENV, "").split():
        return list(runner)
    opt_in = set(framework_names()) - set(default_framework_names())
    wanted = set(frameworks.split(","))
    return [value for value in runner if value.split("=", 1)[0] not in opt_in - wanted]


def start_embedded(
    frameworks: list[str],
    venvs: Path,
    log_dir: Path,
    stack: ExitStack,
    settings: StartupSettings = StartupSettings(),
    progress: Progress = Progress(),
) -> tuple[dict, list]:
    """Start each framework's runner locally, all at once, requiring EMBEDDED's token; returns their addresses
    and the failures. A framework named for the first time gets its environment first."""
    log_dir.mkdir(parents=True, exist_ok=True)
    failures: list[RunnerFailure] = []
    runners: dict[str, LocalRunner] = {}
    for name in frameworks:
        try:
            ensure_environment(name, venvs, progress)
            runners[name] = LocalRunner(
                name,
                embedded_command(name, venvs, settings),
                log_dir / f"{name}-runner.log",
                env=embedded_runner_env(),
                transport=EMBEDDED,
            )
        except RunnerStartError as error:
            failures.append(RunnerFailure(name, "UNAVAILABLE", str(error)))
    addresses: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(runners))) as pool:
        started = {name: pool.submit(runner.start) for name, runner in runners.items()}
        stack.callback(stop_all, list(runners.values()))
        for name, future in started.items():
            try:
                addresses[name] = future.result()
            except RunnerStartError as error:
                failures.append(RunnerFailure(name, "UNAVAILABLE", str(error)))
    return addresses, failures


def stop_all(runners: Sequence[LocalRunner]) -> None:
    """Stop the runners at once: each takes a while to exit (TensorFlow's longest), and none waits for another."""
    with ThreadPoolExecutor(max_workers=max(1, len(runners))) as pool:
        for stopping in [pool.submit(runner.stop) for runner in runners]:
            stopping.result()


def resolve_endpoints(
    runner: Sequence[str],
    frameworks: str,
    venvs: Path | None,
    log_dir: Path,
    stack: ExitStack,
    settings: StartupSettings = StartupSettings(),
    progress: Progress = Progress(),
) -> tuple[dict[str, str], list[RunnerFailure]]:
    """The runners given as NAME=HOST:PORT (those in use: runners_in_use), or else the embedded ones,
    started now."""
    if runner:
        return dict(value.split("=", 1) for value in runners_in_use(runner, frameworks)), []
    progress.note(f"starting the embedded runners: {frameworks.replace(',', ', ')}")
    return start_embedded(frameworks.split(","), venvs or default_venvs(), log_dir, stack, settings, progress)


def each_runner(
    endpoints: dict[str, str],
    transport: Transport,
    visit: Callable[[str, str, RunnerClient], None],
) -> list[RunnerFailure]:
    """Call `visit(name, address, client)` for every runner (every node of a job across runners); returns the
    runners that failed."""
    failures = []
    for name, address in ((n, a) for n, job in endpoints.items() for a in jobs.addresses_of(job)):
        try:
            with RunnerClient(name, address, transport) as client:
                visit(name, address, client)
        except RunnerFailure as failure:
            failures.append(failure)
    return failures


class RunnerFacts(NamedTuple):
    """What a study needs to know of a runner beyond its results."""

    default_device: str
    failure_columns: Callable[[str, str | None, str | None], dict]  # (model, device, shape) of a failed run
    options: dict[str, str]  # its Describe options: which machine, which GPUs


def runner_facts(name: str, address: str, transport: Transport) -> RunnerFacts:
    """The runner's default device; for a failed run, the runner, framework, device and shape a
    successful one would have reported; and its Describe options."""
    with RunnerClient(name, address, transport) as client:
        info = client.describe()
    gpus = [d for d in info.devices if d.kind == DeviceKind.gpu]
    default_device = f"gpu:{gpus[0].index}" if gpus else "cpu:0"

    @functools.cache
    def default_shapes() -> dict[str, str]:
        # Asked only once a run has failed.
        with RunnerClient(name, address, transport) as client:
            return {m.name: shape_text(m.default_input_shape) for m in client.list_models()}

    def columns(model: str, device: str | None, shape: str | None) -> dict:
        return {
            "runner": name,
            "framework": info.framework,
            "framework_version": info.framework_version,
            "device": indexed_device(device or default_device),
            "input_shape": shape_text(shape_dims(shape)) if shape else default_shapes().get(model, ""),
        }

    return RunnerFacts(default_device, columns, dict(info.options))
