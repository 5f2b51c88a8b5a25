"""A study's version matrix: the sweep file's `versions` field, several versions of a framework side by side.

    versions:
      torch: [2.13.0-cuda12.6-cudnn9-runtime, 2.14.0-cuda12.6-cudnn9-runtime]   # image tags of TORCH_BASE_IMAGE
      tensorflow: [2.20.0-gpu, 2.21.0-gpu]
      embedded: false        # true: the tags are versions, each runner started from .venvs/FRAMEWORK@VERSION

Each tag becomes one runner, labelled FRAMEWORK@VERSION from the tag's leading version
(2.14.0-cuda12.6-cudnn9-runtime -> torch@2.14.0), which names it everywhere a framework's name would: the study's
runners, --runner, the results. In containers, each version's runner is published on its own loopback port,
FIRST_PORT upwards in the order the file lists them (run.compose_versions writes the Compose override).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..base.frameworks import LABEL_SEPARATOR, frameworks
from ..base.suggest import did_you_mean
from .field_checks import Checker, Refused, SweepError, checked_list, is_int
from .yaml_limits import parse

# A runner's name: a plain name, or a label FRAMEWORK@VERSION.
_RUNNER_NAME = re.compile(r"[A-Za-z0-9_.-]+(@[A-Za-z0-9_.+-]+)?")
# A Docker image tag (the Docker reference grammar).
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
# A tag's leading version: 2.14.0 of 2.14.0-cuda12.6-cudnn9-runtime, 26.10 of 26.10-py3.
_LEADING_VERSION = re.compile(r"v?(\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?)")
FIRST_PORT = 50061  # above compose.ports.yaml's 50051-50053
EMBEDDED = "embedded"
RUNNER_NAME_FORMS = "letters, digits, '_', '.', '-'; or a label FRAMEWORK@VERSION, e.g. torch@2.14.0"


def is_runner_name(name: str) -> bool:
    return bool(_RUNNER_NAME.fullmatch(name))


def leading_version(tag: str) -> str | None:
    found = _LEADING_VERSION.match(tag)
    return found.group(1) if found else None


@dataclass(frozen=True)
class Version:
    """One version of a framework in the study: its image tag (or version, embedded), its label and its port."""

    framework: str
    tag: str
    label: str  # FRAMEWORK@VERSION
    port: int  # the loopback port its container is published on

    @property
    def service(self) -> str:
        """Its Compose service: torch-2.14.0 (a service name takes no '@')."""
        return self.label.replace(LABEL_SEPARATOR, "-")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def runner_value(self) -> str:
        """As --runner takes it: torch@2.14.0=127.0.0.1:50061."""
        return f"{self.label}={self.address}"


@dataclass(frozen=True)
class VersionMatrix:
    versions: tuple[Version, ...] = ()
    embedded: bool = False  # runners started from .venvs/FRAMEWORK@VERSION rather than containers

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(v.label for v in self.versions)

    def tag_of(self, label: str) -> str:
        return next((v.tag for v in self.versions if v.label == label), "")


def parse_versions(raw: object, checker: Checker, runners: tuple[str, ...] = ()) -> VersionMatrix:
    """The `versions` field, checked: every problem recorded on `checker` (a SweepError follows), a label clash among
    them (two tags, one label; a label another runner of the study is named) named with both tags."""
    if not isinstance(raw, Mapping) or not raw:
        checker.fail(
            ("versions",),
            f"{raw!r} is not a mapping of framework to image tags, e.g. versions: "
            "{torch: [2.13.0-cuda12.6-cudnn9-runtime, 2.14.0-cuda12.6-cudnn9-runtime]}",
        )
    known = list(frameworks())
    embedded = raw.get(EMBEDDED, False)
    if not isinstance(embedded, bool):
        checker.attempt(
            lambda: checker.fail(
                ("versions", EMBEDDED),
                f"{embedded!r} is not accepted; accepted: true (runners from .venvs/FRAMEWORK@VERSION) or false",
            )
        )
    versions: list[Version] = []
    given: dict[str, tuple[str, str]] = {}  # label -> (framework, tag)
    for framework in raw:
        if framework == EMBEDDED:
            continue
        if framework not in known:
            checker.attempt(
                lambda f=framework: checker.fail(
                    ("versions", f),
                    f"unknown framework {f!r}{did_you_mean(str(f), known)}; accepted: {', '.join(known)}",
                )
            )
            continue
        checked = checker.attempt(
            lambda f=framework: checked_list(
                raw,
                f,
                checker,
                _tag_check(checker),
                "[2.13.0-cuda12.6-cudnn9-runtime, 2.14.0-cuda12.6-cudnn9-runtime]",
                at=("versions",),
            )
        )
        for index, tag in enumerate(checked or ()):
            label = f"{framework}{LABEL_SEPARATOR}{leading_version(tag)}"
            path = ("versions", framework, index)
            if label in given:
                checker.attempt(
                    lambda p=path, t=tag, shown=label: checker.fail(
                        p,
                        (
                            f"{t!r} gives the label {shown}, as {given[shown][1]!r} does: two runners cannot share a label; keep one "
                            "of the two tags, or compare them in two studies"
                        ),
                    )
                )
            elif label in runners:
                checker.attempt(
                    lambda p=path, t=tag, shown=label: checker.fail(
                        p,
                        (
                            f"{t!r} gives the label {shown}, which the study's runners already name: drop {shown} from runners, or "
                            "this tag"
                        ),
                    )
                )
            else:
                given[label] = (framework, tag)
                versions.append(Version(framework, tag, label, FIRST_PORT + len(versions)))
    return VersionMatrix(tuple(versions), embedded is True)


def _tag_check(checker: Checker):
    def check(path: tuple, value: object) -> str:
        if isinstance(value, float) or is_int(value):
            checker.fail(path, f"{value!r} is a number to YAML (2.10 reads as 2.1): quote the tag, e.g. '{value}'")
        if not isinstance(value, str) or not _TAG.fullmatch(value):
            checker.fail(path, f"{value!r} is not an image tag; accepted: letters, digits, '_', '.', '-' (at most 128)")
        if leading_version(value) is None:
            checker.fail(
                path,
                f"{value!r} does not start with a version, which its label needs; accepted: tags such as "
                "2.14.0-cuda12.6-cudnn9-runtime or 2.21.0-gpu",
            )
        return value

    return check


def study_runners(raw: Mapping, checker: Checker, listed: tuple[str, ...] | None) -> tuple[str, ...]:
    """The study's runners with a `versions` field: those `runners` lists, then one per version."""
    before = len(checker.problems)
    matrix = parse_versions(raw["versions"], checker, tuple(listed or ()))
    if len(checker.problems) > before:
        raise Refused()
    return (*(listed or ()), *matrix.labels)


def load_versions(path: Path) -> VersionMatrix:
    """The version matrix of a sweep file that plan.study_file.load_sweep has accepted; none where it has no
    `versions` field."""
    _, raw = parse(Path(path))
    if not isinstance(raw, Mapping) or raw.get("versions") is None:
        return VersionMatrix()
    checker = Checker(lambda where: str(path))
    matrix = checker.attempt(lambda: parse_versions(raw["versions"], checker, tuple(raw.get("runners") or ())))
    if checker.problems:
        raise SweepError(checker.problems)
    return matrix
