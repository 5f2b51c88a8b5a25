"""Fuzzing model.toml: whatever a plug-in folder's declaration holds (nesting, odd types, huge numbers, bad unicode,
binary, a valid one mutated), reading it either gives a model or raises DeclarationError, the error that names the
file and that the runner reports as the plug-in's; never another exception (a traceback ends the runner's start), and
it writes nothing, in the scratch folder or anywhere."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.plugins import declaration

from fwbench_core.declaration import DeclarationError, read_declaration
from fwbench_core.models import ModelSource

SOURCE = ModelSource("test", "folder", "sha256:0")
VALID = declaration("fuzzed").encode()
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

toml_values = st.recursive(
    st.one_of(
        st.integers(min_value=-(10**400), max_value=10**400).map(str),
        st.floats().map(repr),
        st.sampled_from(["inf", "nan", "-inf", "true", "1979-05-27T07:32:00Z", '"\\uD800"', "'x'", '"""a"""']),
        st.text(max_size=20).map(lambda t: '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(inner, max_size=3).map(lambda xs: "{" + ", ".join(f"k{i} = {x}" for i, x in enumerate(xs)) + "}"),
    ),
    max_leaves=40,
)
fields = st.sampled_from(
    [
        "name",
        "task",
        "input_kind",
        "default_input_shape",
        "min_input_shape",
        "max_input_shape",
        "heads",
        "vocab_size",
        "description",
        "input_convention",
        "unknown",
    ]
)
generated = st.lists(st.tuples(fields, toml_values), max_size=8).map(
    lambda pairs: "\n".join(f"{field} = {value}" for field, value in pairs).encode()
)
deep = st.tuples(st.sampled_from("[{"), st.integers(min_value=1, max_value=3000)).map(
    lambda c: b"x = " + (c[0] * c[1]).encode() + (("]" if c[0] == "[" else "}") * c[1]).encode()
)


@st.composite
def mutated(draw) -> bytes:
    """The valid declaration with bytes replaced, inserted and cut."""
    data = bytearray(VALID)
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        at = draw(st.integers(min_value=0, max_value=len(data)))
        edit = draw(st.sampled_from(["replace", "insert", "cut"]))
        piece = draw(
            st.binary(min_size=1, max_size=8)
            | st.sampled_from([b"[", b"{", b"]", b'"', b"'", b"\n", b"#", b"\xff", b"1e999", b"99" * 50])
        )
        if edit == "replace":
            data[at : at + len(piece)] = piece
        elif edit == "insert":
            data[at:at] = piece
        else:
            del data[at : at + len(piece)]
    return bytes(data)


def files_under(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


def read_only(text: bytes) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "fuzzed"
        folder.mkdir()
        (folder / "model.toml").write_bytes(text)
        before = files_under(Path(scratch))
        try:
            assert read_declaration(folder, SOURCE).name == "fuzzed"
        except DeclarationError as error:
            assert str(error).startswith(str(folder / "model.toml")), error
        assert files_under(Path(scratch)) == before


@FUZZ
@given(generated)
def test_generated_declarations_give_a_model_or_a_declaration_error(text):
    read_only(text)


@FUZZ
@given(deep | mutated() | st.binary(max_size=512))
def test_deep_mutated_and_binary_declarations_give_a_model_or_a_declaration_error(text):
    read_only(text)
