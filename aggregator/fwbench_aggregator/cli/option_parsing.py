"""The callbacks the command line's options share: each refuses a malformed value before any runner is
started, naming the accepted values and the closest one to a slip."""

from __future__ import annotations

import enum

import typer

from ..base.suggest import did_you_mean


def parse_text(value: str | None) -> str | None:
    """Text a request carries must be UTF-8; bytes that are not reach Python as lone surrogates."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise typer.BadParameter("is not UTF-8 text") from None
    return value


def parse_choice(choices: type[enum.Enum], what: str):
    """A callback taking one of the enum's values, refusing anything else with the closest value and every one."""

    def parse(value: str | None):
        if value is None or isinstance(value, choices):
            return value
        if value not in choices.__members__:
            raise typer.BadParameter(
                f"{value!r} is not a {what}{did_you_mean(value, choices.__members__)}; accepted "
                f"values: {', '.join(choices.__members__)}"
            )
        return choices(value)

    return parse


def choices_metavar(choices: type[enum.Enum]) -> str:
    return "[" + "|".join(choices.__members__) + "]"


def parse_per_runner(choices: type[enum.Enum]):
    """A callback for an option given as VALUE (every runner) or RUNNER=VALUE (one), repeatable."""

    def parse(values: list[str]) -> list[str]:
        for value in values:
            setting = value.partition("=")[2] if "=" in value else value
            if setting not in choices.__members__:
                raise typer.BadParameter(
                    f"{value!r}: give VALUE for every runner or RUNNER=VALUE for one{did_you_mean(setting, choices.__members__)}; "
                    f"accepted values: {', '.join(choices.__members__)}"
                )
        return values

    return parse


def checked_names(value: str, known, what: str) -> str:
    """A comma-separated list of names, each one of `known`; refused naming the unknown ones, the closest known
    name to each, and every known one."""
    unknown = [name for name in value.split(",") if name not in known]
    if unknown or not value:
        hints = "".join(did_you_mean(name, known) for name in unknown)
        raise typer.BadParameter(
            f"unknown {what}(s) {', '.join(map(repr, unknown)) or repr(value)}{hints}; "
            f"accepted values: {', '.join(known)}"
        )
    return value
