"""Reading a study: a sweep file (YAML) or the command line's shorthands, checked field by field.

Every mistake is reported at once, in one SweepError: each problem names the file and line (or the command line),
the field, what was wrong and what is accepted, with the closest accepted value where a slip is likely.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Optional

import yaml

from ..base.folders import models_dir_problem
from ..base.frameworks import default_names as default_framework_names
from ..base.suggest import did_you_mean
from ..base.vocabulary import (
    DEVICE_FORMS, DEVICES_FORMS, SHAPE_FORMS, Compilation, Layout, Mode, Precision, Profile, Strategy, devices_problem,
    is_device, is_shape,
)
from .spec import (
    DEFAULT_MAX_RUNS, MAX_BATCH_SIZE, MAX_COOLDOWN_S, MAX_MEASURE_S, MAX_NODES, MAX_RUNS, MAX_STEPS,
    MAX_WARMUP,
)
from .field_checks import (
    Check, Checker, Path_, Problem, Refused, SweepError, checked_list, choice, field_name, finite, integer_in, number,
    pattern,
)
from .serving_fields import SWEEP_FIELDS as SERVING_FIELDS, sweep_loads, with_loads
from .study import Sweep, repetition_fields
from .versions import RUNNER_NAME_FORMS, is_runner_name, study_runners
from .yaml_limits import parse

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_OPTION_NAME = re.compile(r"[a-z_]+")
_OPTION_VALUE = re.compile(r"[A-Za-z0-9_]+")

FIELDS = (
    "runners", "models", "modes", "batch_sizes", "shapes", "precisions", "devices", "repetitions", "max_repetitions",
    "time_budget_s",
    "warmup", "warmup_until_cv", "steps", "min_measure_s", "options", "layout", "compilation", "cooldown_s",
    "strategies", "reuse_builds", "nodes", "models_dir", "profiles", "max_runs", "versions", *SERVING_FIELDS,
)


def _device(checker: Checker) -> Check:
    def check(path: Path_, value: object) -> str:
        if isinstance(value, str) and "," in value:
            problem = devices_problem(value)
            if problem:
                checker.fail(path, f"{value!r}: {problem}; accepted: {DEVICES_FORMS}")
            return value
        return pattern(is_device, "device", f"{DEVICE_FORMS}; or several: {DEVICES_FORMS}", checker)(path, value)

    return check


def _models_dirs(raw: Mapping, base: Path, checker: Checker) -> tuple[str, ...]:
    """models_dir: a folder of model plug-ins, or a list of them, relative to the sweep file's folder."""
    value = raw["models_dir"]
    folders = value if isinstance(value, list) else [value]
    found = []
    for index, folder in enumerate(folders):
        path = ("models_dir", index) if isinstance(value, list) else ("models_dir",)
        if not isinstance(folder, str) or not folder:
            checker.attempt(lambda path=path, folder=folder: checker.fail(
                path, f"{folder!r} is not a folder; accepted: a path, or a list of paths, relative to the sweep file"))
            continue
        problem = models_dir_problem(base / folder)  # the rule --models-dir follows
        if problem:
            checker.attempt(lambda path=path, problem=problem: checker.fail(path, problem))
            continue
        found.append(str((base / folder).resolve()))
    return tuple(found)


def _build(raw: object, checker: Checker, runner_names: Optional[Sequence[str]], base: Path = Path(".")) -> Sweep:
    """The study from its raw fields; raises SweepError with every problem found."""
    if not isinstance(raw, Mapping):
        checker.attempt(lambda: checker.fail((), f"a sweep is a mapping of fields; accepted fields: {', '.join(FIELDS)}"))
        raise SweepError(checker.problems)
    for name in raw:
        if name not in FIELDS:
            checker.attempt(lambda name=name: checker.fail(
                (name,), f"unknown field {name!r}{did_you_mean(str(name), FIELDS)}; accepted fields: {', '.join(FIELDS)}"))
    if "models" not in raw:
        checker.attempt(lambda: checker.fail(("models",), "missing; give the models to run, e.g. models: [resnet18]"))

    name_check = pattern(_NAME.fullmatch, "name", "letters, digits, '_', '.', '-'", checker)
    values: dict[str, object] = {}
    field = lambda name, check: values.__setitem__(name, checker.attempt(check))  # noqa: E731
    field("models", lambda: checked_list(raw, "models", checker, name_check, "[resnet18]"))
    accepted_runners = list(runner_names) if runner_names is not None else None

    def runner_check(path: Path_, value: object) -> str:
        name = pattern(is_runner_name, "runner name", RUNNER_NAME_FORMS, checker)(path, value)
        if accepted_runners is not None and name not in accepted_runners:
            checker.fail(path, f"unknown runner {name!r}{did_you_mean(name, accepted_runners)}; accepted: "
                               f"{', '.join(accepted_runners)}")
        return name

    field("runners", lambda: checked_list(raw, "runners", checker, runner_check, "[torch, tensorflow]"))
    if raw.get("versions") is not None:  # a runner per version (plan.versions), after those listed
        field("runners", lambda: study_runners(raw, checker, values["runners"]))
    field("modes", lambda: checked_list(raw, "modes", checker, choice(Mode, "mode", checker), "[train, infer]"))
    field("precisions", lambda: checked_list(raw, "precisions", checker, choice(Precision, "precision", checker), "[fp32, amp_bf16]"))
    field("profiles", lambda: checked_list(raw, "profiles", checker, choice(Profile, "profile", checker), "[equal, native]"))
    field("devices", lambda: checked_list(raw, "devices", checker, _device(checker), '[cpu, "cpu:0,cpu:1"]'))
    field("batch_sizes", lambda: checked_list(raw, "batch_sizes", checker,
                                       integer_in(1, MAX_BATCH_SIZE, "a batch size", checker), "[16, 32]"))
    field("nodes", lambda: checked_list(raw, "nodes", checker, integer_in(1, MAX_NODES, "a number of machines", checker), "[1, 2]"))
    values.update(repetition_fields(raw, checker))
    field("warmup", lambda: number(raw, "warmup", checker, 0, MAX_WARMUP))
    field("steps", lambda: number(raw, "steps", checker, 1, MAX_STEPS))
    field("min_measure_s", lambda: number(raw, "min_measure_s", checker, 0, MAX_MEASURE_S, integer=False))
    field("cooldown_s", lambda: number(raw, "cooldown_s", checker, 0, MAX_COOLDOWN_S, integer=False))
    field("max_runs", lambda: number(raw, "max_runs", checker, 1, MAX_RUNS))

    def warmup_until_cv() -> Optional[float]:
        if "warmup_until_cv" not in raw:
            return None
        value = finite(raw["warmup_until_cv"])
        if value is None or not 0 <= value < 1:
            shown = raw["warmup_until_cv"] if value is None else value
            checker.fail(("warmup_until_cv",), f"{shown!r} is not a coefficient of variation; accepted: 0 (off) up to "
                                               "below 1, e.g. 0.05")
        return value

    field("warmup_until_cv", warmup_until_cv)

    def reuse_builds() -> Optional[bool]:
        if "reuse_builds" in raw and not isinstance(raw["reuse_builds"], bool):
            checker.fail(("reuse_builds",), f"{raw['reuse_builds']!r} is not accepted; accepted: true or false")
        return raw.get("reuse_builds")

    field("reuse_builds", reuse_builds)
    models = values["models"] or ()

    def per_model(name: str, example: str) -> Mapping:
        given = raw[name]
        if not isinstance(given, Mapping):
            checker.fail((name,), f"{given!r} is not a mapping of model to values, e.g. {name}: {example}")
        for model in given:
            if model not in models:
                checker.attempt(lambda model=model: checker.fail(
                    (name, model), f"{model!r} is not one of this sweep's models{did_you_mean(str(model), models)}; "
                                   f"accepted: {', '.join(models)}"))
        return given

    def shapes() -> Optional[dict]:
        if "shapes" not in raw:
            return None
        shape_check = pattern(is_shape, "shape", SHAPE_FORMS, checker)
        if isinstance(raw["shapes"], Mapping):
            by_model = per_model("shapes", "{resnet18: [3x32x32]}")
            checked = {model: checker.attempt(lambda model=model: checked_list(by_model, model, checker, shape_check, "[3x32x32]",
                                                                         at=("shapes",)))
                       for model in by_model}
            if any(value is None for value in checked.values()):
                raise Refused()
            return checked
        everywhere = checked_list(raw, "shapes", checker, shape_check, "[3x32x32, seq=128] or {resnet18: [3x32x32]}")
        return {model: everywhere for model in models}

    field("shapes", shapes)

    def options() -> Optional[dict]:
        if "options" not in raw:
            return None
        out: dict[str, dict[str, str]] = {}
        before = len(checker.problems)
        for model, given in per_model("options", "{bert_tiny: {head: mlm}}").items():
            if not isinstance(given, Mapping):
                checker.attempt(lambda model=model, given=given: checker.fail(
                    ("options", model), f"{given!r} is not a mapping of option to value, e.g. {{head: mlm}}"))
                continue
            out[model] = {}
            for option, value in given.items():
                checked = checker.attempt(lambda model=model, option=option, value=value: _option(model, option, value, checker))
                if checked is not None:
                    out[model][option] = checked
        if len(checker.problems) > before:
            raise Refused()
        return out

    field("options", options)
    if raw.get("layout") is not None:
        field("layout", lambda: choice(Layout, "layout", checker)(("layout",), raw["layout"]))

    runners = values["runners"] or tuple(default_framework_names())
    if raw.get("compilation") is not None:
        field("compilation", lambda: _per_runner(raw, "compilation", runners, checker, choice(Compilation, "compilation", checker)))
    if raw.get("strategies") is not None:
        strategy_check = choice(Strategy, "strategy", checker)
        field("strategies", lambda: _per_runner(raw, "strategies", runners, checker, strategy_check, listed=True))

    if raw.get("models_dir") is not None:
        values["models_dirs"] = _models_dirs(raw, base, checker)
    loads = checker.attempt(lambda: sweep_loads(raw, checker, values["modes"]))

    if checker.problems:
        raise SweepError(checker.problems)
    limit = values.pop("max_runs") or DEFAULT_MAX_RUNS
    sweep = with_loads(Sweep(**{name: value for name, value in values.items() if value is not None}), loads)
    runs = sweep.run_count()  # arithmetic: the grid is never built for a study refused here
    if runs > limit:
        raise_to = (f", or raise the limit with max_runs: {runs} in a sweep file" if runs <= MAX_RUNS
                    else f" (max_runs in a sweep file raises the limit to {MAX_RUNS:,} at most)")
        checker.attempt(lambda: checker.fail(("max_runs",), f"the study plans {runs:,} runs, more than the limit of "
                                                            f"{limit:,}; shrink the grid{raise_to}"))
        raise SweepError(checker.problems)
    return sweep


def _option(model: str, option: object, value: object, checker: Checker) -> str:
    path = ("options", model, option)
    if not isinstance(option, str) or not _OPTION_NAME.fullmatch(option):
        checker.fail(path, f"{option!r} is not an option name; accepted: lower-case letters and '_'")
    if isinstance(value, bool):
        checker.fail(path, f"{value!r} is not an option value: YAML reads on/off/yes/no/true/false as booleans; quote "
                           "it, e.g. 'off'")
    if not isinstance(value, (str, int)) or not _OPTION_VALUE.fullmatch(str(value)):
        checker.fail(path, f"{value!r} is not an option value; accepted: letters, digits and '_'")
    return str(value)


def _per_runner(raw: Mapping, name: str, runners: tuple[str, ...], checker: Checker, check: Check,
                listed: bool = False) -> dict:
    """A setting for every runner (one value or list), or per runner as a mapping naming only the sweep's runners."""
    given = raw[name]
    example = "[ddp]" if listed else "eager"
    if not isinstance(given, Mapping):
        value = checked_list(raw, name, checker, check, "[ddp, mirrored] or {torch: [dp, ddp]}") if listed else check((name,), given)
        return {runner: value for runner in runners}
    out = {}
    before = len(checker.problems)
    for runner, value in given.items():
        if runner not in runners:
            checker.attempt(lambda runner=runner: checker.fail(
                (name, runner), f"{runner!r} is not one of this sweep's runners{did_you_mean(str(runner), runners)}; "
                                f"accepted: {', '.join(runners)}"))
            continue
        out[runner] = checker.attempt(
            (lambda runner=runner: checked_list(given, runner, checker, check, example, at=(name,))) if listed
            else (lambda runner=runner, value=value: check((name, runner), value)))
    if len(checker.problems) > before:
        raise Refused()
    return out


# Locating a path in the YAML node tree, for the line number.

def _node_at(root: yaml.Node, path: Path_) -> yaml.Node:
    """The node at `path`: the key's node for a mapping entry (the line the field is written on), the
    item's node for a list index; the deepest node found when the path runs out (a missing field)."""
    node = root
    for depth, part in enumerate(path):
        if isinstance(node, yaml.MappingNode):
            entry = next(((k, v) for k, v in node.value if k.value == str(part)), None)
            if entry is None:
                return node
            node = entry[0] if depth == len(path) - 1 else entry[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return node
    return node


def _duplicate_keys(node: yaml.Node, path: Path_ = ()) -> list[tuple[Path_, yaml.Node]]:
    """PyYAML keeps the last of repeated keys silently: the path and key node of every repeat."""
    found = []
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key, value in node.value:
            if key.value in seen:
                found.append(((*path, key.value), key))
            seen.add(key.value)
            found += _duplicate_keys(value, (*path, key.value))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += _duplicate_keys(item, (*path, i))
    return found


def load_sweep(path: Path, runner_names: Optional[Sequence[str]] = None, base: Optional[Path] = None) -> Sweep:
    """Read and check a sweep file, within yaml_limits' bounds; a SweepError lists every mistake with its file, line
    and field. With `runner_names`, the file's runners must be among them. Relative paths in it (models_dir) are read
    from `base`, default the file's folder."""
    path = Path(path)
    root, raw = parse(path)
    if root is None:
        raise SweepError([Problem(f"{path}, line 1", "(sweep)", f"the file is empty; accepted fields: {', '.join(FIELDS)}")])
    checker = Checker(lambda where: f"{path}, line {_node_at(root, where).start_mark.line + 1}")
    repeated = _duplicate_keys(root)
    if repeated:
        raise SweepError([Problem(f"{path}, line {key.start_mark.line + 1}", field_name(where), "given twice; give each field once")
                          for where, key in repeated])
    return _build(raw, checker, runner_names, base or path.parent)


def _split(value: object, convert: Callable[[str], object] = str) -> object:
    """A command-line list: "a,b" or a sequence of strings, each converted; anything else as given. An empty item
    ("1,,2") is kept, for the check to refuse."""
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",")]
    if isinstance(value, Sequence) and not isinstance(value, str):
        out = []
        for item in value:
            try:
                out.append(convert(item) if isinstance(item, str) else item)
            except ValueError:
                out.append(item)  # left for the check to name
        return out
    return value


def sweep_from_options(
    models: Sequence[str] | str,
    batch_sizes: Sequence[int] | str | None = None,
    shapes: Sequence[str] | str | Mapping[str, Sequence[str]] | None = None,
    modes: Sequence[str] | str | None = None,
    precisions: Sequence[str] | str | None = None,
    devices: Sequence[str] | str | None = None,
    runners: Sequence[str] | str | None = None,
    repetitions: int | str | None = None,  # a number, or "auto"
    max_repetitions: Optional[int] = None,
    time_budget_s: Optional[float] = None,
    warmup: Optional[int] = None,
    steps: Optional[int] = None,
    warmup_until_cv: Optional[float] = None,
    min_measure_s: Optional[float] = None,
    options: Mapping[str, Mapping[str, object]] | Sequence[str] | None = None,
    layout: Optional[str] = None,
    compilation: str | Mapping[str, str] | None = None,
    cooldown_s: Optional[float] = None,
    strategies: Sequence[str] | str | Mapping[str, Sequence[str]] | None = None,
    reuse_builds: Optional[bool] = None,
    runner_names: Optional[Sequence[str]] = None,
    profiles: Sequence[str] | str | None = None,
) -> Sweep:
    """The same sweep as a file would give, from command-line values: lists as sequences or as
    comma-separated text ("16,32,64"); None leaves a field's default. `options` is a mapping of model to
    {option: value}, or NAME=VALUE strings (as `compare --option` takes them) for every model.
    Mistakes raise SweepError."""
    if options is not None and not isinstance(options, Mapping):
        pairs = [str(item).partition("=") for item in _split(options)]
        bad = next((item for item, sep, _ in pairs if not sep), None)
        if bad is not None:
            raise SweepError([Problem("command line", "options", f"{bad!r} is not NAME=VALUE, e.g. head=mlm")])
        options = {model: {name: value for name, _, value in pairs} for model in _split(models)}
    given = {
        "models": _split(models), "batch_sizes": _split(batch_sizes, int), "modes": _split(modes),
        "precisions": _split(precisions), "devices": _split(devices), "runners": _split(runners),
        "shapes": shapes if isinstance(shapes, Mapping) else _split(shapes),
        "repetitions": repetitions, "max_repetitions": max_repetitions, "time_budget_s": time_budget_s,
        "warmup": warmup, "steps": steps, "warmup_until_cv": warmup_until_cv,
        "min_measure_s": min_measure_s, "options": options,
        "layout": layout, "compilation": compilation, "cooldown_s": cooldown_s,
        "strategies": strategies if isinstance(strategies, Mapping) else _split(strategies),
        "reuse_builds": reuse_builds, "profiles": _split(profiles),
    }
    checker = Checker(lambda where: "command line")
    return _build({name: value for name, value in given.items() if value is not None}, checker, runner_names)
