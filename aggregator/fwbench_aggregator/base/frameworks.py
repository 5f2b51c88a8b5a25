"""The runner list: the frameworks this project ships, declared once in frameworks.toml beside this
module (package data, so that an installed aggregator, as in its image, has it too).

Launching, the command line's defaults, sweeps and the tests read it from here; setup_envs.sh and
scripts/generate_runner_files.py read the same file. $FWBENCH_EXTRA_FRAMEWORKS names further
declaration files in the same format (os.pathsep-separated), read after it: how a test registers the
fake runner as a framework of its own.
"""

from __future__ import annotations

import os
import sys
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
    environment: str  # the folder under .venvs holding its Python: the framework of that name's
    host_port: int | None = None
    image_check: tuple[str, ...] = ()
    image_env: tuple[tuple[str, str], ...] = ()  # environment variables its image sets
    compared_by_default: bool = True  # started and swept when the user names no frameworks

    @property
    def owns_environment(self) -> bool:
        """Whether its folder holds its environment's requirements: a runner that shares another framework's
        environment (a Keras runner, in that framework's) installs only its package there."""
        return self.environment == self.name

    @property
    def variable(self) -> str:
        """The prefix of its Compose variables: TORCH for TORCH_TAG and TORCH_RUNNER_PORT, KERAS_JAX for keras-jax's."""
        return self.name.upper().replace("-", "_")

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


def environments(runners: list[Framework]) -> dict[str, list[str]]:
    """The environments `runners` run in, each with the package folders it installs: its owner's first (the
    framework of its name, whose requirements and lock make it), then every other runner's that shares it."""
    declared = frameworks()
    found: dict[str, list[str]] = {}
    for runner in runners:
        owner = declared.get(runner.environment, runner)
        found.setdefault(runner.environment, [owner.folder]).extend(
            f.folder
            for f in declared.values()
            if f.environment == runner.environment and f is not owner and f.folder not in found[runner.environment]
        )
    return found


def names() -> list[str]:
    return list(frameworks())


def default_names() -> list[str]:
    """The frameworks a command starts, and a sweep compares, when the user names none: torch against
    TensorFlow, the comparison this product is for; a further framework is added by naming it."""
    return [name for name, framework in frameworks().items() if framework.compared_by_default]


def native_of(framework: str) -> str:
    """The framework a runner of `framework` runs on where it is not that framework used natively (a Keras runner:
    keras-torch runs on torch, in its environment), else "" (a native runner, or an undeclared framework)."""
    declared = frameworks().get(framework)
    return "" if declared is None or declared.owns_environment else declared.environment


# A runner label, FRAMEWORK@VERSION (torch@2.14.0), names one version of a framework where its name alone would be
# ambiguous: a study of several versions (plan.versions), an environment per version (.venvs/torch@2.14.0).
LABEL_SEPARATOR = "@"


def framework_of(runner: str) -> str:
    """The framework a runner name or label names: "torch@2.14.0" -> "torch"; a plain name is itself."""
    return runner.partition(LABEL_SEPARATOR)[0]


def shipped() -> list[Framework]:
    """The frameworks frameworks.toml declares, without any extra declaration file."""
    return _read(FRAMEWORKS_FILE)


def _main(arguments: list[str]) -> int:
    """For shell scripts (setup_envs.sh, lock.sh), which run before any environment exists: this module needs only
    the standard library.
      frameworks.py                          one line per shipped framework: NAME ENVIRONMENT FOLDER
      frameworks.py --environments           one line per environment: ENVIRONMENT OWNER_FOLDER [FOLDER ...]
      frameworks.py --environments --default those a comparison needs when the user names no framework
      frameworks.py --environments NAME ...  those the named frameworks need"""
    listed = shipped()
    if arguments[:1] != ["--environments"]:
        for framework in listed:
            print(framework.name, framework.environment, framework.folder)
        return 0
    wanted = arguments[1:]
    if wanted == ["--default"]:
        runners = [f for f in listed if f.compared_by_default]
    elif wanted:
        unknown = [name for name in wanted if name not in {f.name for f in listed}]
        if unknown:
            print(f"no framework named {' '.join(unknown)}; known: {' '.join(f.name for f in listed)}", file=sys.stderr)
            return 2
        runners = [f for f in listed if f.name in wanted]
    else:
        runners = listed
    for environment, folders in environments(runners).items():
        print(environment, *folders)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
