"""Fake runners a test starts for itself: each a process of the framework-free runner (fwbench_core.fake) from this
environment, named, with its step times, the framework and version it reports, and any flags or variables planted.

`started_fakes` starts some for a `with` block; conftest.py's `fakes` and `module_fakes` start them for a test or a
module, and its `fake_runner` and `fake_address` are the common single fakes. The session's shared fake is
runner_pool.py's."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fwbench_aggregator.run import launch
from fwbench_core.fake import (
    FRAMEWORK_ENV,
    FRAMEWORK_VERSION_ENV,
    RUN_SPREAD_ENV,
    SETTING_STEP_TIME_ENV,
    STEP_TIME_ENV,
)


@dataclass(frozen=True)
class Fake:
    """One fake runner to start; what is left None keeps the fake's own default (its environment's, else 2 ms steps,
    framework "fake" at "0.0")."""

    name: str = "fake"
    step_s: float | None = None  # every step's time
    step_s_by_setting: str | None = None  # "setting=value:seconds,...": a step's time where a run has that setting
    run_spread: float | None = None  # runs alternately this fraction longer and shorter, first longer
    framework: str | None = None  # the framework it reports
    version: str | None = None  # the framework version it reports
    flags: tuple[str, ...] = ()  # its command line's, after its address
    env: Mapping[str, str] = field(default_factory=dict)  # any other variable of its environment

    def environment(self) -> dict[str, str]:
        planted = {
            STEP_TIME_ENV: self.step_s,
            SETTING_STEP_TIME_ENV: self.step_s_by_setting,
            RUN_SPREAD_ENV: self.run_spread,
            FRAMEWORK_ENV: self.framework,
            FRAMEWORK_VERSION_ENV: self.version,
        }
        return {**{name: str(value) for name, value in planted.items() if value is not None}, **self.env}

    def runner(self, log_path: Path) -> launch.LocalRunner:
        """This fake as a runner process, not yet started; its stderr goes to `log_path`."""
        return launch.LocalRunner(
            self.name, [*launch.fake_runner_command(), *self.flags], log_path, env=self.environment()
        )


@dataclass(frozen=True)
class Fakes:
    """Fake runners started together, in the order given."""

    runners: tuple[launch.LocalRunner, ...]

    @property
    def addresses(self) -> dict[str, str]:
        """Each runner's address by its name (the names are each runner's own)."""
        addresses = {runner.name: runner.address for runner in self.runners}
        assert len(addresses) == len(self.runners), f"fakes of one name: {[r.name for r in self.runners]}"
        return addresses

    def runner_args(self) -> list[str]:
        """`--runner NAME=ADDRESS` for each, as the command line takes them."""
        return [arg for name, address in self.addresses.items() for arg in ("--runner", f"{name}={address}")]


@contextmanager
def started_fakes(log_dir: Path, *fakes: Fake) -> Iterator[Fakes]:
    """Start each of `fakes` in turn (each logs to log_dir/INDEX-NAME.log) and stop every one at the block's end,
    or as soon as one fails to start."""
    with ExitStack() as stack:
        runners = [fake.runner(log_dir / f"{index}-{fake.name}.log") for index, fake in enumerate(fakes)]
        for runner in runners:
            stack.enter_context(runner)
        yield Fakes(tuple(runners))


@contextmanager
def fake_starter(tmp_path_factory) -> Iterator:
    """A function that starts fakes (each call's logs in a folder of its own) until this block ends, which stops
    them all: conftest.py's `fakes` and `module_fakes`."""
    with ExitStack() as stack:
        yield lambda *fakes: stack.enter_context(started_fakes(tmp_path_factory.mktemp("fakes"), *fakes))
