"""Mistakes a use case finds before anything runs: the command line shows them as a usage error (exit 2)."""

from __future__ import annotations


class UsageError(ValueError):
    """The user asked for something that cannot run; `hint` names the option or field to change."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint
