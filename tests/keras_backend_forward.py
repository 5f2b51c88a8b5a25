"""Run in a framework's environment with KERAS_BACKEND set (test_keras_backends.py): the built-in models' Keras
definitions (fwbench_keras.models) named built and run forward on this Keras backend.

    python keras_backend_forward.py export FOLDER MODEL...  each model's input and output, and its weights' means
                                                            and spreads, to FOLDER/<model>.npz
    python keras_backend_forward.py check FOLDER MODEL...   each model built here, given the same weights and that
                                                            input: the largest difference from the output exported,
                                                            relative to its largest magnitude

The weights are drawn from a generator seeded by their place, at the mean and spread of the TensorFlow build's own
initial values (a constant stays one): the same on every backend, without writing 2.8 GB of them.

The last line of stdout is a JSON object: per model, "ok", the figure and the seconds it took (most of it the build:
efficientnet_b4's took 19 s on JAX here), or the error."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import keras
import numpy as np
from fwbench_keras.models import MODELS

from fwbench_core.builtin import MODEL_SPECS
from fwbench_core.choices import InputKind

BATCH = 2
TOKENS = 16  # a sequence's tokens; images and audio at their declared smallest shape
OPTIONS = {"llama_small": {"size": "tiny"}}


def example(spec) -> tuple[tuple[int, ...], np.ndarray]:
    shape = (TOKENS,) if spec.input_kind is InputKind.TOKENS else tuple(spec.min_input_shape)
    if spec.input_kind is InputKind.IMAGE:
        shape = (*shape[1:], shape[0])  # Keras' layout, channels last
    rng = np.random.default_rng(0)
    if spec.input_kind is InputKind.TOKENS:
        return shape, rng.integers(0, spec.vocab_size, (BATCH, *shape)).astype("int32")
    return shape, rng.standard_normal((BATCH, *shape)).astype("float32")


def built(spec, shape) -> keras.Model:
    keras.utils.set_random_seed(0)
    return MODELS.builder(spec).build(spec, shape, OPTIONS.get(spec.name, {}))


def drawn(shapes: list[tuple[int, ...]], spreads: np.ndarray) -> list[np.ndarray]:
    return [
        (np.random.default_rng(place).standard_normal(shape, dtype=np.float32) * std + mean).astype("float32")
        for place, (shape, (mean, std)) in enumerate(zip(shapes, spreads))
    ]


def forward(model: keras.Model, inputs: np.ndarray) -> np.ndarray:
    output = model(inputs, training=False)
    return np.asarray(keras.ops.convert_to_numpy(output), dtype="float64")


def main(action: str, folder: Path, names: list[str]) -> dict:
    found = {}
    for name in names:
        spec = MODEL_SPECS[name]
        try:
            started = time.perf_counter()
            shape, inputs = example(spec)
            model = built(spec, shape)
            initial = model.get_weights()
            if action == "export":
                spreads = np.array([(float(w.mean()), float(w.std())) for w in initial], dtype="float64")
                model.set_weights(drawn([w.shape for w in initial], spreads))
                np.savez(folder / f"{name}.npz", inputs=inputs, output=forward(model, inputs), spreads=spreads)
                found[name] = {"ok": True, "weights": len(initial), "s": time.perf_counter() - started}
                continue
            saved = np.load(folder / f"{name}.npz")
            model.set_weights(drawn([w.shape for w in initial], saved["spreads"]))
            expected = saved["output"]
            difference = float(np.max(np.abs(forward(model, saved["inputs"]) - expected)) / np.max(np.abs(expected)))
            found[name] = {"ok": True, "relative_difference": difference, "s": time.perf_counter() - started}
        except Exception as exc:  # every model is reported, whichever fails
            found[name] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
    return found


if __name__ == "__main__":
    print(
        json.dumps({"backend": keras.backend.backend(), "models": main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])})
    )
