"""Reading a study: a sweep file (YAML) or the command line's shorthands, checked field by field.

Every mistake is reported at once, in one SweepError: each problem names the file and line (or the command line),
the field, what was wrong and what is accepted, with the closest accepted value where a slip is likely.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import yaml

from ..base.folders import models_dir_problem
from ..base.frameworks import default_names as default_framework_names
from ..base.suggest import did_you_mean
from ..base.vocabulary import (
    DEVICE_FORMS,
    DEVICES_FORMS,
    SHAPE_FORMS,
    Compilation,
    Layout,
    Mode,
    Precision,
    Profile,
    Strategy,
    devices_problem,
    is_device,
    is_shape,
)
from .field_checks import (
    Check,
    Checker,
    Path_,
    Problem,
    Refused,
    SweepError,
    checked_list,
    choice,
    field_name,
    integer_in,
    number,
    pattern,
)
from .serving_fields import SWEEP_FIELDS as SERVING_FIELDS
from .serving_fields import sweep_loads, with_loads
from .settings import BY_NAME, SETTINGS, non_default
from .spec import DEFAULT_MAX_RUNS, MAX_BATCH_SIZE, MAX_COOLDOWN_S, MAX_NODES, MAX_RUNS
from .study import Sweep, repetition_fields
from .versions import RUNNER_NAME_FORMS, is_runner_name, study_runners
from .yaml_limits import parse

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_OPTION_NAME = re.compile(r"[a-z_]+")
_OPTION_VALUE = re.compile(r"[A-Za-z0-9_]+")

# A sweep file's fields: its grid's axes, the run settings (plan.settings, each a field of its name), how runs are
# executed and paced, and a serving load's fields.
FIELDS = (
    "runners",
    "models",
    "modes",
    "batch_sizes",
    "shapes",
    "precisions",
    "devices",
    "repetitions",
    "max_repetitions",
    "time_budget_s",
    *(setting.name for setting in SETTINGS),
    "options",
    "layout",
    "compilation",
    "cooldown_s",
    "strategies",
    "reuse_builds",
    "nodes",
    "models_dir",
    "profiles",
    "max_runs",
    "versions",
    *SERVING_FIELDS,
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


def _fields_known(raw: object, checker: Checker) -> Mapping:
    """The raw study as a mapping of known fields naming its models; raises SweepError where it is no mapping."""
    if not isinstance(raw, Mapping):
        checker.attempt(
            lambda: checker.fail((), f"a sweep is a mapping of fields; accepted fields: {', '.join(FIELDS)}")
        )
        raise SweepError(checker.problems)
    for name in raw:
        if name not in FIELDS:
            checker.attempt(
                lambda name=name: checker.fail(
                    (name,),
                    f"unknown field {name!r}{did_you_mean(str(name), FIELDS)}; accepted fields: {', '.join(FIELDS)}",
                )
            )
    if "models" not in raw:
        checker.attempt(lambda: checker.fail(("models",), "missing; give the models to run, e.g. models: [resnet18]"))
    return raw


class _Fields:
    """The checked values of one study's fields, by Sweep field name; a refused field's problem is recorded."""

    def __init__(self, raw: Mapping, checker: Checker) -> None:
        self.raw, self.checker = raw, checker
        self.values: dict[str, object] = {}

    def take(self, name: str, check: Callable[[], object]) -> None:
        self.values[name] = self.checker.attempt(check)

    def listed(self, name: str, check: Check, example: str) -> None:
        self.take(name, lambda: checked_list(self.raw, name, self.checker, check, example))


def _grid(fields: _Fields, runner_names: Sequence[str] | None) -> None:
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


def _run_settings(fields: _Fields) -> None:
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


def _per_model(fields: _Fields, name: str, example: str) -> Mapping:
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


def _shapes(fields: _Fields) -> dict | None:
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


def _options(fields: _Fields) -> dict | None:
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


def _execution(fields: _Fields, base: Path) -> None:
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


def _within_limit(sweep: Sweep, limit: int, checker: Checker) -> Sweep:
    """The sweep, where the runs it plans are within `limit`; else a SweepError that says how to shrink or raise it."""
    runs = sweep.run_count()  # arithmetic: the grid is never built for a study refused here
    if runs > limit:
        raise_to = (
            f", or raise the limit with max_runs: {runs} in a sweep file"
            if runs <= MAX_RUNS
            else f" (max_runs in a sweep file raises the limit to {MAX_RUNS:,} at most)"
        )
        checker.attempt(
            lambda: checker.fail(
                ("max_runs",),
                f"the study plans {runs:,} runs, more than the limit of {limit:,}; shrink the grid{raise_to}",
            )
        )
        raise SweepError(checker.problems)
    return sweep


def _build(raw: object, checker: Checker, runner_names: Sequence[str] | None, base: Path = Path(".")) -> Sweep:
    """The study from its raw fields; raises SweepError with every problem found."""
    fields = _Fields(_fields_known(raw, checker), checker)
    _grid(fields, runner_names)
    fields.values.update(repetition_fields(fields.raw, checker))
    _run_settings(fields)
    _execution(fields, base)
    loads = checker.attempt(lambda: sweep_loads(fields.raw, checker, fields.values["modes"]))
    if checker.problems:
        raise SweepError(checker.problems)
    limit = fields.values.pop("max_runs") or DEFAULT_MAX_RUNS
    sweep = Sweep(**{name: value for name, value in fields.values.items() if value is not None})
    return _within_limit(with_loads(sweep, loads), limit, checker)


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


def load_sweep(path: Path, runner_names: Sequence[str] | None = None, base: Path | None = None) -> Sweep:
    """Read and check a sweep file, within yaml_limits' bounds; a SweepError lists every mistake with its file, line
    and field. With `runner_names`, the file's runners must be among them. Relative paths in it (models_dir) are read
    from `base`, default the file's folder."""
    path = Path(path)
    root, raw = parse(path)
    if root is None:
        raise SweepError(
            [Problem(f"{path}, line 1", "(sweep)", f"the file is empty; accepted fields: {', '.join(FIELDS)}")]
        )
    checker = Checker(lambda where: f"{path}, line {_node_at(root, where).start_mark.line + 1}")
    repeated = _duplicate_keys(root)
    if repeated:
        raise SweepError(
            [
                Problem(
                    f"{path}, line {key.start_mark.line + 1}", field_name(where), "given twice; give each field once"
                )
                for where, key in repeated
            ]
        )
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
    max_repetitions: int | None = None,
    time_budget_s: float | None = None,
    options: Mapping[str, Mapping[str, object]] | Sequence[str] | None = None,
    layout: str | None = None,
    compilation: str | Mapping[str, str] | None = None,
    cooldown_s: float | None = None,
    strategies: Sequence[str] | str | Mapping[str, Sequence[str]] | None = None,
    reuse_builds: bool | None = None,
    runner_names: Sequence[str] | None = None,
    profiles: Sequence[str] | str | None = None,
    **settings: object,
) -> Sweep:
    """The same sweep as a file would give, from command-line values: lists as sequences or as
    comma-separated text ("16,32,64"); None leaves a field's default. `options` is a mapping of model to
    {option: value}, or NAME=VALUE strings (as `compare --option` takes them) for every model. `settings`: run
    settings by name (plan.settings), as a file's fields. Mistakes raise SweepError."""
    if options is not None and not isinstance(options, Mapping):
        pairs = [str(item).partition("=") for item in _split(options)]
        bad = next((item for item, sep, _ in pairs if not sep), None)
        if bad is not None:
            raise SweepError([Problem("command line", "options", f"{bad!r} is not NAME=VALUE, e.g. head=mlm")])
        options = {model: {name: value for name, _, value in pairs} for model in _split(models)}
    given = {
        "models": _split(models),
        "batch_sizes": _split(batch_sizes, int),
        "modes": _split(modes),
        "precisions": _split(precisions),
        "devices": _split(devices),
        "runners": _split(runners),
        "shapes": shapes if isinstance(shapes, Mapping) else _split(shapes),
        "repetitions": repetitions,
        "max_repetitions": max_repetitions,
        "time_budget_s": time_budget_s,
        **settings,
        "options": options,
        "layout": layout,
        "compilation": compilation,
        "cooldown_s": cooldown_s,
        "strategies": strategies if isinstance(strategies, Mapping) else _split(strategies),
        "reuse_builds": reuse_builds,
        "profiles": _split(profiles),
    }
    checker = Checker(lambda where: "command line")
    return _build({name: value for name, value in given.items() if value is not None}, checker, runner_names)
