"""The keys of stored entries. A measured run's id is its own (new_run_id): random, so that the same configuration
measured on two machines, or by two compares in one second, never share an id, and stores merge without loss. A
configuration's key (config_key) is a hash of what it asks: a sweep records it with each run to find its own runs
again on a resume, and an entry that is a fact of its content alone (a model's FLOP count, parity evidence) is stored
under it, where the same content under the same id is rightly one entry."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping

KEY_LENGTH = 16


def config_key(config: Mapping[str, object]) -> str:
    """A stable key for a configuration: the first 16 hex digits of the sha256 of its canonical JSON
    (keys sorted, no spaces). Every field of `config` counts; tuples and lists hash alike."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:KEY_LENGTH]


def new_run_id() -> str:
    """A new measured run's id: 16 random hex digits (64 bits: two ids among a million runs collide with a chance
    of about 3 in 100 million), as long as a configuration key, so stores of both read alike."""
    return secrets.token_hex(KEY_LENGTH // 2)
