"""Checking a study's raw fields (YAML, or the command line's) one by one, collecting every problem: each names
where it is, the field, what was wrong and what is accepted."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, NoReturn

from ..base.suggest import did_you_mean

MAX_ITEMS = 1000  # values in one list: a study's lists are short, and repeats are found in quadratic time


class Problem(NamedTuple):
    where: str  # the file and line, or "command line"
    field: str  # e.g. batch_sizes[1]
    problem: str


class SweepError(ValueError):
    """A study that cannot run: every problem found, each naming where, the field and what is accepted. `where`,
    `field` and `problem` are the first one's."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        self.where, self.field, self.problem = self.problems[0]
        super().__init__("\n".join(f"{p.where}: {p.field}: {p.problem}" for p in self.problems))


class Refused(Exception):
    """A value was refused; its problem is recorded, and the check of that value stops."""


Path_ = tuple  # keys and indices into the raw study, e.g. ("batch_sizes", 1)


class Checker:
    """Collects the problems of one study; `locate(path)` says where a path is (file and line)."""

    def __init__(self, locate: Callable[[Path_], str]) -> None:
        self.locate = locate
        self.problems: list[Problem] = []

    def fail(self, path: Path_, problem: str) -> NoReturn:
        self.problems.append(Problem(self.locate(path), field_name(path), problem))
        raise Refused()

    def attempt(self, check: Callable[[], object]) -> object:
        """The check's value, or None where it refused (its problem recorded)."""
        try:
            return check()
        except Refused:
            return None


def field_name(path: Path_) -> str:
    if not path:
        return "(sweep)"
    return str(path[0]) + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path[1:])


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


Check = Callable[[Path_, object], object]


def checked_list(raw: Mapping, name: str, checker: Checker, check: Check, example: str, at: Path_ = ()) -> tuple | None:
    """The checked values of list `name`; every bad item is recorded, and then the field is refused."""
    if name not in raw:
        return None
    path = (*at, name)
    values = raw[name]
    if not isinstance(values, list) or not values:
        checker.fail(path, f"{values!r} is not a list of values; write a non-empty list, e.g. {name}: {example}")
    if len(values) > MAX_ITEMS:
        checker.fail(path, f"{len(values)} values; accepted: at most {MAX_ITEMS}")
    before = len(checker.problems)
    out = [checker.attempt(lambda i=i, value=value: check((*path, i), value)) for i, value in enumerate(values)]
    for i, value in enumerate(out):
        if value is not None and value in out[:i]:
            checker.attempt(lambda i=i: checker.fail((*path, i), f"{values[i]!r} is repeated; give each value once"))
    if len(checker.problems) > before:
        raise Refused()
    return tuple(out)


def choice(choices: type[enum.Enum], what: str, checker: Checker) -> Check:
    def check(path: Path_, value: object) -> enum.Enum:
        if not isinstance(value, str) or value not in choices.__members__:
            hint = did_you_mean(value, choices.__members__)
            checker.fail(path, f"unknown {what} {value!r}{hint}; accepted values: {', '.join(choices.__members__)}")
        return choices(value)

    return check


def pattern(matches: Callable[[str], object], what: str, accepted: str, checker: Checker) -> Check:
    def check(path: Path_, value: object) -> str:
        text = str(value) if is_int(value) else value
        if not isinstance(text, str) or not matches(text):
            checker.fail(path, f"{value!r} is not a {what}; accepted: {accepted}")
        return text

    return check


def integer_in(low: int, high: int, what: str, checker: Checker) -> Check:
    def check(path: Path_, value: object) -> int:
        if not is_int(value) or not low <= value <= high:
            checker.fail(path, f"{value!r} is not {what}; accepted: integers from {low} to {high}")
        return value

    return check


def finite(value: object) -> float | None:
    """A YAML number as a finite float, or None: not a number, not finite, or an integer past a float's range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def number(raw: Mapping, name: str, checker: Checker, minimum: float, maximum: float, integer: bool = True):
    if name not in raw:
        return None
    value = raw[name]
    ok = is_int(value) if integer else finite(value) is not None
    if not ok or not minimum <= value <= maximum:
        kind = "an integer" if integer else "a number"
        bounds = f">= {minimum:.12g}" if maximum == math.inf else f"from {minimum:.12g} to {maximum:.12g}"
        checker.fail((name,), f"{value!r} is not accepted; accepted: {kind} {bounds}")
    return value if integer else float(value)
