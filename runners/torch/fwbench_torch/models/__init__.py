"""PyTorch builders for the catalog's models, registered by name; no weights are downloaded.

Every builder takes (spec, input_shape, options) and returns a module whose
output is logits: (batch, classes), (batch, seq, vocab), or for CTC
(batch, frames, alphabet). One module per task registers its models here.
"""

from fwbench_core.registry import ModelRegistry

MODELS: ModelRegistry = ModelRegistry("torch")

from . import speech, text, vision  # noqa: E402,F401  (each registers its models)
