"""Sweeps: a grid of benchmark configurations, described in YAML or by command-line shorthands.

    runners: [torch, tensorflow]        # default: those frameworks.toml compares by default (torch, tensorflow)
    models: [resnet18, bert_tiny]       # required
    modes: [train, infer]               # default: [train]
    batch_sizes: [16, 32, 64]           # default: [32]
    shapes: [3x32x32, 3x64x64]          # or per model: {resnet18: [3x32x32], bert_tiny: [seq=128]}; default: the model's
    precisions: [fp32, amp_bf16]        # default: [fp32]
    devices: [gpu:0, "gpu:0,gpu:1"]     # one device, or several of each runner for one run; default: its first GPU, else its CPU
    strategies: [ddp, mirrored]         # or per runner: {torch: [dp, ddp], tensorflow: [mirrored]}; default: the runner's
    nodes: [1, 2]                       # machines one run spans (a Slurm allocation's, fwbench slurm); default: [1]
    repetitions: 6                      # runs per runner and point; default: 6 (a verdict needs 3)
    warmup: 50                          # the most warm-up steps; default: 50
    warmup_until_cv: 0.05               # warm up until the last 5 steps vary less; 0 (or warmup < 5): `warmup` steps
    steps: 20                           # the fewest measured steps; default: 20
    min_measure_s: 1.0                  # and the shortest measured window; default: 1.0
    options: {bert_tiny: {head: mlm}}   # model options, per model
    layout: channels_last               # default: the runner's
    compilation: eager                  # or per runner: {torch: torch_compile, tensorflow: xla}
    cooldown_s: 10                      # seconds between runs; default: 0
    reuse_builds: true                  # a runner's batch sizes of one repetition share one build; default: true

Every mistake is reported as a SweepError naming the file, the line, the field and what is accepted.
The grid expands with the frameworks interleaved: for each point (less its batch size) and each repetition,
every runner in turn (A, B, B, A, ...), so that drift over a long sweep favours neither; each runner's turn
runs the batch sizes one after the other. With reuse_builds they are one chain that builds the model once
(RunRequest.reuse_key): each run restarts from the seed's weights and makes its own inputs, and TensorFlow
traces its step again for every batch size. Repetitions never share a build, so runs stay independent.
"""

from __future__ import annotations

import enum
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import yaml

from . import plan, stats, store
from .frameworks import default_names as default_framework_names
from .launch import StartupSettings
from .plan import DEFAULT_MIN_MEASURE_S, DEFAULT_STEPS, DEFAULT_WARMUP, DEFAULT_WARMUP_UNTIL_CV, RunSpec
from .vocabulary import (
    DEVICE_FORMS, DEVICES_FORMS, SHAPE_FORMS, Compilation, Layout, Mode, Precision, Strategy, devices_problem, is_device,
    is_shape,
)
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_OPTION_NAME = re.compile(r"[a-z_]+")
_OPTION_VALUE = re.compile(r"[A-Za-z0-9_]+")

FIELDS = (
    "runners", "models", "modes", "batch_sizes", "shapes", "precisions", "devices", "repetitions",
    "warmup", "warmup_until_cv", "steps", "min_measure_s", "options", "layout", "compilation", "cooldown_s",
    "strategies", "reuse_builds", "nodes",
)


class SweepError(ValueError):
    """A sweep that cannot run; the message says where (file and line, or the command line) and which field."""

    def __init__(self, where: str, field_name: str, problem: str) -> None:
        super().__init__(f"{where}: {field_name}: {problem}")
        self.where = where
        self.field = field_name
        self.problem = problem


@dataclass(frozen=True)
class Configuration:
    """One run: one runner, one point of the grid, one repetition."""

    runner: str
    model: str
    mode: Mode
    batch_size: int
    shape: Optional[str]
    precision: Precision
    device: Optional[str]
    repetition: int
    model_options: tuple[tuple[str, str], ...] = ()
    layout: Optional[Layout] = None
    compilation: Optional[Compilation] = None
    warmup: int = DEFAULT_WARMUP
    steps: int = DEFAULT_STEPS
    warmup_until_cv: float = DEFAULT_WARMUP_UNTIL_CV
    min_measure_s: float = DEFAULT_MIN_MEASURE_S
    strategy: Optional[Strategy] = None
    devices: Optional[str] = None  # several devices of the runner, "cpu:0,cpu:1"; then `device` is None
    nodes: int = 1  # machines the run spans: one job across that many nodes of a Slurm allocation
    # The runs that share one build: this runner, this point less its batch size, this repetition; "" for none.
    # Not part of the store key: it changes how a run is prepared, not what it measures.
    reuse_chain: str = ""

    def run_spec(self, startup: StartupSettings, reuse_key: str = "", end_reuse: bool = False) -> RunSpec:
        """The run this configuration asks of its runner, with the runners' startup settings and its chain's key."""
        return RunSpec(
            self.model, self.mode, self.batch_size, self.shape, self.precision, self.device, self.layout,
            self.compilation, self.warmup, self.steps, model_options=self.model_options, startup=startup,
            warmup_until_cv=self.warmup_until_cv, min_measure_s=self.min_measure_s, strategy=self.strategy,
            devices=self.devices, reuse_key=reuse_key, end_reuse=end_reuse,
        )

    def key_fields(self, **settings: object) -> dict[str, object]:
        """The fields a result depends on, JSON-ready, for store.run_key. Extra keyword arguments
        (seed, thread counts, ...) join the settings, so a change to them makes a new key."""
        return {
            "runner": self.runner,
            "model": self.model,
            "model_options": dict(self.model_options),
            "mode": self.mode.value,
            "batch_size": self.batch_size,
            "input_shape": self.shape,
            "precision": self.precision.value,
            "device": self.device,
            "layout": self.layout.value if self.layout else None,
            "compilation": self.compilation.value if self.compilation else None,
            "settings": {
                "warmup_steps": self.warmup, "warmup_until_cv": self.warmup_until_cv, "measured_steps": self.steps,
                "min_measure_s": self.min_measure_s, **settings,
            },
            "repetition": self.repetition,
            # Only where set: the keys of runs stored before distributed runs existed stay the same.
            **({"strategy": self.strategy.value} if self.strategy else {}),
            **({"devices": self.devices} if self.devices else {}),
            **({"nodes": self.nodes} if self.nodes > 1 else {}),
        }

    def family(self) -> tuple:
        """What the runs that must share a machine have in common: everything but the runner, its strategy, the
        batch size and the repetition. A comparison's runs all run on one machine, so a difference between nodes is never
        reported as one between frameworks, and a reuse chain stays on the runner that holds its build."""
        return (self.model, self.model_options, self.mode, self.shape, self.precision, self.device, self.devices,
                self.layout, self.nodes)


@dataclass(frozen=True)
class Sweep:
    models: tuple[str, ...]
    runners: tuple[str, ...] = field(default_factory=lambda: tuple(default_framework_names()))
    modes: tuple[Mode, ...] = (Mode.train,)
    batch_sizes: tuple[int, ...] = (32,)
    shapes: dict[str, tuple[Optional[str], ...]] = field(default_factory=dict)  # per model; absent: (None,)
    precisions: tuple[Precision, ...] = (Precision.fp32,)
    devices: tuple[Optional[str], ...] = (None,)
    repetitions: int = stats.DEFAULT_REPETITIONS
    warmup: int = DEFAULT_WARMUP
    steps: int = DEFAULT_STEPS
    warmup_until_cv: float = DEFAULT_WARMUP_UNTIL_CV
    min_measure_s: float = DEFAULT_MIN_MEASURE_S
    options: dict[str, dict[str, str]] = field(default_factory=dict)
    layout: Optional[Layout] = None
    compilation: dict[str, Compilation] = field(default_factory=dict)  # per runner; absent: the runner's default
    cooldown_s: float = 0.0
    strategies: dict[str, tuple[Strategy, ...]] = field(default_factory=dict)  # per runner; absent: its default
    reuse_builds: bool = True
    nodes: tuple[int, ...] = (1,)

    def configurations(self) -> list[Configuration]:
        """The grid, model outermost, then mode, shape, precision, device, strategy; within each point,
        repetition after repetition, the runners counterbalanced (A B B A ...), and each runner's repetition
        its batch sizes in order: one reuse chain with reuse_builds. A runner's strategies pair with each
        devices entry (a strategy the devices cannot run fails as a stored refusal)."""
        out = []
        strategy_count = max((len(v) for v in self.strategies.values()), default=1)
        for model in self.models:
            points = itertools.product(
                self.modes, self.shapes.get(model, (None,)), self.precisions, self.devices, self.nodes,
                range(strategy_count),
            )
            for mode, shape, precision, device, nodes, s in points:
                for repetition, runner in counterbalanced(self.runners, self.repetitions):
                    own = self.strategies.get(runner, (None,))
                    if s >= len(own):
                        continue
                    several = device is not None and "," in device
                    chain = [
                        Configuration(
                            runner, model, mode, batch_size, shape, precision, None if several else device, repetition,
                            tuple(sorted(self.options.get(model, {}).items())), self.layout,
                            self.compilation.get(runner), self.warmup, self.steps, self.warmup_until_cv,
                            self.min_measure_s, own[s], device if several else None, nodes,
                        )
                        for batch_size in self.batch_sizes
                    ]
                    if self.reuse_builds and len(chain) > 1:
                        key = store.run_key({**chain[0].key_fields(), "batch_size": None})
                        chain = [replace(c, reuse_chain=key) for c in chain]
                    out.extend(chain)
        return out


def counterbalanced(runners: Sequence[str], repetitions: int) -> list[tuple[int, str]]:
    """(repetition, runner) in run order: the runners forwards, then backwards (A B, B A, A B, ...), so
    that every runner's average position is the same and a drift (warming, throttling) favours none."""
    return [
        (repetition, runner)
        for repetition in range(repetitions)
        for runner in (runners if repetition % 2 == 0 else list(reversed(runners)))
    ]


# Validation. `raw` is what YAML (or the command line) gave; `fail(path, problem)` raises a SweepError
# located at `path`, a tuple of keys and indices into `raw` such as ("batch_sizes", 1).

Fail = Callable[..., None]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list(raw: Mapping, name: str, fail: Fail, check: Callable[[tuple, object], object], example: str) -> Optional[tuple]:
    if name not in raw:
        return None
    values = raw[name]
    if not isinstance(values, list) or not values:
        fail((name,), f"{values!r} is not a list of values; write a non-empty list, e.g. {name}: {example}")
    out = tuple(check((name, i), value) for i, value in enumerate(values))
    for i, value in enumerate(out):
        if value in out[:i]:
            fail((name, i), f"{values[i]!r} is repeated; give each value once")
    return out


def _choice(choices: type[enum.Enum], what: str, fail: Fail) -> Callable[[tuple, object], enum.Enum]:
    def check(path: tuple, value: object) -> enum.Enum:
        if not isinstance(value, str) or value not in choices.__members__:
            fail(path, f"unknown {what} {value!r}; accepted values: {', '.join(choices.__members__)}")
        return choices(value)

    return check


def _pattern(matches: Callable[[str], object], what: str, accepted: str, fail: Fail) -> Callable[[tuple, object], str]:
    def check(path: tuple, value: object) -> str:
        text = str(value) if _is_int(value) else value
        if not isinstance(text, str) or not matches(text):
            fail(path, f"{value!r} is not a {what}; accepted: {accepted}")
        return text

    return check


def _number(raw: Mapping, name: str, fail: Fail, minimum: float, maximum: float, integer: bool = True):
    if name not in raw:
        return None
    value = raw[name]
    ok = _is_int(value) if integer else (_is_int(value) or (isinstance(value, float) and math.isfinite(value)))
    if not ok or not minimum <= value <= maximum:
        kind = "an integer" if integer else "a number"
        bounds = f">= {minimum:.12g}" if maximum == math.inf else f"from {minimum:.12g} to {maximum:.12g}"
        fail((name,), f"{value!r} is not accepted; accepted: {kind} {bounds}")
    return value


def _build(raw: object, fail: Fail) -> Sweep:
    if not isinstance(raw, Mapping):
        fail((), f"a sweep is a mapping of fields; accepted fields: {', '.join(FIELDS)}")
    for name in raw:
        if name not in FIELDS:
            fail((name,), f"unknown field {name!r}; accepted fields: {', '.join(FIELDS)}")
    if "models" not in raw:
        fail(("models",), "missing; give the models to run, e.g. models: [resnet18]")

    name_check = _pattern(_NAME.fullmatch, "name", "letters, digits, '_', '.', '-'", fail)
    models = _list(raw, "models", fail, name_check, "[resnet18]")
    values: dict[str, object] = {"models": models}
    values["runners"] = _list(raw, "runners", fail, name_check, "[torch, tensorflow]")
    values["modes"] = _list(raw, "modes", fail, _choice(Mode, "mode", fail), "[train, infer]")
    values["precisions"] = _list(raw, "precisions", fail, _choice(Precision, "precision", fail), "[fp32, amp_bf16]")
    def device_check(path: tuple, value: object) -> str:
        if isinstance(value, str) and "," in value:
            problem = devices_problem(value)
            if problem:
                fail(path, f"{value!r}: {problem}; accepted: {DEVICES_FORMS}")
            return value
        return _pattern(is_device, "device", f"{DEVICE_FORMS}; or several: {DEVICES_FORMS}", fail)(path, value)

    values["devices"] = _list(raw, "devices", fail, device_check, '[cpu, "cpu:0,cpu:1"]')

    def batch_check(path: tuple, value: object) -> int:
        if not _is_int(value) or not 1 <= value <= plan.MAX_BATCH_SIZE:
            fail(path, f"{value!r} is not a batch size; accepted: integers from 1 to {plan.MAX_BATCH_SIZE}")
        return value

    values["batch_sizes"] = _list(raw, "batch_sizes", fail, batch_check, "[16, 32]")

    def nodes_check(path: tuple, value: object) -> int:
        if not _is_int(value) or not 1 <= value <= plan.MAX_NODES:
            fail(path, f"{value!r} is not a number of machines; accepted: integers from 1 to {plan.MAX_NODES}")
        return value

    values["nodes"] = _list(raw, "nodes", fail, nodes_check, "[1, 2]")
    values["repetitions"] = _number(raw, "repetitions", fail, 1, plan.MAX_REPETITIONS)
    values["warmup"] = _number(raw, "warmup", fail, 0, plan.MAX_WARMUP)
    values["steps"] = _number(raw, "steps", fail, 1, plan.MAX_STEPS)
    for name, maximum in (("warmup_until_cv", math.inf), ("min_measure_s", plan.MAX_MEASURE_S)):
        number = _number(raw, name, fail, 0, maximum, integer=False)
        values[name] = None if number is None else float(number)
    if values["warmup_until_cv"] is not None and values["warmup_until_cv"] >= 1:
        fail(("warmup_until_cv",), f"{values['warmup_until_cv']!r} is not a coefficient of variation; accepted: 0 (off) up to below 1, e.g. 0.05")
    cooldown_s = _number(raw, "cooldown_s", fail, 0, plan.MAX_COOLDOWN_S, integer=False)
    values["cooldown_s"] = None if cooldown_s is None else float(cooldown_s)
    if "reuse_builds" in raw:
        if not isinstance(raw["reuse_builds"], bool):
            fail(("reuse_builds",), f"{raw['reuse_builds']!r} is not accepted; accepted: true or false")
        values["reuse_builds"] = raw["reuse_builds"]

    def per_model(name: str, example: str) -> Mapping:
        given = raw[name]
        if not isinstance(given, Mapping):
            fail((name,), f"{given!r} is not a mapping of model to values, e.g. {name}: {example}")
        for model in given:
            if model not in models:
                fail((name, model), f"{model!r} is not one of this sweep's models; accepted: {', '.join(models)}")
        return given

    if "shapes" in raw:
        if isinstance(raw["shapes"], Mapping):
            def in_shapes(where: tuple, problem: str) -> None:
                fail(("shapes", *where), problem)

            shape_check = _pattern(is_shape, "shape", SHAPE_FORMS, in_shapes)
            by_model = per_model("shapes", "{resnet18: [3x32x32]}")
            values["shapes"] = {model: _list(by_model, model, in_shapes, shape_check, "[3x32x32]") for model in by_model}
        else:
            shape_check = _pattern(is_shape, "shape", SHAPE_FORMS, fail)
            everywhere = _list(raw, "shapes", fail, shape_check, "[3x32x32, seq=128] or {resnet18: [3x32x32]}")
            values["shapes"] = {model: everywhere for model in models}

    if "options" in raw:
        options = {}
        for model, given in per_model("options", "{bert_tiny: {head: mlm}}").items():
            if not isinstance(given, Mapping):
                fail(("options", model), f"{given!r} is not a mapping of option to value, e.g. {{head: mlm}}")
            options[model] = {}
            for option, value in given.items():
                if not isinstance(option, str) or not _OPTION_NAME.fullmatch(option):
                    fail(("options", model, option), f"{option!r} is not an option name; accepted: lower-case letters and '_'")
                if isinstance(value, bool):
                    fail(("options", model, option), f"{value!r} is not an option value: YAML reads on/off/yes/no/true/false as booleans; quote it, e.g. 'off'")
                if not isinstance(value, (str, int)) or not _OPTION_VALUE.fullmatch(str(value)):
                    fail(("options", model, option), f"{value!r} is not an option value; accepted: letters, digits and '_'")
                options[model][option] = str(value)
        values["options"] = options

    if raw.get("layout") is not None:
        values["layout"] = _choice(Layout, "layout", fail)(("layout",), raw["layout"])

    runners = values["runners"] or tuple(default_framework_names())
    if raw.get("compilation") is not None:
        given = raw["compilation"]
        compilation_check = _choice(Compilation, "compilation", fail)
        if isinstance(given, Mapping):
            _check_runners("compilation", given, runners, fail)
            values["compilation"] = {runner: compilation_check(("compilation", runner), value) for runner, value in given.items()}
        else:
            values["compilation"] = {runner: compilation_check(("compilation",), given) for runner in runners}

    if raw.get("strategies") is not None:
        given = raw["strategies"]
        strategy_check = _choice(Strategy, "strategy", fail)
        if isinstance(given, Mapping):
            _check_runners("strategies", given, runners, fail)
            values["strategies"] = {
                runner: _list(given, runner, lambda where, problem: fail(("strategies", *where), problem), strategy_check, "[ddp]")
                for runner in given
            }
        else:
            everywhere = _list(raw, "strategies", fail, strategy_check, "[ddp, mirrored] or {torch: [dp, ddp]}")
            values["strategies"] = {runner: everywhere for runner in runners}

    return Sweep(**{name: value for name, value in values.items() if value is not None})


def _check_runners(field: str, given: Mapping, runners: tuple[str, ...], fail) -> None:
    """A per-runner setting names only this sweep's runners."""
    for runner in given:
        if runner not in runners:
            fail((field, runner), f"{runner!r} is not one of this sweep's runners; accepted: {', '.join(runners)}")


# Locating a path in the YAML node tree, for the line number.

def _node_at(root: yaml.Node, path: tuple) -> yaml.Node:
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


def _field_name(path: tuple) -> str:
    if not path:
        return "(sweep)"
    return str(path[0]) + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path[1:])


def _duplicate_keys(node: yaml.Node, path: tuple = ()) -> Optional[tuple[tuple, yaml.Node]]:
    """PyYAML keeps the last of repeated keys silently; the path and key node of the first repeat, if any."""
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key, value in node.value:
            if key.value in seen:
                return (*path, key.value), key
            seen.add(key.value)
            found = _duplicate_keys(value, (*path, key.value))
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _duplicate_keys(item, (*path, i))
            if found:
                return found
    return None


def load_sweep(path: Path) -> Sweep:
    """Read and validate a sweep file; a SweepError names the file, line and field of the first mistake."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise SweepError(str(path), "(file)", f"cannot be read: {error.strerror or error}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}" if mark else str(path)
        raise SweepError(where, "(syntax)", f"not valid YAML: {getattr(error, 'problem', None) or error}") from None
    if root is None:
        raise SweepError(f"{path}, line 1", "(sweep)", f"the file is empty; accepted fields: {', '.join(FIELDS)}")

    def fail(where: tuple, problem: str) -> None:
        line = _node_at(root, where).start_mark.line + 1
        raise SweepError(f"{path}, line {line}", _field_name(where), problem)

    repeated = _duplicate_keys(root)
    if repeated:
        where, key = repeated
        raise SweepError(f"{path}, line {key.start_mark.line + 1}", _field_name(where), "given twice; give each field once")
    return _build(raw, fail)


def _split(value: object, convert: Callable[[str], object] = str) -> object:
    """A command-line list: "a,b" or a sequence of strings, each converted; anything else as given."""
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, Sequence) and not isinstance(value, str):
        out = []
        for item in value:
            try:
                out.append(convert(item) if isinstance(item, str) else item)
            except ValueError:
                out.append(item)  # left for validation to name
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
    repetitions: Optional[int] = None,
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
) -> Sweep:
    """The same sweep as a file would give, from command-line values: lists as sequences or as
    comma-separated text ("16,32,64"); None leaves a field's default. `options` is a mapping of model to
    {option: value}, or NAME=VALUE strings (as `compare --option` takes them) for every model.
    Mistakes raise SweepError."""
    if options is not None and not isinstance(options, Mapping):
        pairs = [str(item).partition("=") for item in _split(options)]
        bad = next((item for item, sep, _ in pairs if not sep), None)
        if bad is not None:
            raise SweepError("command line", "options", f"{bad!r} is not NAME=VALUE, e.g. head=mlm")
        options = {model: {name: value for name, _, value in pairs} for model in _split(models)}
    given = {
        "models": _split(models), "batch_sizes": _split(batch_sizes, int), "modes": _split(modes),
        "precisions": _split(precisions), "devices": _split(devices), "runners": _split(runners),
        "shapes": shapes if isinstance(shapes, Mapping) else _split(shapes),
        "repetitions": repetitions, "warmup": warmup, "steps": steps, "warmup_until_cv": warmup_until_cv,
        "min_measure_s": min_measure_s, "options": options,
        "layout": layout, "compilation": compilation, "cooldown_s": cooldown_s,
        "strategies": strategies if isinstance(strategies, Mapping) else _split(strategies),
        "reuse_builds": reuse_builds,
    }

    def fail(where: tuple, problem: str) -> None:
        raise SweepError("command line", _field_name(where), problem)

    return _build({name: value for name, value in given.items() if value is not None}, fail)
