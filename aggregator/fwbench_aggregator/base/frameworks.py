"""The runner list: the frameworks this project ships, declared once in frameworks.toml beside this
module (package data, so that an installed aggregator, as in its image, has it too).

Launching, the command line's defaults, sweeps and the tests read it from here; setup_envs.sh and
scripts/generate_runner_files.py read the same file. $FWBENCH_EXTRA_FRAMEWORKS names further
declaration files in the same format (os.pathsep-separated), read after it: how a test registers the
fake runner as a framework of its own.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

FRAMEWORKS_FILE = Path(__file__).with_name("frameworks.toml")
EXTRA_ENV = "FWBENCH_EXTRA_FRAMEWORKS"


class FrameworkListError(ValueError):
    """A declaration file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class Framework:
    name: str
    module: str  # python -m MODULE serves the runner
    folder: str  # relative to the repository root
    environment: str  # the folder under .venvs holding its Python
    host_port: int | None = None
    image_check: tuple[str, ...] = ()
    image_env: tuple[tuple[str, str], ...] = ()  # environment variables its image sets
    compared_by_default: bool = True  # started and swept when the user names no frameworks

    @property
    def requirements(self) -> str:
        return f"{self.folder}/requirements.txt"


def _read(path: Path) -> list[Framework]:
    try:
        with open(path, "rb") as file:
            tables = tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise FrameworkListError(f"{path}: cannot be read: {error}") from None
    out = []
    for name, table in tables.items():
        try:
            out.append(
                Framework(
                    name,
                    table["module"],
                    table["folder"],
                    table.get("environment", name),
                    table.get("host_port"),
                    tuple(table.get("image_check", ())),
                    tuple((key, str(value)) for key, value in table.get("image_env", {}).items()),
                    _flag(table, "compared_by_default", path, name),
                )
            )
        except (KeyError, TypeError) as error:
            raise FrameworkListError(f"{path}: [{name}] lacks or misstates {error}; give module and folder") from None
    return out


def _flag(table: dict, key: str, path: Path, name: str) -> bool:
    value = table.get(key, True)
    if not isinstance(value, bool):
        raise FrameworkListError(f"{path}: [{name}] {key} = {value!r}; accepted values: true, false")
    return value


def frameworks() -> dict[str, Framework]:
    """Every declared framework by name, in declaration order; a name declared twice is refused."""
    extra = [Path(p) for p in os.environ.get(EXTRA_ENV, "").split(os.pathsep) if p]
    found: dict[str, Framework] = {}
    for path in (FRAMEWORKS_FILE, *extra):
        for framework in _read(path):
            if framework.name in found:
                raise FrameworkListError(f"{path}: [{framework.name}] is declared twice")
            found[framework.name] = framework
    return found


def names() -> list[str]:
    return list(frameworks())


def default_names() -> list[str]:
    """The frameworks a command starts, and a sweep compares, when the user names none: torch against
    TensorFlow, the comparison this product is for; a further framework is added by naming it."""
    return [name for name, framework in frameworks().items() if framework.compared_by_default]


# A runner label, FRAMEWORK@VERSION (torch@2.14.0), names one version of a framework where its name alone would be
# ambiguous: a study of several versions (plan.versions), an environment per version (.venvs/torch@2.14.0).
LABEL_SEPARATOR = "@"


def framework_of(runner: str) -> str:
    """The framework a runner name or label names: "torch@2.14.0" -> "torch"; a plain name is itself."""
    return runner.partition(LABEL_SEPARATOR)[0]


def shipped() -> list[Framework]:
    """The frameworks frameworks.toml declares, without any extra declaration file."""
    return _read(FRAMEWORKS_FILE)


if __name__ == "__main__":
    # For shell scripts (setup_envs.sh), which run before any environment exists: this module needs only the
    # standard library. One line per shipped framework: NAME ENVIRONMENT FOLDER; with --default, only those a
    # comparison starts when the user names none.
    import sys

    for framework in shipped():
        if framework.compared_by_default or "--default" not in sys.argv[1:]:
            print(framework.name, framework.environment, framework.folder)
