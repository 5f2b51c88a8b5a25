"""Reading a study: a sweep file (YAML), checked field by field (the grid and run settings in plan.study_fields, what
each runner executes in plan.execution_fields, repetitions and a serving load in plan.study and plan.serving_fields)
into a Sweep; the command line's shorthands make theirs by the same rules (plan.command_line_sweep).

Every mistake is reported at once, in one SweepError: each problem names the file and line (or the command line),
the field, what was wrong and what is accepted, with the closest accepted value where a slip is likely.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from ..base.suggest import did_you_mean
from .execution_fields import execution_fields
from .field_checks import (
    Checker,
    Path_,
    Problem,
    SweepError,
    field_name,
)
from .serving_fields import SWEEP_FIELDS as SERVING_FIELDS
from .serving_fields import sweep_loads, with_loads
from .settings import SETTINGS
from .spec import DEFAULT_MAX_RUNS, MAX_RUNS
from .study import Sweep, repetition_fields
from .study_fields import StudyFields, grid_fields, run_setting_fields
from .yaml_limits import parse

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


def build_sweep(raw: object, checker: Checker, runner_names: Sequence[str] | None, base: Path = Path(".")) -> Sweep:
    """The study from its raw fields; raises SweepError with every problem found."""
    fields = StudyFields(_fields_known(raw, checker), checker)
    grid_fields(fields, runner_names)
    fields.values.update(repetition_fields(fields.raw, checker))
    run_setting_fields(fields)
    execution_fields(fields, base)
    loads = checker.attempt(lambda: sweep_loads(fields.raw, checker, fields.values["modes"]))
    if checker.problems:
        raise SweepError(checker.problems)
    limit = fields.values.pop("max_runs") or DEFAULT_MAX_RUNS
    sweep = Sweep(**{name: value for name, value in fields.values.items() if value is not None})
    return _within_limit(with_loads(sweep, loads), limit, checker)


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
    return build_sweep(raw, checker, runner_names, base or path.parent)
