"""The models a runner serves: the built-ins, declared in builtin_models/<name>/model.toml and built by each
runner's own package, and the plug-ins it was pointed at, declared and built alike from a folder of their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .builtin import MODEL_SPECS
from .errors import FailedPrecondition, NotFound, did_you_mean, echoed
from .models import ModelSpec
from .plugins import PLUGIN_LIMIT_S, LoadedPlugins, PluginLocation, PluginReport, load_plugins
from .registry import ModelRegistry


@dataclass(frozen=True)
class Catalog:
    """What one runner serves: the models it builds, the declared ones it does not (and why), and every
    plug-in folder it read."""

    specs: dict[str, ModelSpec]
    not_offered: dict[str, str]
    plugins: tuple[PluginReport, ...] = ()

    def names(self) -> list[str]:
        return sorted(self.specs)

    def spec(self, name: str) -> ModelSpec:
        if name in self.specs:
            return self.specs[name]
        if name in self.not_offered:
            raise FailedPrecondition(f"model {name!r} is not served by this runner: {self.not_offered[name]}")
        raise NotFound(
            f"unknown model {echoed(name)}{did_you_mean(name, self.specs)}; known models: {', '.join(self.names())} "
            "(a model of your own is a plug-in folder the runner loads with --models-dir: docs/your-model.md)"
        )


def load_catalog(
    registry: ModelRegistry, where: Iterable[PluginLocation] = (), plugin_limit_s: float = PLUGIN_LIMIT_S
) -> Catalog:
    """The built-ins `registry` builds, and the plug-ins at `where` (each checked within `plugin_limit_s`)."""
    builtins = {name: MODEL_SPECS[name] for name in registry.names()}
    unbuilt = {
        name: f"the {registry.framework} runner has no builder for the built-in model {name}"
        for name in MODEL_SPECS
        if name not in builtins
    }
    loaded: LoadedPlugins = load_plugins(
        registry.framework,
        where,
        {name: "the built-in models" for name in MODEL_SPECS},
        registry.make_plugin_builder,
        plugin_limit_s,
        registry.check_plugin_decoder,
    )
    return Catalog({**builtins, **loaded.specs}, {**unbuilt, **loaded.not_offered}, loaded.reports)
