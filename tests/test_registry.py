"""The model registry and the catalog."""

from __future__ import annotations

import pytest

from fwbench_core.catalog import MODEL_SPECS, get_spec
from fwbench_core.errors import NotFound
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
    assert registry.builder("resnet18")() == "first"


def test_registry_lists_sorted_names():
    registry = ModelRegistry("test")
    for name in ("resnet18", "mobilenet_v2"):
        registry.register(name)(lambda: None)
    assert registry.names() == ["mobilenet_v2", "resnet18"]


def test_catalog_get_spec():
    assert get_spec("resnet18").default_input_shape == (3, 224, 224)
    with pytest.raises(NotFound, match="known models: " + ", ".join(sorted(MODEL_SPECS))):
        get_spec("nope")
