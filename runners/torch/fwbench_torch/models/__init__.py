"""PyTorch builders for the catalog's models, registered by name; no weights are downloaded.

Every builder, a plug-in's build_torch.py `build` too, takes (spec, input_shape, options) and returns a module whose
output is logits: (batch, classes), (batch, seq, vocab), or for CTC
(batch, frames, alphabet). One module per task registers its models here.
"""

import logging

import torch

from fwbench_core.model_resolution import resolve_options
from fwbench_core.models import ModelSpec
from fwbench_core.plugin_modules import PluginError, builder_attribute
from fwbench_core.registry import ModelRegistry

from ..generation import CACHE_INTERFACE, can_generate

log = logging.getLogger("fwbench.runner")


def plugin_builder(module, folder):
    """A plug-in's build_torch.py: build(spec, input_shape, options) -> torch.nn.Module."""
    return builder_attribute(module, folder, "torch", "build", "spec, input_shape, options")


def check_plugin_decoder(build, spec: ModelSpec) -> None:
    """A plug-in that declares it generates must build a module with the cache interface: refused at load, not at
    its first run. Built on PyTorch's meta device, which allocates no weights; a build that cannot run there (it
    reads a file into its weights, say) is checked at its first generate run instead."""
    try:
        with torch.device("meta"):
            model = build(spec, spec.default_input_shape, resolve_options(spec, {}))
    except Exception as error:  # the plug-in's own code: what it raises is its run's to report
        log.info(
            "plug-in %s: build() on the meta device raised %r; its decoder is checked when it generates",
            spec.name,
            error,
        )
        return
    if not can_generate(model):
        raise PluginError(
            f"{spec.source.folder}/build_torch.py: model.toml declares generates = true, but build()'s model "
            f"({type(model).__name__}) has no {CACHE_INTERFACE}, which generation needs (docs/your-model.md, A decoder "
            "that generates)"
        )


MODELS: ModelRegistry = ModelRegistry("torch", plugin_builder, check_plugin_decoder)

from . import llama, speech, text, vision, vit  # noqa: E402,F401  (each registers its models)
