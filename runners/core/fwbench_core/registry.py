"""A framework's model builders, keyed by the catalog's names."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

from .catalog import MODEL_SPECS

Builder = TypeVar("Builder", bound=Callable)


class ModelRegistry(Generic[Builder]):
    def __init__(self, framework: str) -> None:
        self.framework = framework
        self._builders: dict[str, Builder] = {}

    def register(self, name: str) -> Callable[[Builder], Builder]:
        if name not in MODEL_SPECS:
            raise ValueError(f"{self.framework}: {name!r} has no entry in fwbench_core.catalog.MODEL_SPECS")
        if name in self._builders:
            raise ValueError(f"{self.framework}: model {name!r} is registered twice")

        def add(builder: Builder) -> Builder:
            self._builders[name] = builder
            return builder

        return add

    def names(self) -> list[str]:
        return sorted(self._builders)

    def builder(self, name: str) -> Builder:
        return self._builders[name]
