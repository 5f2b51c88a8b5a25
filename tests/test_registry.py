"""The model registry and the catalog."""

from __future__ import annotations

import pytest

from fwbench_core.builtin import BUILTIN_MODELS_FOLDER, MODEL_SPECS
from fwbench_core.catalog import Catalog
from fwbench_core.errors import FailedPrecondition, NotFound
from fwbench_core.registry import ModelRegistry


def test_registry_refuses_a_name_outside_the_catalog():
    registry = ModelRegistry("test")
    with pytest.raises(ValueError, match="not_a_model"):
        registry.register("not_a_model")
    assert registry.names() == []


def test_registry_refuses_duplicates():
    registry = ModelRegistry("test")
    registry.register("resnet18")(lambda: "first")
    with pytest.raises(ValueError, match="twice"):
        registry.register("resnet18")
    assert registry.builder(MODEL_SPECS["resnet18"])() == "first"


def test_registry_lists_sorted_names():
    registry = ModelRegistry("test")
    for name in ("resnet18", "mobilenet_v2"):
        registry.register(name)(lambda: None)
    assert registry.names() == ["mobilenet_v2", "resnet18"]


def test_catalog_finds_a_model_or_says_which_are_known_and_why_one_is_not_served():
    catalog = Catalog(dict(MODEL_SPECS), {"tiny": "plug-in /m/tiny has no build_test.py"})
    assert catalog.spec("resnet18").default_input_shape == (3, 224, 224)
    with pytest.raises(
        NotFound, match=r"'resnet81' \(did you mean resnet18\?\); known models: " + ", ".join(sorted(MODEL_SPECS))
    ):
        catalog.spec("resnet81")
    with pytest.raises(FailedPrecondition, match="not served by this runner: plug-in /m/tiny has no build_test.py"):
        catalog.spec("tiny")


def test_the_built_in_declarations_are_read_from_model_toml_as_plug_ins_are():
    assert sorted(MODEL_SPECS) == sorted(folder.name for folder in BUILTIN_MODELS_FOLDER.iterdir() if folder.is_dir())
    bert = MODEL_SPECS["bert_base"]
    assert bert.source.built_in and bert.vocab_size == 30522
    assert [name for name, _ in bert.heads] == ["classification", "mlm"]
    assert MODEL_SPECS["deepspeech2"].input_convention == "FxT"
