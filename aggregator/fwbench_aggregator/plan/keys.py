"""The key of a stored run: a hash of the configuration it measured, so that a study asks the store whether a run
is done before running it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

KEY_LENGTH = 16


def run_key(config: Mapping[str, object]) -> str:
    """A stable key for a configuration: the first 16 hex digits of the sha256 of its canonical JSON
    (keys sorted, no spaces). Every field of `config` counts; tuples and lists hash alike."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:KEY_LENGTH]
