"""'Did you mean ...?': the closest accepted value to a slip, for every message that refuses a value."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# Slips no edit distance finds: another name for the same thing.
ALIASES = {
    "fp16": "amp_fp16",
    "float16": "amp_fp16",
    "half": "amp_fp16",
    "amp": "amp_fp16",
    "bf16": "amp_bf16",
    "bfloat16": "amp_bf16",
    "float32": "fp32",
    "single": "fp32",
    "pytorch": "torch",
    "pt": "torch",
    "tf": "tensorflow",
    "keras": "tensorflow",
    "nchw": "channels_first",
    "nhwc": "channels_last",
    "jit": "xla",
    "compile": "torch_compile",
    "onnx": "onnxruntime",
    "ort": "onnxruntime",
    "training": "train",
    "inference": "infer",
    "eval": "infer",
}


def closest(text: object, accepted: Iterable[str]) -> str | None:
    """The accepted value `text` most likely meant, or None where none is close."""
    choices = [str(choice) for choice in accepted]
    if not isinstance(text, str) or not choices:
        return None
    lowered = text.strip().lower()
    for candidate in (lowered, lowered.replace("-", "_"), ALIASES.get(lowered)):
        if candidate in choices and candidate != text:
            return candidate
    alias = ALIASES.get(lowered)
    if alias is not None:
        matches = [choice for choice in choices if alias in choice]
        if matches:
            return matches[0]
    found = difflib.get_close_matches(lowered, choices, n=1, cutoff=0.6)
    return found[0] if found and found[0] != text else None


def did_you_mean(text: object, accepted: Iterable[str]) -> str:
    """ " (did you mean resnet18?)" where one is close, else "": an aside to follow the refused value."""
    guess = closest(text, accepted)
    return f" (did you mean {guess}?)" if guess else ""
