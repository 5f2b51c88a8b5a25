"""User text as part of a file or folder name: the one rule for every name the aggregator builds from a
model name or other text it was given."""

from __future__ import annotations

import hashlib
import re

MAX_COMPONENT_CHARS = 64
# Anything but letters, digits, '_', '-' and single dots; and a leading dot or dash (hidden files, options).
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]|\.{2,}|^[.-]")
# Marks a name that had to change, before a hash of the original. It is itself unsafe, so a name that
# needed no change never holds it and can never equal a changed one.
CHANGED_MARK = "~"
HASH_CHARS = 12


def safe_component(text: str) -> str:
    """`text` as one path component: unsafe characters become '_', and where that changed it or it was
    longer than MAX_COMPONENT_CHARS, it is cut and ends in CHANGED_MARK and a hash of the original, so
    that two different texts never give one name."""
    cleaned = _UNSAFE.sub("_", text)
    if cleaned == text and 0 < len(text) <= MAX_COMPONENT_CHARS:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:HASH_CHARS]
    suffix = f"{CHANGED_MARK}{digest}"
    return (cleaned[: MAX_COMPONENT_CHARS - len(suffix)] or "_") + suffix
