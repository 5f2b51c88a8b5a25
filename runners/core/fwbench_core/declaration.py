"""A model's declaration (`model.toml`): what it accepts and outputs, the same for every framework.

Built-in models and users' plug-ins are declared alike and read here, so both pass the same rules. Field names
are ModelSpec's; every error names the file, the field and what the field accepts.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .choices import InputKind, Objective, Task
from .errors import did_you_mean
from .models import HEAD_OPTION, Head, ModelOption, ModelSource, ModelSpec
from .safe_read import FileRefused, FileTooLarge, read_small_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - runner images older than Python 3.11
    import tomli as tomllib

DECLARATION_FILE = "model.toml"
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,63}")
# A sample's dimension may be this large at most: bigger is a typo, not a model.
MAX_DIMENSION = 1 << 24
# Bounds on what a declaration may hold, so that every model's listing fits a reply (gRPC's 4 MiB) many times over.
MAX_DECLARATION_BYTES = 64 << 10
MAX_DESCRIPTION_CHARS = 2000
MAX_HEADS = 64
# Arrays and inline tables within one another: a declaration needs 2 ([[heads]], a shape); the TOML parser recurses
# once a level, and some 300 levels end the runner's start with a RecursionError.
MAX_NESTING = 16
# The conventions each input kind's runners understand (images are converted to each framework's layout).
CONVENTIONS = {
    InputKind.IMAGE: "CxHxW",
    InputKind.TOKENS: "seq",
    InputKind.AUDIO: "audio",
    InputKind.SPECTROGRAM: "FxT",
}
REQUIRED = ("name", "task", "input_kind", "default_input_shape", "min_input_shape", "max_input_shape", "heads")
OPTIONAL = ("input_convention", "vocab_size", "description", "generates", "options")
HEAD_FIELDS = ("name", "objective", "outputs")
OPTION_FIELDS = ("name", "choices")
MAX_OPTIONS = 8
MAX_CHOICES = 16


class DeclarationError(ValueError):
    """A model.toml that breaks a rule; the message names the file and the field."""


def _choices(enum_type) -> str:
    return ", ".join(member.value for member in enum_type)


class _Reader:
    def __init__(self, path: Path, table: dict) -> None:
        self.path, self.table = path, table

    def fail(self, field: str, problem: str) -> DeclarationError:
        return DeclarationError(f"{self.path}: {field}: {problem}")

    def enum(self, field: str, enum_type, value=None):
        value = self.table.get(field) if value is None else value
        try:
            return enum_type(value)
        except ValueError:
            raise self.fail(
                field,
                f"{value!r} is not accepted{did_you_mean(value, [m.value for m in enum_type])}; "
                f"accepted values: {_choices(enum_type)}",
            ) from None

    def shape(self, field: str) -> tuple[int, ...]:
        value = self.table[field]
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= MAX_DIMENSION for d in value)
        ):
            raise self.fail(
                field, f"{value!r} is not a shape; a list of whole numbers from 1 to {MAX_DIMENSION}, e.g. [3, 32, 32]"
            )
        return tuple(value)

    def integer(self, field: str, value, low: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_DIMENSION:
            raise self.fail(field, f"{value!r} is not accepted; a whole number from {low} to {MAX_DIMENSION}")
        return value


def _heads(reader: _Reader) -> tuple[tuple[str, Head], ...]:
    heads = reader.table["heads"]
    if not isinstance(heads, list) or not heads or not all(isinstance(h, dict) for h in heads):
        raise reader.fail("heads", "needs one [[heads]] table or more, each with name, objective and outputs")
    if len(heads) > MAX_HEADS:
        raise reader.fail("heads", f"{len(heads)} heads; a model declares at most {MAX_HEADS}")
    parsed: list[tuple[str, Head]] = []
    for index, head in enumerate(heads):
        field = f"heads[{index}]"
        if problem := _fields_problem(head, HEAD_FIELDS, "a head"):
            raise reader.fail(field, problem)
        name = head["name"]
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise reader.fail(
                f"{field}.name", f"{name!r} is not a name: lower-case letters, digits and _, starting with a letter"
            )
        if name in dict(parsed):
            raise reader.fail(f"{field}.name", f"{name!r} names two heads")
        objective = reader.enum(f"{field}.objective", Objective, head["objective"])
        parsed.append((name, Head(objective, reader.integer(f"{field}.outputs", head["outputs"], 1))))
    return tuple(parsed)


def _fields_problem(table: dict, fields: tuple[str, ...], what: str) -> str:
    """What is wrong with a [[heads]] or [[options]] table's fields; "" where nothing is."""
    unknown = sorted(set(table) - set(fields))
    missing = [name for name in fields if name not in table]
    if not unknown and not missing:
        return ""
    problem = (
        f"missing {', '.join(missing)}"
        if missing
        else f"unknown field {unknown[0]!r}{did_you_mean(unknown[0], fields)}"
    )
    return f"{problem}; {what} has exactly: {', '.join(fields)}"


def _options(reader: _Reader, heads: tuple[tuple[str, Head], ...]) -> tuple[ModelOption, ...]:
    """The [[options]] a model takes beside its head (a size, a variant): each a name and its choices, the first the
    default; a builder reads the chosen one from the run's model options."""
    options = reader.table.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, dict) for o in options) or len(options) > MAX_OPTIONS:
        raise reader.fail("options", f"at most {MAX_OPTIONS} [[options]] tables, each with name and choices")
    taken = {HEAD_OPTION} if len(heads) > 1 else set()
    parsed = []
    for index, option in enumerate(options):
        field = f"options[{index}]"
        if problem := _fields_problem(option, OPTION_FIELDS, "an option"):
            raise reader.fail(field, problem)
        name, choices = option["name"], option["choices"]
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or name in taken:
            raise reader.fail(f"{field}.name", f"{name!r} is not a new option name: lower-case letters, digits and _")
        if (
            not isinstance(choices, list)
            or not 1 <= len(choices) <= MAX_CHOICES
            or not all(isinstance(c, str) and NAME_PATTERN.fullmatch(c) for c in choices)
            or len(set(choices)) != len(choices)
        ):
            raise reader.fail(
                f"{field}.choices", f"{choices!r} is not accepted; 1 to {MAX_CHOICES} distinct names, the default first"
            )
        taken.add(name)
        parsed.append(ModelOption(name, tuple(choices)))
    return tuple(parsed)


def _too_deep(text: str) -> int:
    """The line where TOML `text` first nests arrays and inline tables over MAX_NESTING deep (0: nowhere), counting
    brackets and braces outside strings and comments, before the parser recurses into them."""
    depth, at = 0, 0
    while at < len(text):
        char = text[at]
        if char == "#":
            newline = text.find("\n", at)
            at = len(text) if newline < 0 else newline
            continue
        if char in "\"'":
            at = _after_string(text, at)
            continue
        if char in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return text.count("\n", 0, at) + 1
        elif char in "]}":
            depth = max(0, depth - 1)
        at += 1
    return 0


def _after_string(text: str, at: int) -> int:
    """Where the TOML string that opens at `at` ends: after its closing quotes, or at the end of the line where a
    one-line string is left open (TOML refuses it; the count reads on)."""
    quote = text[at]
    delimiter = quote * 3 if text.startswith(quote * 3, at) else quote
    at += len(delimiter)
    while at < len(text) and not text.startswith(delimiter, at):
        if text[at] == "\n" and len(delimiter) == 1:
            return at
        at += 2 if quote == '"' and text[at] == "\\" else 1
    at += len(delimiter)
    if len(delimiter) == 3:  # a multi-line string's last one or two quotes may be its own: """a"""""
        at += len(text[at : at + 2]) - len(text[at : at + 2].lstrip(quote))
    return at


def parse_declaration(path: Path, text: str, source: ModelSource) -> ModelSpec:
    """The ModelSpec that `text` (the contents of `path`) declares; DeclarationError where it breaks a rule."""
    if line := _too_deep(text):
        raise DeclarationError(
            f"{path}: line {line}: arrays and tables nest over {MAX_NESTING} deep; a declaration "
            f"nests at most {MAX_NESTING} (its shapes and [[heads]] need 2)"
        )
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise DeclarationError(f"{path}: not valid TOML: {error}") from None
    reader = _Reader(path, table)
    unknown = sorted(set(table) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise reader.fail(
            unknown[0],
            f"unknown field{did_you_mean(unknown[0], REQUIRED + OPTIONAL)}; fields: {', '.join(REQUIRED + OPTIONAL)}",
        )
    missing = [name for name in REQUIRED if name not in table]
    if missing:
        raise reader.fail(missing[0], f"missing; a declaration needs {', '.join(REQUIRED)}")
    name = table["name"]
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise reader.fail(
            "name",
            f"{name!r} is not a model name: lower-case letters, digits and _, starting with a letter, at most 64",
        )
    task = reader.enum("task", Task)
    input_kind = reader.enum("input_kind", InputKind)
    convention = table.get("input_convention", CONVENTIONS[input_kind])
    if convention != CONVENTIONS[input_kind]:
        raise reader.fail(
            "input_convention",
            f"{convention!r} is not accepted for {input_kind.value} inputs; accepted: {CONVENTIONS[input_kind]!r}",
        )
    default, low, high = (reader.shape(f) for f in ("default_input_shape", "min_input_shape", "max_input_shape"))
    rank = len(convention.split("x"))
    for field, shape in (("default_input_shape", default), ("min_input_shape", low), ("max_input_shape", high)):
        if len(shape) != rank:
            raise reader.fail(field, f"{list(shape)} has {len(shape)} dimensions; {convention} has {rank}")
    if not all(a <= b <= c for a, b, c in zip(low, default, high)):
        raise reader.fail(
            "default_input_shape",
            f"{list(default)} must lie within min_input_shape {list(low)} and max_input_shape {list(high)}, dimension by dimension",
        )
    vocab_size = table.get("vocab_size", 0)
    if input_kind is InputKind.TOKENS:
        if "vocab_size" not in table:
            raise reader.fail(
                "vocab_size",
                f"missing; token inputs draw ids below a vocabulary size, a whole number from 2 to {MAX_DIMENSION}",
            )
        vocab_size = reader.integer("vocab_size", vocab_size, 2)
    elif vocab_size:
        raise reader.fail(
            "vocab_size", f"only token inputs draw ids below a vocabulary; {input_kind.value} inputs take none"
        )
    description = table.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
        raise reader.fail(
            "description",
            f"must be a string of at most {MAX_DESCRIPTION_CHARS} characters"
            + (f" (it has {len(description)})" if isinstance(description, str) else ""),
        )
    generates = table.get("generates", False)
    if not isinstance(generates, bool) or (generates and input_kind is not InputKind.TOKENS):
        raise reader.fail(
            "generates", f"{generates!r} is not accepted; true only for a decoder of token inputs, else false"
        )
    heads = _heads(reader)
    return ModelSpec(
        name=name,
        task=task,
        input_kind=input_kind,
        input_convention=convention,
        default_input_shape=default,
        min_input_shape=low,
        max_input_shape=high,
        heads=heads,
        vocab_size=vocab_size,
        description=description,
        source=source,
        generates=generates,
        declared_options=_options(reader, heads),
    )


def read_declaration(folder: Path, source: ModelSource) -> ModelSpec:
    """The declaration in `folder`; its name must be the folder's, so a listing and a path never disagree."""
    path = folder / DECLARATION_FILE
    try:
        text = read_small_file(path, MAX_DECLARATION_BYTES).decode("utf-8")
    except FileTooLarge:
        raise DeclarationError(
            f"{path}: over {MAX_DECLARATION_BYTES >> 10} KiB; a declaration holds at most "
            f"{MAX_DECLARATION_BYTES >> 10} KiB (a description of {MAX_DESCRIPTION_CHARS} "
            "characters at most, and the shapes and heads)"
        ) from None
    except FileRefused as error:
        raise DeclarationError(str(error)) from None
    except UnicodeDecodeError as error:
        raise DeclarationError(f"{path}: not UTF-8 text: {error}") from None
    spec = parse_declaration(path, text, source)
    if spec.name != folder.name:
        raise DeclarationError(
            f"{path}: name: {spec.name!r} differs from its folder's name {folder.name!r}; they must be the same"
        )
    return spec
