"""Reading a file fwbench is given or keeps (a store's JSON, a bundle's index), bounded before it is parsed: only a
regular file, opened without waiting (a FIFO would block the reader for ever), read no further than a size bound,
and JSON nested no deeper than a bound, each refusal naming the file (and the line, for nesting). Python's JSON
parser recurses once per level: a few kilobytes of '[' end it in a RecursionError."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

MAX_JSON_DEPTH = 64  # a run's manifest nests 4 levels; its configuration 3
# What counting the nesting looks at: a string (skipped; one left open ends at its line, so that the count stays
# linear in the text), a bracket, a line's end.
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|[\[\]{}\n]')


class UnreadableFile(ValueError):
    """A file that is not read: the message names it and why; `reason` is the why alone, for a caller that names the
    file its own way."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


def _size(count_bytes: int) -> str:
    return f"{count_bytes // 1024} KiB" if count_bytes % 1024 == 0 else f"{count_bytes} bytes"


def read_regular_bytes(path: Path, max_bytes: int, what: str, follow_links: bool = True) -> bytes:
    """The bytes of the regular file `path` (`what` it is, for the message), at most `max_bytes` of them;
    UnreadableFile where it is anything else (a FIFO, a device, a folder; a link where `follow_links` is False),
    larger, or cannot be read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        cause = "a symbolic link" if os.path.islink(path) and not follow_links else error.strerror or str(error)
        raise UnreadableFile(f"{path} ({what}) cannot be read: {cause}", f"cannot be read: {cause}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        reason = "is not a regular file (a FIFO, device or folder): not read"
        raise UnreadableFile(f"{path} ({what}) {reason}", reason)
    with os.fdopen(fd, "rb") as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        reason = f"is larger than {_size(max_bytes)}, the most it may hold: not read"
        raise UnreadableFile(f"{path} ({what}) {reason}", reason)
    return data


def read_regular_text(path: Path, max_bytes: int, what: str, follow_links: bool = True) -> str:
    """read_regular_bytes, as UTF-8 text; UnreadableFile naming the line of a byte that is not UTF-8."""
    data = read_regular_bytes(path, max_bytes, what, follow_links)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise UnreadableFile(f"{path}, line {line} ({what}): not UTF-8 (byte 0x{data[error.start]:02x})") from None


def parse_json(text: str, where: str, max_depth: int = MAX_JSON_DEPTH) -> object:
    """The JSON value of `text` (from `where`, for the message), refused unparsed (UnreadableFile naming the line)
    where it nests deeper than `max_depth`, and where it is no JSON."""
    depth, line = 0, 1
    for match in _TOKEN.finditer(text):
        bracket = match.group()
        if bracket.startswith('"'):
            continue
        if bracket == "\n":
            line += 1
        elif bracket in "[{":
            depth += 1
            if depth > max_depth:
                raise UnreadableFile(f"{where}, line {line}: nested more than {max_depth} levels deep: not read")
        else:
            depth -= 1
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise UnreadableFile(f"{where}: not JSON: {error}") from None


def read_json(
    path: Path, max_bytes: int, what: str, max_depth: int = MAX_JSON_DEPTH, follow_links: bool = True
) -> object:
    """The JSON value of the regular file `path`, within the bounds of read_regular_text and parse_json."""
    return parse_json(read_regular_text(path, max_bytes, what, follow_links), f"{path} ({what})", max_depth)
