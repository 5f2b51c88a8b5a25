"""A study's fields of what each runner executes: the models' shapes and options (per model), the layout, each
runner's compilation and strategies (for every runner, or per runner), and the plug-in folders."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from ..base.folders import models_dir_problem
from ..base.frameworks import default_names as default_framework_names
from ..base.suggest import did_you_mean
from ..base.vocabulary import (
    SHAPE_FORMS,
    Compilation,
    Layout,
    Strategy,
    is_shape,
)
from .field_checks import (
    Check,
    Checker,
    Refused,
    checked_list,
    choice,
    pattern,
)
from .study_fields import StudyFields

_OPTION_NAME = re.compile(r"[a-z_]+")
_OPTION_VALUE = re.compile(r"[A-Za-z0-9_]+")


def execution_fields(fields: StudyFields, base: Path) -> None:
    """What each runner executes: the models' shapes and options, the layout, each runner's compilation and
    strategies, the plug-in folders."""
    raw, checker = fields.raw, fields.checker
    fields.take("shapes", lambda: _shapes(fields))
    fields.take("options", lambda: _options(fields))
    if raw.get("layout") is not None:
        fields.take("layout", lambda: choice(Layout, "layout", checker)(("layout",), raw["layout"]))
    runners = fields.values["runners"] or tuple(default_framework_names())
    if raw.get("compilation") is not None:
        fields.take(
            "compilation",
            lambda: _per_runner(raw, "compilation", runners, checker, choice(Compilation, "compilation", checker)),
        )
    if raw.get("strategies") is not None:
        strategy_check = choice(Strategy, "strategy", checker)
        fields.take("strategies", lambda: _per_runner(raw, "strategies", runners, checker, strategy_check, listed=True))
    if raw.get("models_dir") is not None:
        fields.values["models_dirs"] = _models_dirs(raw, base, checker)


def _per_model(fields: StudyFields, name: str, example: str) -> Mapping:
    """A field given per model: a mapping naming only the sweep's models."""
    given_values, models = fields.raw[name], fields.values["models"] or ()
    if not isinstance(given_values, Mapping):
        fields.checker.fail((name,), f"{given_values!r} is not a mapping of model to values, e.g. {name}: {example}")
    for model in given_values:
        if model not in models:
            fields.checker.attempt(
                lambda model=model: fields.checker.fail(
                    (name, model),
                    f"{model!r} is not one of this sweep's models{did_you_mean(str(model), models)}; "
                    f"accepted: {', '.join(models)}",
                )
            )
    return given_values


def _shapes(fields: StudyFields) -> dict | None:
    raw, checker, models = fields.raw, fields.checker, fields.values["models"] or ()
    if "shapes" not in raw:
        return None
    shape_check = pattern(is_shape, "shape", SHAPE_FORMS, checker)
    if isinstance(raw["shapes"], Mapping):
        by_model = _per_model(fields, "shapes", "{resnet18: [3x32x32]}")
        checked = {
            model: checker.attempt(
                lambda model=model: checked_list(by_model, model, checker, shape_check, "[3x32x32]", at=("shapes",))
            )
            for model in by_model
        }
        if any(value is None for value in checked.values()):
            raise Refused()
        return checked
    everywhere = checked_list(raw, "shapes", checker, shape_check, "[3x32x32, seq=128] or {resnet18: [3x32x32]}")
    return {model: everywhere for model in models}


def _options(fields: StudyFields) -> dict | None:
    raw, checker = fields.raw, fields.checker
    if "options" not in raw:
        return None
    out: dict[str, dict[str, str]] = {}
    before = len(checker.problems)
    for model, given_options in _per_model(fields, "options", "{bert_tiny: {head: mlm}}").items():
        if not isinstance(given_options, Mapping):
            checker.attempt(
                lambda model=model, given_options=given_options: checker.fail(
                    ("options", model), f"{given_options!r} is not a mapping of option to value, e.g. {{head: mlm}}"
                )
            )
            continue
        out[model] = {}
        for option, value in given_options.items():
            checked = checker.attempt(
                lambda model=model, option=option, value=value: _option(model, option, value, checker)
            )
            if checked is not None:
                out[model][option] = checked
    if len(checker.problems) > before:
        raise Refused()
    return out


def _option(model: str, option: object, value: object, checker: Checker) -> str:
    path = ("options", model, option)
    if not isinstance(option, str) or not _OPTION_NAME.fullmatch(option):
        checker.fail(path, f"{option!r} is not an option name; accepted: lower-case letters and '_'")
    if isinstance(value, bool):
        checker.fail(
            path,
            f"{value!r} is not an option value: YAML reads on/off/yes/no/true/false as booleans; quote it, e.g. 'off'",
        )
    if not isinstance(value, (str, int)) or not _OPTION_VALUE.fullmatch(str(value)):
        checker.fail(path, f"{value!r} is not an option value; accepted: letters, digits and '_'")
    return str(value)


def _per_runner(
    raw: Mapping, name: str, runners: tuple[str, ...], checker: Checker, check: Check, listed: bool = False
) -> dict:
    """A setting for every runner (one value or list), or per runner as a mapping naming only the sweep's runners."""
    given = raw[name]
    example = "[ddp]" if listed else "eager"
    if not isinstance(given, Mapping):
        value = (
            checked_list(raw, name, checker, check, "[ddp, mirrored] or {torch: [dp, ddp]}")
            if listed
            else check((name,), given)
        )
        return {runner: value for runner in runners}
    out = {}
    before = len(checker.problems)
    for runner, value in given.items():
        if runner not in runners:
            checker.attempt(
                lambda runner=runner: checker.fail(
                    (name, runner),
                    f"{runner!r} is not one of this sweep's runners{did_you_mean(str(runner), runners)}; "
                    f"accepted: {', '.join(runners)}",
                )
            )
            continue
        out[runner] = checker.attempt(
            (lambda runner=runner: checked_list(given, runner, checker, check, example, at=(name,)))
            if listed
            else (lambda runner=runner, value=value: check((name, runner), value))
        )
    if len(checker.problems) > before:
        raise Refused()
    return out


def _models_dirs(raw: Mapping, base: Path, checker: Checker) -> tuple[str, ...]:
    """models_dir: a folder of model plug-ins, or a list of them, relative to the sweep file's folder."""
    value = raw["models_dir"]
    folders = value if isinstance(value, list) else [value]
    found = []
    for index, folder in enumerate(folders):
        path = ("models_dir", index) if isinstance(value, list) else ("models_dir",)
        if not isinstance(folder, str) or not folder:
            checker.attempt(
                lambda path=path, folder=folder: checker.fail(
                    path,
                    f"{folder!r} is not a folder; accepted: a path, or a list of paths, relative to the sweep file",
                )
            )
            continue
        problem = models_dir_problem(base / folder)  # the rule --models-dir follows
        if problem:
            checker.attempt(lambda path=path, problem=problem: checker.fail(path, problem))
            continue
        found.append(str((base / folder).resolve()))
    return tuple(found)
