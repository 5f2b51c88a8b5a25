"""A study's fields checked into a Sweep's values, field by field (plan.study_file reads the file): the values'
holder, the grid's axes, and how each run is made and paced (the run settings, each from its declaration in
plan.settings)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from ..base.suggest import did_you_mean
from ..base.vocabulary import (
    DEVICE_FORMS,
    DEVICES_FORMS,
    Mode,
    Precision,
    Profile,
    devices_problem,
    is_device,
)
from .field_checks import (
    Check,
    Checker,
    Path_,
    checked_list,
    choice,
    integer_in,
    number,
    pattern,
)
from .settings import BY_NAME, SETTINGS, non_default
from .spec import MAX_BATCH_SIZE, MAX_COOLDOWN_S, MAX_NODES, MAX_RUNS
from .study import Sweep
from .versions import RUNNER_NAME_FORMS, is_runner_name, study_runners

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class StudyFields:
    """The checked values of one study's fields, by Sweep field name; a refused field's problem is recorded."""

    def __init__(self, raw: Mapping, checker: Checker) -> None:
        self.raw, self.checker = raw, checker
        self.values: dict[str, object] = {}

    def take(self, name: str, check: Callable[[], object]) -> None:
        self.values[name] = self.checker.attempt(check)

    def listed(self, name: str, check: Check, example: str) -> None:
        self.take(name, lambda: checked_list(self.raw, name, self.checker, check, example))


def _device(checker: Checker) -> Check:
    def check(path: Path_, value: object) -> str:
        if isinstance(value, str) and "," in value:
            problem = devices_problem(value)
            if problem:
                checker.fail(path, f"{value!r}: {problem}; accepted: {DEVICES_FORMS}")
            return value
        return pattern(is_device, "device", f"{DEVICE_FORMS}; or several: {DEVICES_FORMS}", checker)(path, value)

    return check


def grid_fields(fields: StudyFields, runner_names: Sequence[str] | None) -> None:
    """The grid's axes: models, runners (and a runner per version), modes, precisions, profiles, devices, batch sizes,
    nodes."""
    raw, checker = fields.raw, fields.checker
    fields.listed("models", pattern(_NAME.fullmatch, "name", "letters, digits, '_', '.', '-'", checker), "[resnet18]")
    accepted_runners = list(runner_names) if runner_names is not None else None

    def runner_check(path: Path_, value: object) -> str:
        name = pattern(is_runner_name, "runner name", RUNNER_NAME_FORMS, checker)(path, value)
        if accepted_runners is not None and name not in accepted_runners:
            checker.fail(
                path,
                f"unknown runner {name!r}{did_you_mean(name, accepted_runners)}; accepted: "
                f"{', '.join(accepted_runners)}",
            )
        return name

    fields.listed("runners", runner_check, "[torch, tensorflow]")
    if raw.get("versions") is not None:  # a runner per version (plan.versions), after those listed
        fields.take("runners", lambda: study_runners(raw, checker, fields.values["runners"]))
    fields.listed("modes", choice(Mode, "mode", checker), "[train, infer]")
    fields.listed("precisions", choice(Precision, "precision", checker), "[fp32, amp_bf16]")
    fields.listed("profiles", choice(Profile, "profile", checker), "[equal, native]")
    fields.listed("devices", _device(checker), '[cpu, "cpu:0,cpu:1"]')
    fields.listed("batch_sizes", integer_in(1, MAX_BATCH_SIZE, "a batch size", checker), "[16, 32]")
    fields.listed("nodes", integer_in(1, MAX_NODES, "a number of machines", checker), "[1, 2]")


def run_setting_fields(fields: StudyFields) -> None:
    """How each run is made and paced: the run settings (plan.settings; those a Sweep holds as fields of their own,
    the others as run_settings where given), the cooldown, the run limit and build reuse."""
    raw, checker = fields.raw, fields.checker
    for setting in SETTINGS:
        fields.take(setting.name, lambda setting=setting: setting.sweep_value(raw, checker))
    own = {
        name: fields.values.pop(name)
        for name in list(fields.values)
        if name in BY_NAME and name not in Sweep.__dataclass_fields__
    }
    fields.values.update(run_settings=tuple(non_default(own).items()) or None)
    fields.take("cooldown_s", lambda: number(raw, "cooldown_s", checker, 0, MAX_COOLDOWN_S, integer=False))
    fields.take("max_runs", lambda: number(raw, "max_runs", checker, 1, MAX_RUNS))

    def reuse_builds() -> bool | None:
        if "reuse_builds" in raw and not isinstance(raw["reuse_builds"], bool):
            checker.fail(("reuse_builds",), f"{raw['reuse_builds']!r} is not accepted; accepted: true or false")
        return raw.get("reuse_builds")

    fields.take("reuse_builds", reuse_builds)
