"""Model declarations (model.toml): what a valid one reads as, what each rule refuses and how the refusal reads
(the file, the field and what the field accepts), and the built-in models' declarations."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fwbench_core.builtin import BUILTIN_MODELS_FOLDER, MODEL_SPECS
from fwbench_core.choices import InputKind, Objective, Task
from fwbench_core.declaration import (
    DECLARATION_FILE,
    MAX_DIMENSION,
    REQUIRED,
    DeclarationError,
    parse_declaration,
    read_declaration,
)
from fwbench_core.fake import FAKE_MODELS
from fwbench_core.models import Head, ModelOption, ModelSource, ModelSpec

PATH = Path("/plugins/tiny/model.toml")
SOURCE = ModelSource("--models-dir", "/plugins/tiny", "sha256:" + "0" * 64)
NOT_A_SHAPE = f"is not a shape; a list of whole numbers from 1 to {MAX_DIMENSION}, e.g. [3, 32, 32]"

IMAGE = {
    "name": "tiny",
    "task": "vision",
    "input_kind": "image",
    "default_input_shape": [3, 8, 8],
    "min_input_shape": [3, 4, 4],
    "max_input_shape": [3, 16, 16],
    "heads": [{"name": "classification", "objective": "classify", "outputs": 10}],
}
TOKENS = {
    "name": "tiny",
    "task": "nlp",
    "input_kind": "tokens",
    "vocab_size": 100,
    "default_input_shape": [16],
    "min_input_shape": [1],
    "max_input_shape": [64],
    "heads": [{"name": "lm", "objective": "token_ce", "outputs": 100}],
}
AUDIO = {
    "name": "tiny",
    "task": "speech",
    "input_kind": "audio",
    "default_input_shape": [1600],
    "min_input_shape": [400],
    "max_input_shape": [16000],
    "heads": [{"name": "ctc", "objective": "ctc", "outputs": 29}],
}
SPECTROGRAM = {
    "name": "tiny",
    "task": "speech",
    "input_kind": "spectrogram",
    "default_input_shape": [40, 100],
    "min_input_shape": [40, 16],
    "max_input_shape": [40, 1000],
    "heads": [{"name": "ctc", "objective": "ctc", "outputs": 29}],
}


def toml_text(table: dict) -> str:
    """`table` as model.toml text: JSON's strings, numbers and lists are TOML's too."""
    lines = [f"{key} = {json.dumps(value)}" for key, value in table.items() if key != "heads"]
    for head in table.get("heads", []):
        lines += ["", "[[heads]]", *(f"{key} = {json.dumps(value)}" for key, value in head.items())]
    return "\n".join(lines) + "\n"


def changed(table: dict, **fields) -> dict:
    """`table` with `fields` set; a field set to None is left out."""
    return {key: value for key, value in {**table, **fields}.items() if value is not None}


def with_head(table: dict, **fields) -> dict:
    """`table` with its first head's `fields` set; a field set to None is left out."""
    return {**table, "heads": [changed(table["heads"][0], **fields), *table["heads"][1:]]}


def parse(table: dict) -> ModelSpec:
    return parse_declaration(PATH, toml_text(table), SOURCE)


def refusal(text_or_table) -> str:
    """The message a declaration is refused with; every one starts with the file."""
    text = text_or_table if isinstance(text_or_table, str) else toml_text(text_or_table)
    with pytest.raises(DeclarationError) as info:
        parse_declaration(PATH, text, SOURCE)
    message = str(info.value)
    assert message.startswith(f"{PATH}: "), message
    return message


def accepted(enum_type) -> str:
    return ", ".join(member.value for member in enum_type)


# --- valid declarations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "table, expected",
    [
        (
            IMAGE,
            ModelSpec(
                "tiny",
                Task.VISION,
                InputKind.IMAGE,
                "CxHxW",
                (3, 8, 8),
                (3, 4, 4),
                (3, 16, 16),
                (("classification", Head(Objective.CLASSIFY, 10)),),
                source=SOURCE,
            ),
        ),
        (
            TOKENS,
            ModelSpec(
                "tiny",
                Task.NLP,
                InputKind.TOKENS,
                "seq",
                (16,),
                (1,),
                (64,),
                (("lm", Head(Objective.TOKEN_CE, 100)),),
                vocab_size=100,
                source=SOURCE,
            ),
        ),
        (
            AUDIO,
            ModelSpec(
                "tiny",
                Task.SPEECH,
                InputKind.AUDIO,
                "audio",
                (1600,),
                (400,),
                (16000,),
                (("ctc", Head(Objective.CTC, 29)),),
                source=SOURCE,
            ),
        ),
        (
            SPECTROGRAM,
            ModelSpec(
                "tiny",
                Task.SPEECH,
                InputKind.SPECTROGRAM,
                "FxT",
                (40, 100),
                (40, 16),
                (40, 1000),
                (("ctc", Head(Objective.CTC, 29)),),
                source=SOURCE,
            ),
        ),
    ],
    ids=["image", "tokens", "audio", "spectrogram"],
)
def test_a_minimal_declaration_of_each_input_kind_reads_as_its_spec(table, expected):
    assert parse(table) == expected


def test_optional_fields_read_as_given():
    spec = parse(changed(IMAGE, description="A tiny CNN", input_convention="CxHxW"))
    assert (spec.description, spec.input_convention) == ("A tiny CNN", "CxHxW")


def test_two_heads_make_a_head_option_with_the_first_as_default():
    spec = parse(
        {**TOKENS, "heads": [*TOKENS["heads"], {"name": "classification", "objective": "classify", "outputs": 2}]}
    )
    assert [name for name, _ in spec.heads] == ["lm", "classification"]
    assert spec.options[0].choices == ("lm", "classification") and spec.options[0].default == "lm"


# --- refusals, each naming the file, the field and what it accepts -------------------------------


def test_text_that_is_not_toml_is_refused_saying_where():
    message = refusal('name = "tiny"\ntask vision\n')
    assert message.startswith(f"{PATH}: not valid TOML: ") and "line 2" in message


@pytest.mark.parametrize("field", REQUIRED)
def test_a_missing_required_field_is_named_with_every_required_one(field):
    message = refusal(changed(IMAGE, **{field: None}))
    assert message == f"{PATH}: {field}: missing; a declaration needs {', '.join(REQUIRED)}"


def test_an_unknown_field_is_named_with_the_closest_known_one_and_every_known_one():
    message = refusal(changed(IMAGE, descriptoin="A tiny CNN"))
    assert message.startswith(f"{PATH}: descriptoin: unknown field (did you mean description?); fields: name, task, ")
    assert message.endswith("input_convention, vocab_size, description, generates, options")


def test_an_unknown_head_field_is_named_with_the_closest_known_one():
    message = refusal(with_head(IMAGE, output=3))
    assert message == (
        f"{PATH}: heads[0]: unknown field 'output' (did you mean outputs?); a head has exactly: name, objective, outputs"
    )


def test_a_head_missing_a_field_is_named():
    message = refusal(with_head(IMAGE, outputs=None))
    assert message == f"{PATH}: heads[0]: missing outputs; a head has exactly: name, objective, outputs"


@pytest.mark.parametrize(
    "table, field, value, closest, enum_type",
    [
        (changed(IMAGE, task="visoin"), "task", "visoin", " (did you mean vision?)", Task),
        (changed(IMAGE, input_kind="picture"), "input_kind", "picture", "", InputKind),
        (
            with_head(IMAGE, objective="clasify"),
            "heads[0].objective",
            "clasify",
            " (did you mean classify?)",
            Objective,
        ),
    ],
    ids=["task", "input_kind", "objective"],
)
def test_a_wrong_choice_lists_every_accepted_value(table, field, value, closest, enum_type):
    assert (
        refusal(table) == f"{PATH}: {field}: {value!r} is not accepted{closest}; accepted values: {accepted(enum_type)}"
    )


def test_an_input_convention_other_than_the_kinds_is_refused_naming_the_accepted_one():
    message = refusal(changed(IMAGE, input_convention="HxWxC"))
    assert message == f"{PATH}: input_convention: 'HxWxC' is not accepted for image inputs; accepted: 'CxHxW'"


@pytest.mark.parametrize(
    "field, shape", [("default_input_shape", [8, 8]), ("min_input_shape", [3, 4, 4, 1]), ("max_input_shape", [16])]
)
def test_a_shape_of_the_wrong_rank_is_refused_naming_the_convention(field, shape):
    message = refusal(changed(IMAGE, **{field: shape}))
    assert message == f"{PATH}: {field}: {shape} has {len(shape)} dimensions; CxHxW has 3"


@pytest.mark.parametrize("default", [[3, 2, 8], [3, 8, 32]], ids=["below-min", "above-max"])
def test_a_default_shape_outside_min_and_max_is_refused(default):
    message = refusal(changed(IMAGE, default_input_shape=default))
    assert message == (
        f"{PATH}: default_input_shape: {default} must lie within min_input_shape [3, 4, 4] and max_input_shape "
        "[3, 16, 16], dimension by dimension"
    )


@pytest.mark.parametrize(
    "field, shape",
    [
        ("default_input_shape", [3, 8.5, 8]),
        ("min_input_shape", [3, 0, 4]),
        ("min_input_shape", [3, -4, 4]),
        ("max_input_shape", [3, 16, MAX_DIMENSION + 1]),
        ("default_input_shape", [3, True, 8]),
        ("default_input_shape", []),
        ("default_input_shape", "3x8x8"),
    ],
    ids=["fraction", "zero", "negative", "too-large", "boolean", "empty", "string"],
)
def test_a_shape_that_is_not_whole_positive_numbers_is_refused(field, shape):
    message = refusal(changed(IMAGE, **{field: shape}))
    assert message.startswith(f"{PATH}: {field}: ") and message.endswith(NOT_A_SHAPE)


def test_tokens_without_a_vocab_size_are_refused_saying_token_inputs_need_one():
    message = refusal(changed(TOKENS, vocab_size=None))
    assert message.startswith(f"{PATH}: vocab_size: ") and f"a whole number from 2 to {MAX_DIMENSION}" in message
    assert "0 is not accepted" not in message and "token" in message, (
        "declaration.py parse_declaration: a missing vocab_size is reported as the value 0, which the file "
        f"does not hold; the message should say vocab_size is missing and token inputs need one: {message}"
    )


@pytest.mark.parametrize("vocab_size", [1, 2.5, "100"])
def test_a_vocab_size_that_is_no_whole_number_from_2_is_refused(vocab_size):
    message = refusal(changed(TOKENS, vocab_size=vocab_size))
    assert message == f"{PATH}: vocab_size: {vocab_size!r} is not accepted; a whole number from 2 to {MAX_DIMENSION}"


def test_a_vocab_size_on_images_is_refused():
    message = refusal(changed(IMAGE, vocab_size=100))
    assert message == f"{PATH}: vocab_size: only token inputs draw ids below a vocabulary; image inputs take none"


def test_two_heads_with_one_name_are_refused():
    message = refusal(
        {**IMAGE, "heads": [*IMAGE["heads"], {"name": "classification", "objective": "classify", "outputs": 3}]}
    )
    assert message == f"{PATH}: heads[1].name: 'classification' names two heads"


def test_a_declaration_without_heads_is_refused():
    message = refusal(toml_text(changed(IMAGE, heads=None)) + "heads = []\n")
    assert message == f"{PATH}: heads: needs one [[heads]] table or more, each with name, objective and outputs"


@pytest.mark.parametrize("outputs", [0, 1.5])
def test_head_outputs_must_be_a_whole_number_from_1(outputs):
    message = refusal(with_head(IMAGE, outputs=outputs))
    assert message == f"{PATH}: heads[0].outputs: {outputs!r} is not accepted; a whole number from 1 to {MAX_DIMENSION}"


@pytest.mark.parametrize("name", ["Tiny", "tiny-net", "9tiny", "t" * 65])
def test_a_model_name_must_be_lower_case_letters_digits_and_underscores(name):
    message = refusal(changed(IMAGE, name=name))
    assert message == (
        f"{PATH}: name: {name!r} is not a model name: lower-case letters, digits and _, starting with a letter, at most 64"
    )


def test_a_description_must_be_text_of_bounded_length():
    assert refusal(changed(IMAGE, description=3)) == f"{PATH}: description: must be a string of at most 2000 characters"
    assert refusal(changed(IMAGE, description="x" * 2001)) == (
        f"{PATH}: description: must be a string of at most 2000 characters (it has 2001)"
    )
    assert parse(changed(IMAGE, description="x" * 2000)).description == "x" * 2000


def test_a_model_declares_at_most_64_heads():
    heads = [{"name": f"h{i}", "objective": "classify", "outputs": 2} for i in range(65)]
    assert refusal(changed(IMAGE, heads=heads)) == f"{PATH}: heads: 65 heads; a model declares at most 64"
    assert len(parse(changed(IMAGE, heads=heads[:64])).heads) == 64


def test_a_declaration_over_64_kib_is_refused_before_it_is_parsed(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    # Ten megabytes in a comment: bounded by the file's size, whatever field or comment holds them.
    (folder / "model.toml").write_text(toml_text(changed(IMAGE, name="tiny")) + "#" + "x" * (10 << 20) + "\n")
    with pytest.raises(DeclarationError) as info:
        read_declaration(folder, SOURCE)
    assert str(info.value).startswith(f"{folder / 'model.toml'}: over 64 KiB; a declaration holds at most 64 KiB")


# --- reading a declaration from its folder -------------------------------------------------------


def test_a_declaration_read_from_its_folder_carries_its_source(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / DECLARATION_FILE).write_text(toml_text(IMAGE))
    assert read_declaration(folder, SOURCE) == parse(IMAGE)


def test_a_name_other_than_its_folders_is_refused(tmp_path):
    folder = tmp_path / "tiny_cnn"
    folder.mkdir()
    (folder / DECLARATION_FILE).write_text(toml_text(IMAGE))
    with pytest.raises(DeclarationError) as info:
        read_declaration(folder, SOURCE)
    assert str(info.value) == (
        f"{folder / DECLARATION_FILE}: name: 'tiny' differs from its folder's name 'tiny_cnn'; they must be the same"
    )


def test_a_folder_without_a_declaration_is_refused_naming_the_file(tmp_path):
    with pytest.raises(DeclarationError, match="^" + str(tmp_path / DECLARATION_FILE) + ": cannot be read: "):
        read_declaration(tmp_path, SOURCE)


# --- the built-in models -------------------------------------------------------------------------


def vision(name: str, side: int = 224, min_side: int = 32) -> ModelSpec:
    return ModelSpec(
        name,
        Task.VISION,
        InputKind.IMAGE,
        "CxHxW",
        (3, side, side),
        (3, min_side, min_side),
        (3, 4096, 4096),
        (("classification", Head(Objective.CLASSIFY, 1000)),),
    )


def text(name: str, seq: int, max_seq: int, vocab: int, heads: tuple, generates: bool = False) -> ModelSpec:
    return ModelSpec(
        name, Task.NLP, InputKind.TOKENS, "seq", (seq,), (1,), (max_seq,), heads, vocab_size=vocab, generates=generates
    )


# What the runners' builders were written against (the catalog before the declarations moved to model.toml).
EXPECTED_BUILT_INS = {
    spec.name: spec
    for spec in (
        vision("resnet18"),
        vision("resnet50"),
        vision("resnet152"),
        vision("vgg16"),
        vision("mobilenet_v2"),
        vision("efficientnet_b0"),
        vision("efficientnet_b4", side=380),
        vision("inception_v3", side=299, min_side=75),
        vision("vit_b16"),
        text(
            "bert_base",
            128,
            512,
            30522,
            (("classification", Head(Objective.CLASSIFY, 2)), ("mlm", Head(Objective.TOKEN_CE, 30522))),
        ),
        text("gpt2_small", 1024, 1024, 50257, (("causal_lm", Head(Objective.TOKEN_CE, 50257)),), generates=True),
        text("lstm_lm", 35, 4096, 10000, (("lm", Head(Objective.TOKEN_CE, 10000)),)),
        replace(
            text("llama_small", 1024, 2048, 32000, (("causal_lm", Head(Objective.TOKEN_CE, 32000)),), generates=True),
            declared_options=(ModelOption("size", ("small", "tiny")),),
        ),
        ModelSpec(
            "deepspeech2",
            Task.SPEECH,
            InputKind.SPECTROGRAM,
            "FxT",
            (161, 400),
            (161, 16),
            (161, 10000),
            (("ctc", Head(Objective.CTC, 29)),),
        ),
        ModelSpec(
            "wav2vec2_base",
            Task.SPEECH,
            InputKind.AUDIO,
            "audio",
            (16000,),
            (400,),
            (480000,),
            (("ctc", Head(Objective.CTC, 32)),),
        ),
    )
}


def test_every_built_in_folder_is_declared_as_expected_and_the_fake_runner_builds_each():
    assert sorted(folder.name for folder in BUILTIN_MODELS_FOLDER.iterdir() if folder.is_dir()) == sorted(MODEL_SPECS)
    assert sorted(MODEL_SPECS) == sorted(EXPECTED_BUILT_INS) == FAKE_MODELS.names()


@pytest.mark.parametrize("name", sorted(EXPECTED_BUILT_INS))
def test_each_built_in_declaration_reads_as_the_runners_expect(name):
    spec = read_declaration(BUILTIN_MODELS_FOLDER / name, ModelSource())
    assert spec.source.built_in and spec.description, "a built-in has no folder of its own and says what it is"
    assert replace(spec, description="") == EXPECTED_BUILT_INS[name]
    assert MODEL_SPECS[name] == spec


def test_a_declaration_names_options_beside_its_head_and_whether_it_generates(tmp_path):
    declared = (
        'name = "decoder"\ntask = "nlp"\ninput_kind = "tokens"\ndefault_input_shape = [8]\nmin_input_shape = [1]\n'
        "max_input_shape = [64]\nvocab_size = 100\ngenerates = true\n"
        '[[heads]]\nname = "lm"\nobjective = "token_ce"\noutputs = 100\n'
        '[[options]]\nname = "size"\nchoices = ["small", "tiny"]\n'
    )
    spec = parse_declaration(tmp_path / "model.toml", declared, ModelSource())
    assert spec.generates and [(o.name, o.choices, o.default) for o in spec.options] == [
        ("size", ("small", "tiny"), "small")
    ]
    for broken, field in (
        (declared.replace('choices = ["small", "tiny"]', "choices = []"), "options[0].choices"),
        (declared.replace('name = "size"', 'name = "Size"'), "options[0].name"),
        (declared.replace("generates = true", 'generates = "yes"'), "generates"),
    ):
        with pytest.raises(DeclarationError) as refused:
            parse_declaration(tmp_path / "model.toml", broken, ModelSource())
        assert f": {field}: " in str(refused.value)
