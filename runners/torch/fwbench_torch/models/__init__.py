"""PyTorch builders for the catalog's models, registered by name; no weights are downloaded.

Every builder, a plug-in's build_torch.py `build` too, takes (spec, input_shape, options) and returns a module whose
output is logits: (batch, classes), (batch, seq, vocab), or for CTC
(batch, frames, alphabet). One module per task registers its models here.
"""

from fwbench_core.plugin_modules import builder_attribute
from fwbench_core.registry import ModelRegistry


def plugin_builder(module, folder):
    """A plug-in's build_torch.py: build(spec, input_shape, options) -> torch.nn.Module."""
    return builder_attribute(module, folder, "torch", "build", "spec, input_shape, options")


MODELS: ModelRegistry = ModelRegistry("torch", plugin_builder)

from . import llama, speech, text, vision, vit  # noqa: E402,F401  (each registers its models)
