"""Reading a sweep file within bounds: every limit is checked while the YAML is composed, before any value becomes
a Python object, and each refusal is a SweepError naming the file, line and field.

A sweep file is a few dozen lines, yet a few hundred bytes of YAML can ask for unbounded work: aliases repeat a list
inside itself (a "billion laughs" file), a long list or deep nesting costs time and memory to compose, nesting past
Python's recursion limit crashes the composer, and one long scalar (an integer in base 60) takes seconds to convert.
So aliases are refused outright (a sweep needs none), and the composer stops at the limits below. The file size
bounds the scanner's work: on a 2-core machine PyYAML scans 1 MiB in up to a second, 256 KiB in a third of one.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import yaml

from ..base.read_files import UnreadableFile, read_regular_bytes
from .field_checks import MAX_ITEMS, Problem, SweepError, field_name

MAX_FILE_BYTES = 256 * 1024
MAX_DEPTH = 16  # the deepest a sweep nests is 3: options: {model: {option: value}}
MAX_NODES = 10_000  # values in the whole file
MAX_SCALAR_CHARS = 4096  # the longest path


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the composer bounded; `name` is the file's, for the messages."""

    def __init__(self, text: str, name: str) -> None:
        super().__init__(text)
        self._name = name
        self._path: list[object] = []  # keys and indices down to the node being composed
        self._depth = 0
        self._nodes = 0

    def _refuse(self, event: yaml.Event, problem: str) -> NoReturn:
        where = f"{self._name}, line {event.start_mark.line + 1}"
        raise SweepError([Problem(where, field_name(tuple(self._path)), problem)])

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        event = self.peek_event()
        if parent is not None and len(parent.value) >= MAX_ITEMS:  # the same bound in a mapping as in a list
            self._refuse(event, f"more than {MAX_ITEMS} entries; accepted: at most {MAX_ITEMS} in one list or mapping")
        if self._depth >= MAX_DEPTH:
            self._refuse(event, f"nested more than {MAX_DEPTH} levels deep; accepted: at most {MAX_DEPTH}")
        # A list's item is under its index, a mapping's value under its key's text; a key (index None) adds no step.
        if index is not None:
            self._path.append(
                index if isinstance(index, int) else index.value if isinstance(index, yaml.ScalarNode) else "(key)"
            )
        if isinstance(event, yaml.AliasEvent):
            self._refuse(event, f"a YAML alias (*{event.anchor}) is not accepted in a sweep file; write the value out")
        self._nodes += 1
        if self._nodes > MAX_NODES:
            self._refuse(event, f"more than {MAX_NODES} values in the file; accepted: at most {MAX_NODES}")
        if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_SCALAR_CHARS:
            self._refuse(event, f"a value of {len(event.value)} characters; accepted: at most {MAX_SCALAR_CHARS}")
        self._depth += 1
        node = super().compose_node(parent, index)
        self._depth -= 1
        if index is not None:
            self._path.pop()
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> object:
        try:
            return super().construct_object(node, deep)
        except ValueError as error:  # an integer past Python's 4300 digits, a date such as 2001-13-45
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {node.value!r}: {error}", node.start_mark
            ) from None


def _text(path: Path) -> str:
    """The file's text, read no further than the size limit, so that a huge file costs no memory; only a regular
    file is read (opened without waiting, so that a FIFO, which would block for ever, or a device is refused)."""
    try:
        data = read_regular_bytes(path, MAX_FILE_BYTES, "sweep file")
    except UnreadableFile as error:
        raise SweepError(
            [Problem(str(path), "(file)", f"{error.reason}; a sweep file is YAML of a few dozen lines")]
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise SweepError(
            [
                Problem(
                    f"{path}, line {line}",
                    "(file)",
                    f"not UTF-8: byte 0x{data[error.start]:02x} at offset {error.start}; save the file as UTF-8",
                )
            ]
        ) from None


def parse(path: Path) -> tuple[yaml.Node | None, object]:
    """The file's node tree (for line numbers) and its value, parsed once; None, None for an empty file."""
    text = _text(path)
    try:
        loader = _BoundedLoader(text, str(path))
        root = loader.get_single_node()
        return root, (loader.construct_document(root) if root is not None else None)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}" if mark else str(path)
        raise SweepError(
            [Problem(where, "(syntax)", f"not valid YAML: {getattr(error, 'problem', None) or error}")]
        ) from None
