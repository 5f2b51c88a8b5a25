"""A switch set in the environment (FWBENCH_RUNNER_INSECURE=1), read strictly: the words below, in any case, and
nothing else, so that `=false` never turns a switch on. The aggregator, which does not install the core, reads its
own switches alike (fwbench_aggregator.base.env_flags, held equal by tests/test_transport.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


class EnvFlagError(ValueError):
    """A switch whose value is none of the accepted words; the message names the variable and the words."""


def env_flag(name: str, default: bool, environ: Mapping[str, str] = os.environ) -> bool:
    """The switch `name`: `default` where it is unset or empty, else its word's value; EnvFlagError otherwise."""
    word = environ.get(name, "").strip().lower()
    if not word:
        return default
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise EnvFlagError(
        f"${name} is {environ[name]!r}; accepted: {', '.join(TRUE_WORDS)} (on) or "
        f"{', '.join(FALSE_WORDS)} (off), in any case, or unset"
    )
