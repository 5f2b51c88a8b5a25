"""A framework's model builders: the built-ins it registers by name, and how it builds a plug-in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, TypeVar, cast

from .builtin import MODEL_SPECS
from .models import BUILT_IN, ModelSpec
from .plugins import plugin_builder

Builder = TypeVar("Builder")
# Turns a plug-in's builder module (build_<framework>.py) into the framework's builder; raises PluginError
# naming what the module lacks.
PluginBuilder = Callable[[ModuleType, Path], Builder]
# Given a plug-in's builder and its spec, where the spec declares `generates`: raises PluginError naming what the
# builder lacks for generation (the framework's cache interface), so that the plug-in is refused at load.
DecoderCheck = Callable[[Any, ModelSpec], None]


class ModelRegistry(Generic[Builder]):
    def __init__(
        self,
        framework: str,
        make_plugin_builder: PluginBuilder[Builder] | None = None,
        check_plugin_decoder: DecoderCheck | None = None,
    ) -> None:
        self.framework = framework
        self.make_plugin_builder = make_plugin_builder
        self.check_plugin_decoder = check_plugin_decoder
        self._builders: dict[str, Builder] = {}

    def register(self, name: str) -> Callable[[Builder], Builder]:
        if name not in MODEL_SPECS:
            raise ValueError(f"{self.framework}: {name!r} has no declaration in fwbench_core/builtin_models")
        if name in self._builders:
            raise ValueError(f"{self.framework}: model {name!r} is registered twice")

        def add(builder: Builder) -> Builder:
            self._builders[name] = builder
            return builder

        return add

    def serving_plugins_as(
        self,
        framework: str,
        make_plugin_builder: PluginBuilder[Builder],
        check_plugin_decoder: DecoderCheck | None = None,
    ) -> ModelRegistry[Builder]:
        """These built-ins, for another runner that shares their definitions (Keras' on TensorFlow and on every
        Keras backend), reading plug-ins' build_<framework>.py its own way."""
        shared = ModelRegistry(framework, make_plugin_builder, check_plugin_decoder)
        shared._builders = dict(self._builders)
        return shared

    def names(self) -> list[str]:
        """The built-in models this framework builds."""
        return sorted(self._builders)

    def builder(self, spec: ModelSpec) -> Builder:
        """How to build `spec`: a built-in's registered builder, or its plug-in folder's."""
        if spec.source.built_in:
            return self._builders[spec.name]
        if self.make_plugin_builder is None:
            raise ValueError(f"{self.framework}: builds no plug-in ({spec.name} from {spec.source}; not {BUILT_IN})")
        # plugin_builder keeps every framework's builders, as objects, by framework: this framework's were made by
        # its own make_plugin_builder.
        return cast(Builder, plugin_builder(self.framework, spec, self.make_plugin_builder))
