"""A study from the command line's shorthands: the values sweep --models and its options give, checked by the
rules a sweep file's fields follow (plan.study_file)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .field_checks import (
    Checker,
    Problem,
    SweepError,
)
from .study import Sweep
from .study_file import build_sweep


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
    return build_sweep({name: value for name, value in given.items() if value is not None}, checker, runner_names)
